package statefile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

type rec struct {
	ID  string
	Num int
}

func TestWriteReadRemove(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "x.json")
	var got rec
	if err := Read(p, &got); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Read missing: %v, want ErrNotFound", err)
	}
	if err := Write(p, rec{"a", 1}); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, rec{"b", 2}); err != nil {
		t.Fatal(err)
	}
	if err := Read(p, &got); err != nil || got != (rec{"b", 2}) {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := Remove(p); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if err := Read(p, &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read after Remove: %v", err)
	}
}

func TestWriteUnencodableLeavesOld(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.json")
	if err := Write(p, rec{"a", 1}); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, map[string]any{"f": func() {}}); err == nil {
		t.Fatal("Write of a func succeeded")
	}
	var got rec
	if err := Read(p, &got); err != nil || got.ID != "a" {
		t.Fatalf("old content lost: %+v %v", got, err)
	}
}

func TestReadCorrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.json")
	os.WriteFile(p, []byte("{"), 0o600)
	var got rec
	err := Read(p, &got)
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("corrupt Read = %v", err)
	}
}

func TestMove(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "a", "id")
	if err := Write(filepath.Join(src, "state.json"), rec{"a", 1}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "trash"), 0o700); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "trash", "id")
	if err := Move(src, dst); err != nil {
		t.Fatal(err)
	}
	var got rec
	if err := Read(filepath.Join(dst, "state.json"), &got); err != nil || got != (rec{"a", 1}) {
		t.Fatalf("moved: %v %v", got, err)
	}
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Errorf("source still there: %v", err)
	}
	if err := Move(src, dst); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("move of a missing source: %v, want ErrNotFound", err)
	}
	if err := Move(dst, filepath.Join(dir, "nowhere", "id")); err == nil || errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("move into a missing parent: %v, want an error other than ErrNotFound", err)
	}
}
