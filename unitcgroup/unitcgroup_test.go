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

func TestRemoveLeftover(t *testing.T) {
	root := t.TempDir()
	unit := "/a.slice/u.service"
	for _, h := range []string{"cpuset", "freezer", "systemd", "unified"} {
		os.MkdirAll(filepath.Join(root, h, unit, "container"), 0o755)
	}
	os.MkdirAll(filepath.Join(root, "freezer", "/a.slice/other.service"), 0o755)
	os.Symlink("cpuset", filepath.Join(root, "cpuset,alias"))
	if err := RemoveLeftover(root, unit); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"cpuset", "freezer"} {
		if _, err := os.Stat(filepath.Join(root, h, unit)); !os.IsNotExist(err) {
			t.Errorf("%s: unit's directory still there (%v)", h, err)
		}
		if _, err := os.Stat(filepath.Join(root, h, "a.slice")); err != nil {
			t.Errorf("%s: the parent slice went too: %v", h, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "freezer", "/a.slice/other.service")); err != nil {
		t.Errorf("another unit's directory went: %v", err)
	}
	// systemd's own hierarchies are systemd's to clean.
	for _, h := range []string{"systemd", "unified"} {
		if _, err := os.Stat(filepath.Join(root, h, unit, "container")); err != nil {
			t.Errorf("%s touched: %v", h, err)
		}
	}
	// Gone already: fine.
	if err := RemoveLeftover(root, unit); err != nil {
		t.Fatalf("second call: %v", err)
	}
	// Busy (here: not empty) is reported, the rest still removed.
	os.MkdirAll(filepath.Join(root, "cpuset", unit), 0o755)
	os.WriteFile(filepath.Join(root, "cpuset", unit, "tasks"), []byte("1\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "freezer", unit), 0o755)
	if err := RemoveLeftover(root, unit); err == nil {
		t.Fatal("a directory that could not be removed was not reported")
	}
	if _, err := os.Stat(filepath.Join(root, "freezer", unit)); !os.IsNotExist(err) {
		t.Errorf("freezer not removed beside the busy cpuset: %v", err)
	}
	for _, bad := range []string{"", "/", "a.slice/u.service", "/a.slice/../u.service", "/a.slice/u.service/"} {
		if err := RemoveLeftover(root, bad); err == nil {
			t.Errorf("path %q accepted", bad)
		}
	}
}
