//go:build integration

package layerunpack

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/opencontainers/go-digest"
	"go.podman.io/storage"
	graphdriver "go.podman.io/storage/drivers"
	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/reexec"
)

// TestMain serves storage's re-executed children, so that a storage that
// no longer calls Untar fails the count below instead of recursing.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// Storage's overlay driver applies layers through Untar once Install ran:
// the layer is unpacked by this process, not by a storage-untar child, and
// storage records the same digests and tar-split it would have.
func TestOverlayAppliesLayersInProcess(t *testing.T) {
	st := overlayStore(t)
	before := unpacked.Load()
	parent := putLayer(t, st, "", map[string]string{"etc/hostname": "one\n", "bin/sh": "sh"})
	child := putLayer(t, st, parent.ID, map[string]string{"etc/hostname": "two\n"})
	if n := unpacked.Load() - before; n != 2 {
		t.Fatalf("%d layers unpacked in process, want 2", n)
	}
	mnt, err := st.Mount(child.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = st.Unmount(child.ID, true) })
	for name, want := range map[string]string{"etc/hostname": "two\n", "bin/sh": "sh"} {
		if got, err := os.ReadFile(filepath.Join(mnt, name)); err != nil || string(got) != want {
			t.Errorf("%s in the mounted layers: %q, %v; want %q", name, got, err, want)
		}
	}
	// Storage can give the diff back (tar-split recorded while applying).
	rc, err := st.Diff("", child.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) == 0 {
		t.Fatal("the child layer's diff is empty")
	}
}

func putLayer(t *testing.T, st storage.Store, parent string, files map[string]string) *storage.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	want := digest.FromBytes(b.Bytes())
	l, _, err := st.PutLayer("", parent, nil, "", false, nil, &b)
	if err != nil {
		t.Fatal(err)
	}
	if l.UncompressedDigest != want {
		t.Fatalf("layer %s recorded with digest %s, its tar has %s", l.ID, l.UncompressedDigest, want)
	}
	return l
}

func overlayStore(t *testing.T) storage.Store {
	t.Helper()
	needRoot(t)
	// overlay needs a real file system under its root, not tmpfs or overlayfs.
	dir, err := os.MkdirTemp("/var/tmp", "layerunpack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	Install()
	st, err := storage.GetStore(storage.StoreOptions{
		GraphRoot:       filepath.Join(dir, "root"),
		RunRoot:         filepath.Join(dir, "run"),
		GraphDriverName: "overlay",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = st.Shutdown(true) })
	return st
}

// Layers staged side by side with Differ and stored in order are the
// layers PutLayer stores from the same blobs: the same records, modes,
// merged tree and diffs.
func TestStagedLayersMatchPutLayer(t *testing.T) {
	st := overlayStore(t)
	tars := [][]byte{
		tarOf(t,
			&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o751},
			&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
			&tar.Header{Name: "etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4, Uid: 3, Gid: 4},
			&tar.Header{Name: "etc/motd", Typeflag: tar.TypeReg, Mode: 0o600, Size: 4}),
		tarOf(t,
			&tar.Header{Name: "etc/.wh.motd", Typeflag: tar.TypeReg},
			&tar.Header{Name: "etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4, Uid: 1000, Gid: 1000},
			&tar.Header{Name: "srv", Typeflag: tar.TypeSymlink, Linkname: "/etc"}),
	}
	var put []*storage.Layer
	for i, raw := range tars {
		parent := ""
		if i > 0 {
			parent = put[i-1].ID
		}
		l, _, err := st.PutLayer("", parent, nil, "", false, nil, gzipped(t, raw))
		if err != nil {
			t.Fatal(err)
		}
		put = append(put, l)
	}

	outs := make([]*graphdriver.DriverWithDifferOutput, len(tars))
	errs := make([]error, len(tars))
	var wg sync.WaitGroup
	for i, raw := range tars {
		wg.Go(func() {
			outs[i], errs[i] = st.PrepareStagedLayer(&graphdriver.ApplyDiffWithDifferOpts{},
				&Differ{Blob: gzipped(t, raw), Digest: digest.FromBytes(raw)})
		})
	}
	wg.Wait()
	var staged []*storage.Layer
	for i := range tars {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		parent := ""
		if i > 0 {
			parent = staged[i-1].ID
		}
		l, err := st.ApplyStagedLayer(storage.ApplyStagedLayerOptions{
			ID: "staged" + strconv.Itoa(i), ParentLayer: parent,
			DiffOutput: outs[i], DiffOptions: &graphdriver.ApplyDiffWithDifferOpts{},
		})
		if err != nil {
			t.Fatal(err)
		}
		staged = append(staged, l)
	}

	uncompressed := archive.Uncompressed
	for i := range tars {
		p, s := put[i], staged[i]
		if p.UncompressedDigest != s.UncompressedDigest || p.UncompressedSize != s.UncompressedSize ||
			!slices.Equal(p.UIDs, s.UIDs) || !slices.Equal(p.GIDs, s.GIDs) {
			t.Errorf("layer %d: PutLayer %s %d %v %v, staged %s %d %v %v", i,
				p.UncompressedDigest, p.UncompressedSize, p.UIDs, p.GIDs, s.UncompressedDigest, s.UncompressedSize, s.UIDs, s.GIDs)
		}
		var diffs [2][]byte
		for j, id := range []string{p.ID, s.ID} {
			rc, err := st.Diff("", id, &storage.DiffOptions{Compression: &uncompressed})
			if err != nil {
				t.Fatal(err)
			}
			if diffs[j], err = io.ReadAll(rc); err != nil {
				t.Fatal(err)
			}
			rc.Close()
		}
		if !bytes.Equal(diffs[0], diffs[1]) || !bytes.Equal(diffs[1], tars[i]) {
			t.Errorf("layer %d: diffs differ: PutLayer's %d bytes, staged %d, the blob's tar %d", i, len(diffs[0]), len(diffs[1]), len(tars[i]))
		}
	}
	trees := [2]string{}
	for j, id := range []string{put[1].ID, staged[1].ID} {
		mnt, err := st.Mount(id, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = st.Unmount(id, true) })
		trees[j] = treeOf(t, mnt)
	}
	if trees[0] != trees[1] {
		t.Errorf("merged trees differ:\nPutLayer:\n%s\nstaged:\n%s", trees[0], trees[1])
	}
	if !strings.Contains(trees[1], "etc/hostname -rw-r--r-- 1000:1000") || strings.Contains(trees[1], "motd") {
		t.Errorf("the child layer did not apply over its parent:\n%s", trees[1])
	}
}

func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write(bytes.Repeat([]byte{'x'}, int(h.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// treeOf lists every path under root with its mode and owner.
func treeOf(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %s %d:%d\n", rel, fi.Mode(), st.Uid, st.Gid)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
