package gc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/systemd/systemdtest"
	"golang.org/x/sys/unix"
)

func TestUnitsCollectsOnlyUnknown(t *testing.T) {
	fake := systemdtest.New()
	ctx := context.Background()
	for _, n := range []string{"podunit-known.service", "podunit-orphan.service", "podunit-failed.service", "other.service"} {
		if err := fake.StartTransientUnit(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	fake.Units["podunit-failed.service"].ActiveState = "failed"
	c := Units{Conn: fake, Patterns: []string{"podunit-*.service"}, Known: func(u string) bool { return u == "podunit-known.service" }}

	got, err := c.Collect(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"podunit-orphan.service (active: stopped)", "podunit-failed.service (failed: reset)"}
	if !reflect.DeepEqual(got, want) && !reflect.DeepEqual(got, []string{want[1], want[0]}) {
		t.Fatalf("dry run: %v", got)
	}
	if len(fake.Units) != 4 {
		t.Fatal("dry run removed units")
	}
	if _, err := c.Collect(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"podunit-orphan.service", "podunit-failed.service"} {
		if _, ok := fake.Units[n]; ok {
			t.Errorf("%s survived", n)
		}
	}
	for _, n := range []string{"podunit-known.service", "other.service"} {
		if _, ok := fake.Units[n]; !ok {
			t.Errorf("%s was collected", n)
		}
	}
}

func TestMountPointsUnder(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "mountinfo")
	body := "22 1 0:21 / /run rw - tmpfs tmpfs rw\n" +
		"40 22 0:4 net:[4026532] /run/podunit/netns/abc rw - nsfs nsfs rw\n" +
		"41 22 0:4 net:[4026533] /run/podunit/netns/with\\040space rw - nsfs nsfs rw\n" +
		"42 22 0:4 / /run/podunit-other/x rw - tmpfs tmpfs rw\n"
	if err := os.WriteFile(mi, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := MountPointsUnder(mi, "/run/podunit/netns")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/run/podunit/netns/abc", "/run/podunit/netns/with space"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q", got)
	}
}

func TestDirsAndRunner(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"keep", "drop", "drop2.json", ".tmp-x", ".abc.json.tmp-123"} {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	boom := Func{N: "boom", F: func(context.Context, bool) ([]string, error) { return nil, errors.New("bang") }}
	r := NewRunner(nil, boom, Dirs{Dir: dir, Known: func(n string) bool { return n == "keep" }})
	res, err := r.Run(context.Background(), false)
	if err == nil || res[0].Error != "bang" {
		t.Fatalf("failing collector not reported: %v %+v", err, res)
	}
	// .abc.json.tmp-123 is a state write cut short by a crash
	if len(res[1].Removed) != 3 {
		t.Fatalf("dirs removed %v", res[1].Removed)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 2 {
		t.Fatalf("left %v", left)
	}
}

// A directory with a mount below it is never removed (as root: mounts).
func TestDirsSparesMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "gone", "propagated", "0")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("gc-test", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(mnt, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Dirs{Dir: dir, Known: func(string) bool { return false }}.Collect(context.Background(), false)
	if err == nil || len(out) != 0 {
		t.Fatalf("Collect = %q, %v; want an error and nothing removed", out, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "keep")); err != nil {
		t.Fatalf("a file below the mount was removed: %v", err)
	}
}

func TestUnitsLeftoverCgroups(t *testing.T) {
	fake := systemdtest.New()
	ctx := context.Background()
	slice := systemd.Property{Name: "Slice", Value: dbus.MakeVariant("a-b.slice")}
	for _, n := range []string{"podunit-known.service", "podunit-orphan.service", "podunit-failed.service", "podunit-dead.service"} {
		if err := fake.StartTransientUnit(ctx, n, []systemd.Property{slice}); err != nil {
			t.Fatal(err)
		}
	}
	fake.Units["podunit-failed.service"].ActiveState = "failed"
	fake.Units["podunit-dead.service"].ActiveState = "inactive"
	var got []string
	c := Units{Conn: fake, Patterns: []string{"podunit-*.service"},
		Known:    func(u string) bool { return u == "podunit-known.service" },
		Leftover: func(cg string) error { got = append(got, cg); return nil }}
	if _, err := c.Collect(ctx, true); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("dry run removed cgroups: %v", got)
	}
	if _, err := c.Collect(ctx, false); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := []string{"/a.slice/a-b.slice/podunit-dead.service", "/a.slice/a-b.slice/podunit-failed.service", "/a.slice/a-b.slice/podunit-orphan.service"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("leftover cgroups removed %v, want %v", got, want)
	}
}
