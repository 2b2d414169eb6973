package layerunpack

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"go.podman.io/storage/pkg/archive"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: chroot")
	}
}

// entry is one member of a test layer.
type entry struct {
	name, link, body string
	typ              byte
}

func layer(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	// Zero padding after the end of the archive, as some registries'
	// layers have; Untar must consume it (storage digests all of it).
	b.Write(make([]byte, 4096))
	return &b
}

// The chroot is the thread's alone: while many unpacks run, the rest of
// the process still sees the host's root, and each fn sees its own.
func TestInRootConfinesOnlyItsThread(t *testing.T) {
	needRoot(t)
	host := t.TempDir()
	marker := filepath.Join(host, "host-only")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		root := t.TempDir()
		name := "root-" + strconv.Itoa(i)
		if err := os.WriteFile(filepath.Join(root, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			errs <- inRoot(root, func() error {
				if wd, err := os.Getwd(); err != nil || wd != "/" {
					return errors.New("working directory in the chroot: " + wd)
				}
				if _, err := os.Stat("/" + name); err != nil {
					return err
				}
				if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
					return errors.New("the host's file is visible in the chroot")
				}
				return nil
			})
		})
		wg.Go(func() {
			if _, err := os.Stat(marker); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if root, err := os.Readlink("/proc/self/root"); err != nil || root != "/" {
		t.Fatalf("process root after the unpacks: %q, %v", root, err)
	}
}

// A layer's symlinks resolve inside the layer and its paths cannot climb
// out of it; the stream is read to its end.
func TestUntarKeepsTheLayerInside(t *testing.T) {
	needRoot(t)
	outside := t.TempDir()
	dest := filepath.Join(t.TempDir(), "diff")
	src := layer(t,
		entry{name: "etc/", typ: tar.TypeDir},
		entry{name: "etc/hostname", body: "layer\n", typ: tar.TypeReg},
		entry{name: "abs", link: outside, typ: tar.TypeSymlink},
		entry{name: "abs/escaped", body: "x", typ: tar.TypeReg},
		entry{name: "rel", link: "../../../../../../..", typ: tar.TypeSymlink},
		entry{name: "rel/" + outside[1:] + "/escaped-rel", body: "x", typ: tar.TypeReg},
		entry{name: "hard", link: "etc/hostname", typ: tar.TypeLink},
	)
	if err := Untar(src, dest, &archive.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	if src.Len() != 0 {
		t.Errorf("%d bytes of the stream left unread", src.Len())
	}
	if got, err := os.ReadFile(filepath.Join(dest, "hard")); err != nil || string(got) != "layer\n" {
		t.Errorf("hard link: %q, %v", got, err)
	}
	if link, err := os.Readlink(filepath.Join(dest, "abs")); err != nil || link != outside {
		t.Errorf("symlink kept as written: %q, %v", link, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the layer wrote outside its directory: %v", ents)
	}
	// Both escapes landed in the layer, where their symlinks point from
	// inside the chroot.
	for _, p := range []string{filepath.Join(outside, "escaped"), filepath.Join(outside, "escaped-rel")} {
		if _, err := os.Stat(filepath.Join(dest, p)); err != nil {
			t.Errorf("%s not inside the layer: %v", p, err)
		}
	}

	// A name above the root is the root, as in chrootarchive's child; a
	// hard link cannot name a file outside.
	parent := t.TempDir()
	d := filepath.Join(parent, "diff")
	if err := Untar(layer(t, entry{name: "../up", body: "x", typ: tar.TypeReg}), d, &archive.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "up")); err != nil {
		t.Errorf("../up not at the layer's root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "up")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("../up written above the layer: %v", err)
	}
	host, err := os.CreateTemp("", "layerunpack-target")
	if err != nil {
		t.Fatal(err)
	}
	host.Close()
	defer os.Remove(host.Name())
	link := entry{name: "h2", link: "../../../../../.." + host.Name(), typ: tar.TypeLink}
	if err := Untar(layer(t, link), filepath.Join(t.TempDir(), "diff"), &archive.TarOptions{}); err == nil {
		t.Errorf("a hard link to %s outside the layer was made", host.Name())
	}
}

func TestUntarEmptyArchive(t *testing.T) {
	if err := Untar(nil, t.TempDir(), nil); err == nil {
		t.Fatal("nil archive unpacked")
	}
}
