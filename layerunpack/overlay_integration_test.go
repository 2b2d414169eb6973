//go:build integration

package layerunpack

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	"go.podman.io/storage"
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
