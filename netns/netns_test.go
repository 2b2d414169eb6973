package netns

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podunit/podunit/errdefs"
	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("namespaces need root")
	}
}

func mounts(t *testing.T, under string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], under) {
			n++
		}
	}
	return n
}

func TestNewDoUnpin(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	pins := map[Kind]string{
		Net: filepath.Join(dir, "net", "p"),
		IPC: filepath.Join(dir, "ipc", "p"),
		UTS: filepath.Join(dir, "uts", "p"),
	}
	if err := New(pins); err != nil {
		t.Fatal(err)
	}
	for k, p := range pins {
		if !IsPinned(p) {
			t.Fatalf("%s not pinned", k)
		}
		a, _ := Inode(p)
		b, _ := Inode("/proc/self/ns/" + string(k))
		if a == b {
			t.Fatalf("%s pin is the host namespace", k)
		}
	}
	if err := New(map[Kind]string{Net: pins[Net]}); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("re-pin: %v, want ErrExists", err)
	}
	// Inside, the hostname is private and only a loopback device exists.
	host, _ := os.Hostname()
	err := Do(pins, func() error {
		if err := unix.Sethostname([]byte("inside-pod")); err != nil {
			return err
		}
		ifs, err := os.ReadDir("/proc/thread-self/net/dev_snmp6")
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name() != "lo" {
			t.Errorf("interfaces in new netns: %v", ifs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := os.Hostname(); h != host {
		t.Fatalf("hostname leaked to host: %q", h)
	}
	Do(pins, func() error {
		var u unix.Utsname
		unix.Uname(&u)
		if got := unix.ByteSliceToString(u.Nodename[:]); got != "inside-pod" {
			t.Errorf("pinned uts lost hostname: %q", got)
		}
		return nil
	})
	for _, p := range pins {
		if err := Unpin(p); err != nil {
			t.Fatal(err)
		}
		if err := Unpin(p); err != nil {
			t.Fatalf("second Unpin: %v", err)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("pin file left: %v", err)
		}
	}
	if n := mounts(t, dir); n != 0 {
		t.Fatalf("%d mounts left under %s", n, dir)
	}
}

func TestNewRollsBackOnFailure(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	if err := New(map[Kind]string{Net: ok}); err != nil {
		t.Fatal(err)
	}
	defer Unpin(ok)
	// The second namespace's pin collides: the first must not stay pinned.
	fresh := filepath.Join(dir, "fresh")
	for i := 0; i < 5; i++ {
		err := New(map[Kind]string{IPC: fresh, Net: ok})
		if err == nil {
			t.Fatal("New with a pinned path succeeded")
		}
		if IsPinned(fresh) {
			t.Fatal("partial pin left behind")
		}
	}
}

func TestPinFromAndPIDRefused(t *testing.T) {
	needRoot(t)
	p := filepath.Join(t.TempDir(), "self-net")
	if err := PinFrom("/proc/self/ns/net", p); err != nil {
		t.Fatal(err)
	}
	a, _ := Inode(p)
	b, _ := Inode("/proc/self/ns/net")
	if a != b {
		t.Fatal("PinFrom pinned another namespace")
	}
	if err := Unpin(p); err != nil {
		t.Fatal(err)
	}
	if err := New(map[Kind]string{PID: p}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("New pid: %v", err)
	}
	if err := Do(map[Kind]string{Kind("mnt"): p}, func() error { return nil }); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Do mnt: %v", err)
	}
}

func TestMainThreadNeverTainted(t *testing.T) {
	needRoot(t)
	before, _ := os.Readlink("/proc/self/ns/net")
	dir := t.TempDir()
	for i := 0; i < 20; i++ {
		p := filepath.Join(dir, "p")
		if err := New(map[Kind]string{Net: p}); err != nil {
			t.Fatal(err)
		}
		if err := Unpin(p); err != nil {
			t.Fatal(err)
		}
	}
	if after, _ := os.Readlink("/proc/self/ns/net"); after != before {
		t.Fatalf("process main thread moved from %s to %s", before, after)
	}
}
