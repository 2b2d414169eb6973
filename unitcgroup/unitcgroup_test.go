package unitcgroup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDirAndEachPID(t *testing.T) {
	root := t.TempDir()
	unit := "/a.slice/u.service"
	if Dir(root, unit) != "" || Dir(root, "") != "" {
		t.Fatal("found a cgroup that does not exist")
	}
	d := filepath.Join(root, "systemd", unit)
	os.MkdirAll(filepath.Join(d, "container"), 0o755)
	os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte("10\n"), 0o644)
	os.WriteFile(filepath.Join(d, "container", "cgroup.procs"), []byte("11\n12\n"), 0o644)
	if got := Dir(root, unit); got != d {
		t.Fatalf("Dir = %q, want the systemd hierarchy %q", got, d)
	}
	var all []int
	EachPID(d, func(pid int) bool { all = append(all, pid); return true })
	slices.Sort(all)
	if !slices.Equal(all, []int{10, 11, 12}) {
		t.Fatalf("pids %v", all)
	}
	n := 0
	EachPID(d, func(int) bool { n++; return false })
	if n != 1 {
		t.Fatalf("EachPID went on after fn returned false: %d calls", n)
	}
	// v2: the unit's directory right under the root wins.
	v2 := filepath.Join(root, unit)
	os.MkdirAll(v2, 0o755)
	os.WriteFile(filepath.Join(v2, "cgroup.procs"), nil, 0o644)
	if got := Dir(root, unit); got != v2 {
		t.Fatalf("Dir = %q, want %q", got, v2)
	}
}
