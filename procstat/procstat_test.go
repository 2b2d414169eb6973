package procstat

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podunit/podunit/rawfile"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Stat{
		"1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 100 10":                    {1, "init", 'S', 0, 5, 6, 42},
		"7 (a) b (c) R 1 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 100 10":                 {7, "a) b (c", 'R', 1, 5, 6, 99},
		"7 (a) b) (c) R 1 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 100 10":                {7, "a) b) (c", 'R', 1, 5, 6, 99},
		"8 (x y) Z 3 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 18446744073709551615 1":        {8, "x y", 'Z', 3, 5, 6, 18446744073709551615},
		"9 () X 4 1 1 0 -1 4194560 1 2 3 4 50 60 7 8 20 0 1 0 7 1 2 3 4 5 6 7 8 9 10 11 12\n": {9, "", 'X', 4, 50, 60, 7},
	} {
		got, err := Parse([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "1 (x", "1 x) S", "(x) S 1 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42",
		"1 (x) S 1 2",
		"1 (x) SS 1 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42",
		"1 (x) S 1 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 -4",
		"1 (x) S p 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 4",
	} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", bad, err)
		}
	}
}

func TestReadSelf(t *testing.T) {
	s, err := Read("/proc", os.Getpid())
	if err != nil || s.Exited() || s.Start == 0 || s.PID != os.Getpid() || s.PPID != os.Getppid() {
		t.Errorf("own stat: %+v %v", s, err)
	}
	if _, err := Read("/proc", -1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of pid -1: %v, want not-exist (callers tell a gone process by it)", err)
	}
	// a file longer than any stat line is refused, not truncated
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	long := "7 (x) S 1 7 7 0 -1 " + strings.Repeat("0 ", statMax)
	if err := os.WriteFile(filepath.Join(dir, "7", "stat"), []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir, 7); !errors.Is(err, rawfile.ErrTooLarge) {
		t.Errorf("oversized stat: %v, want ErrTooLarge", err)
	}
}

func TestExited(t *testing.T) {
	for st, want := range map[byte]bool{'R': false, 'S': false, 'D': false, 'T': false, 'Z': true, 'X': true, 'x': true} {
		if got := (Stat{State: st}).Exited(); got != want {
			t.Errorf("%c: %v", st, got)
		}
	}
}
