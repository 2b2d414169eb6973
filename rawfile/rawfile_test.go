package rawfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4095, 4096, 4097, 20000, 65536} {
		want := bytes.Repeat([]byte{'x'}, size)
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Read(p, 65536)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("size %d: got %d bytes, %v", size, len(got), err)
		}
		if size > 0 {
			if _, err := Read(p, size-1); !errors.Is(err, ErrTooLarge) {
				t.Errorf("size %d with limit %d: %v, want ErrTooLarge", size, size-1, err)
			}
		}
	}
	if _, err := Read(filepath.Join(dir, "absent"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent file: %v, want not-exist", err)
	}
	// /proc files report size 0: the read must not trust the size
	if b, err := Read("/proc/self/stat", 4096); err != nil || len(b) == 0 {
		t.Errorf("/proc/self/stat: %q, %v", b, err)
	}
}
