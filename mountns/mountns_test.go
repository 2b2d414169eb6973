package mountns

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWrap(t *testing.T) {
	argv := []string{"/usr/bin/podunit", "_stdio", "--", "/usr/sbin/runc", "create"}
	if got := Wrap("", argv); !slices.Equal(got, argv) {
		t.Errorf("no pin: %q", got)
	}
	want := append([]string{"/usr/bin/nsenter", "--mount=/run/podunit/mntns/mnt", "--"}, argv...)
	if got := Wrap(Pin("/run/podunit"), argv); !slices.Equal(got, want) {
		t.Errorf("Wrap = %q, want %q", got, want)
	}
	if got := Wrap(Pin("/run/podunit"), nil); got != nil {
		t.Errorf("empty argv: %q", got)
	}
}

// pinned tells a pinned mount namespace (its inode) from a bare file or
// no file (0) and refuses a pin of another namespace type.
func TestPinned(t *testing.T) {
	dir := t.TempDir()
	bare := filepath.Join(dir, "mnt")
	if err := os.WriteFile(bare, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bare, filepath.Join(dir, "missing")} {
		if ino, err := pinned(p); err != nil || ino != 0 {
			t.Errorf("pinned(%s) = %d, %v; want 0", p, ino, err)
		}
	}
	self, err := nsInode("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if ino, err := pinned("/proc/self/ns/mnt"); err != nil || ino != self {
		t.Errorf("pinned(own namespace) = %d, %v; want %d", ino, err, self)
	}
	if _, err := pinned("/proc/self/ns/net"); err == nil {
		t.Error("a network namespace passed for a mount namespace")
	}
}

// Enter in the namespace it was re-executed into returns at once; one
// that is not the namespace the re-exec announced is an error, not a loop.
func TestEnterAfterReexec(t *testing.T) {
	self, err := nsInode("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(enteredEnv, "1")
	if err := Enter(filepath.Join(t.TempDir(), "mnt"), nil); err == nil {
		t.Error("Enter accepted a namespace other than the announced one")
	}
	t.Setenv(enteredEnv, strconv.FormatUint(self, 10))
	if err := Enter(filepath.Join(t.TempDir(), "mnt"), nil); err != nil {
		t.Errorf("Enter in the announced namespace: %v", err)
	}
	if v, ok := os.LookupEnv(enteredEnv); ok {
		t.Errorf("%s=%s left for the children", enteredEnv, v)
	}
}

// BindFromHost attaches a clone of a path of the "host" namespace (here
// the test's own) that shows the same files and is a mount of its own.
func TestBindFromHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	old := hostNS
	hostNS = "/proc/self/ns/mnt"
	t.Cleanup(func() { hostNS = old })
	src, dst := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := BindFromHost(src, dst); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
	if !IsMountPoint(dst) {
		t.Fatalf("%s is not a mount point", dst)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "x" {
		t.Fatalf("clone shows %q, %v", b, err)
	}
	if err := BindFromHost(filepath.Join(src, "missing"), dst); err == nil {
		t.Error("a missing source was cloned")
	}
}

// A container's rootfs or a pod's pin in the host's table stops a new
// namespace; the overlay directory's own private mount and the pin's
// directory do not.
func TestMountUnder(t *testing.T) {
	mi := `22 1 0:21 / /run rw - tmpfs tmpfs rw
30 22 254:0 /var/lib/podunit/storage/overlay /var/lib/podunit/storage/overlay rw - ext4 /dev/vda rw
31 22 0:40 / /run/podunit/mntns rw - tmpfs tmpfs rw
32 31 0:4 mnt:[4026532000] /run/podunit/mntns/mnt rw - nsfs nsfs rw
`
	owned := []string{"/run/podunit", "/var/lib/podunit/storage/overlay"}
	if p := mountUnder(mi, owned, "/run/podunit/mntns"); p != "" {
		t.Errorf("no pods: found %s", p)
	}
	for _, extra := range []string{
		"40 30 0:50 / /var/lib/podunit/storage/overlay/abc/merged rw - overlay overlay rw\n",
		"41 22 0:4 net:[4026532001] /run/podunit/netns/pod1 rw - nsfs nsfs rw\n",
	} {
		want := strings.Fields(extra)[4]
		if p := mountUnder(mi+extra, owned, "/run/podunit/mntns"); p != want {
			t.Errorf("mountUnder = %q, want %q", p, want)
		}
	}
}

// create pins a new namespace whose mounts are slaves of the caller's: a
// mount made outside afterwards shows inside, one made inside stays there.
func TestCreatePinsASlaveNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	if _, err := os.Stat(Nsenter); err != nil {
		t.Skip("no nsenter")
	}
	base, pin, ino := pinnedTestNS(t)
	self, _ := nsInode("/proc/self/ns/mnt")
	if ino == 0 || ino == self {
		t.Fatalf("create pinned namespace %d (own: %d)", ino, self)
	}
	if again, err := create(pin); err != nil || again != ino {
		t.Fatalf("second create: %d, %v; want the pinned %d", again, err, ino)
	}
	later := filepath.Join(base, "later")
	if err := os.Mkdir(later, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("mountns-test", later, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(later, unix.MNT_DETACH) })
	inside := filepath.Join(base, "inside")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "grep -c ' " + later + " ' /proc/self/mountinfo; mount -t tmpfs mountns-inside " + inside
	if out, err := exec.Command(Nsenter, "--mount="+pin, "--", "sh", "-c", script).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("inside the namespace: %v %q (want the later mount seen once)", err, out)
	}
	if IsMountPoint(inside) {
		t.Error("a mount made inside the namespace shows outside")
	}
}

// A process started on OnThread's thread runs in the pinned namespace (it
// sees a mount made only there), while the rest of the process, the main
// thread and /proc/self with it, stays in its own.
func TestOnThreadStartsProcessesInTheNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts, setns")
	}
	base, pin, ino := pinnedTestNS(t)
	inside := filepath.Join(base, "inside")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(Nsenter, "--mount="+pin, "--", "mount", "-t", "tmpfs", "onthread-test", inside).CombinedOutput(); err != nil {
		t.Fatalf("mount inside: %v %s", err, out)
	}
	self, _ := nsInode("/proc/self/ns/mnt")
	var out []byte
	err := OnThread(pin, func() error {
		var err error
		out, err = exec.Command("sh", "-c", "readlink /proc/self/ns/mnt; grep -c ' "+inside+" ' /proc/self/mountinfo").Output()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "mnt:[" + strconv.FormatUint(ino, 10) + "]\n1\n"; string(out) != want {
		t.Errorf("child started on the thread: %q, want %q", out, want)
	}
	if now, _ := nsInode("/proc/self/ns/mnt"); now != self || IsMountPoint(inside) {
		t.Errorf("the process left its namespace: %d (was %d), inside mounted here: %v", now, self, IsMountPoint(inside))
	}
	if err := OnThread(filepath.Join(base, "missing"), func() error { return nil }); err == nil {
		t.Error("OnThread into a missing pin succeeded")
	}
}

// pinnedTestNS creates a namespace with create, pinned below base, a
// temporary directory made a shared mount, as systemd makes every host
// mount: only then do mounts propagate (to the new namespace's slave copy).
func pinnedTestNS(t *testing.T) (base, pin string, ino uint64) {
	t.Helper()
	base = t.TempDir()
	if err := unix.Mount(base, base, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(base, unix.MNT_DETACH) })
	if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	pin = filepath.Join(base, "mntns", "mnt")
	ino, err := create(pin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(pin, unix.MNT_DETACH)
		_ = unix.Unmount(filepath.Dir(pin), unix.MNT_DETACH)
	})
	return base, pin, ino
}
