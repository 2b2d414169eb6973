package netns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/reexec"
	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

// TestMain serves NewInUser's holder, which is this binary re-executed.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// owner is the inode of the user namespace that owns the namespace at p.
func owner(t *testing.T, p string) uint64 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ufd, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ufd)
	var st unix.Stat_t
	if err := unix.Fstat(ufd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestNewInUser(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	user := filepath.Join(dir, "user", "p")
	pins := map[Kind]string{
		Net: filepath.Join(dir, "net", "p"),
		IPC: filepath.Join(dir, "ipc", "p"),
		UTS: filepath.Join(dir, "uts", "p"),
	}
	uids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	gids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 200000, Size: 1000}}
	if err := NewInUser(user, uids, gids, pins); err != nil {
		t.Fatal(err)
	}
	if !IsPinned(user) {
		t.Fatal("user namespace not pinned")
	}
	userIno, _ := Inode(user)
	hostIno, _ := Inode("/proc/self/ns/user")
	if userIno == hostIno {
		t.Fatal("pinned the host's user namespace")
	}
	// The pod's namespaces belong to its user namespace: that is what lets
	// a container in it mount sysfs and mqueue.
	for k, p := range pins {
		if !IsPinned(p) {
			t.Fatalf("%s not pinned", k)
		}
		if got := owner(t, p); got != userIno {
			t.Errorf("%s namespace owned by user namespace %d, want the pod's %d", k, got, userIno)
		}
	}
	// root can still configure them from outside.
	if err := Do(pins, func() error { return unix.Sethostname([]byte("inside")) }); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nsenter", "--user="+user, "--", "cat", "/proc/self/uid_map", "/proc/self/gid_map", "/proc/self/setgroups").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v %s", err, out)
	}
	if got := strings.Join(strings.Fields(string(out)), " "); got != "0 100000 65536 0 200000 1000 allow" {
		t.Errorf("maps in the pinned namespace = %q", got)
	}
	for _, p := range append([]string{user}, pins[Net], pins[IPC], pins[UTS]) {
		if err := Unpin(p); err != nil {
			t.Fatal(err)
		}
	}
	if n := mounts(t, dir); n != 0 {
		t.Fatalf("%d mounts left", n)
	}
}

func TestNewInUserRefusesAndRollsBack(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	one := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 10}}
	user := filepath.Join(dir, "user", "p")
	for name, err := range map[string]error{
		"no mappings": NewInUser(user, nil, one, nil),
		"pid":         NewInUser(user, one, one, map[Kind]string{PID: filepath.Join(dir, "pid")}),
	} {
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A mapping the kernel refuses (host ID past the 32-bit range) fails
	// the holder's start and pins nothing.
	bad := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 4294967000, Size: 65536}}
	if err := NewInUser(user, bad, one, map[Kind]string{Net: filepath.Join(dir, "net")}); err == nil {
		t.Fatal("impossible mapping accepted")
	}
	// A pin that already exists rolls back the ones made before it.
	taken := filepath.Join(dir, "taken")
	if err := New(map[Kind]string{UTS: taken}); err != nil {
		t.Fatal(err)
	}
	if err := NewInUser(user, one, one, map[Kind]string{UTS: taken}); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("existing pin: %v, want ErrExists", err)
	}
	if IsPinned(user) {
		t.Error("user namespace pinned after a failed create")
	}
	if err := Unpin(taken); err != nil {
		t.Fatal(err)
	}
	if n := mounts(t, dir); n != 0 {
		t.Fatalf("%d mounts left", n)
	}
}
