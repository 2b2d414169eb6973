package stats

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

func TestDirUsage(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i) // not sparse
	}
	f := filepath.Join(dir, "a/b/file")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f, filepath.Join(dir, "a/hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b/file", filepath.Join(dir, "a/sym")); err != nil {
		t.Fatal(err)
	}
	b, n, err := DirUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// dir, a, a/b, file (linked twice, counted once), symlink
	if n != 5 || b < 1<<20 || b > 1<<20+64<<10 {
		t.Fatalf("DirUsage = %d bytes, %d inodes", b, n)
	}
	if _, _, err := DirUsage(filepath.Join(dir, "nope")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing dir: %v", err)
	}
	tb, ti, fi, err := FSInfo(dir)
	if err != nil || tb == 0 || ti == 0 || fi > ti {
		t.Fatalf("FSInfo = %d %d %d %v", tb, ti, fi, err)
	}
}
