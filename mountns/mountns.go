// Package mountns keeps podunit's mounts out of the host's mount table.
//
// Every mount event makes systemd (PID 1) re-read its whole mount table, so
// with container root filesystems, image volumes, bundle binds and namespace
// pins in the host namespace PID 1's cost per container start grew with the
// number of containers already running (systemd #8703, runc #3925). podunit
// serve instead runs in a mount namespace of its own, a slave of the host's
// (host mounts made later, e.g. the kubelet's volumes, still show up in it),
// pinned by a bind mount of its namespace file in the host namespace: the
// namespace and every mount in it outlive a podunit restart or crash, and the
// next podunit joins it. The runtimes (runc, crun) run in it too: the
// container units' commands enter it with nsenter (Wrap).
//
// Go cannot setns(CLONE_NEWNS) once the runtime has started threads, so
// Enter re-executes podunit through nsenter, which keeps the PID (systemd's
// main PID, sd_notify and socket activation are unchanged).
package mountns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Nsenter (util-linux, in Debian's essential set) enters the namespace and
// execs the command: no extra process.
const Nsenter = "/usr/bin/nsenter"

// enteredEnv carries the namespace's inode across the re-exec, so the new
// image knows it is inside (in the namespace the pin path shows only the
// empty file the pin is mounted on) and never loops.
const enteredEnv = "PODUNIT_MNTNS_INODE"

// hostNS is the host's mount namespace: PID 1's, the one podunit hides
// its mounts from.
var hostNS = "/proc/1/ns/mnt"

// The main goroutine keeps the main thread for the life of the process
// (init runs on it). The throw-away threads below leave the process's
// mount namespace, and one of them must never be the main thread: the
// runtime would keep it, wedged, in the other namespace, and /proc/self
// (mountinfo, the garbage collectors' view) shows the main thread's.
func init() { runtime.LockOSThread() }

// Pin is the namespace file under runDir. Its directory is a private mount
// of its own in the host namespace: the kernel refuses to bind a mount
// namespace file where the bind would propagate into that namespace.
func Pin(runDir string) string { return filepath.Join(runDir, "mntns", "mnt") }

// ErrHostMounts: there is no namespace yet, but podunit's mounts are in
// the host's (containers started before the switch was turned on, e.g.
// across a package upgrade). A namespace created now would hold slave
// copies of them, and podunit's unmounts there would leave the host's in
// place; podunit stays in the host's namespace until they are gone.
var ErrHostMounts = errors.New("podunit's mounts are in the host's mount namespace")

// Enter makes the calling process run in the namespace pinned at pin,
// creating and pinning it first when there is none. Unless the process
// already runs in it, Enter does not return on success: it re-executes the
// process's own binary with the same arguments through nsenter. owned are
// directories below which podunit mounts (the run dir, the image store's
// overlay directory): a mount there in the caller's namespace keeps Enter
// from creating one (ErrHostMounts).
func Enter(pin string, owned []string) error {
	self, err := nsInode("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	if want := os.Getenv(enteredEnv); want != "" {
		_ = os.Unsetenv(enteredEnv)
		if want != strconv.FormatUint(self, 10) {
			return fmt.Errorf("mount namespace %s: re-executed into namespace %d, expected %s", pin, self, want)
		}
		return nil
	}
	ino, err := pinned(pin)
	if err != nil {
		return err
	}
	if ino == 0 {
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return fmt.Errorf("mount namespace: %w", err)
		}
		if p := mountUnder(string(mi), owned, filepath.Dir(pin)); p != "" {
			return fmt.Errorf("%w (%s)", ErrHostMounts, p)
		}
		if ino, err = create(pin); err != nil {
			return err
		}
	}
	if ino == self {
		return nil // started inside by someone else
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("mount namespace: own executable: %w", err)
	}
	if filepath.IsAbs(os.Args[0]) {
		exe = os.Args[0] // the same argv[0]: ps and pidof see no change
	}
	argv := append([]string{Nsenter, "--mount=" + pin, "--", exe}, os.Args[1:]...)
	env := append(os.Environ(), enteredEnv+"="+strconv.FormatUint(ino, 10))
	if err := syscall.Exec(Nsenter, argv, env); err != nil {
		return fmt.Errorf("mount namespace: exec %s: %w", Nsenter, err)
	}
	return nil // not reached
}

// Wrap prefixes argv so it runs in the namespace pinned at pin (a command
// that systemd starts in the host namespace). nsenter execs argv, so its
// PID is the one systemd started. An empty pin leaves argv as it is.
func Wrap(pin string, argv []string) []string {
	if pin == "" || len(argv) == 0 {
		return argv
	}
	return append([]string{Nsenter, "--mount=" + pin, "--"}, argv...)
}

// mountUnder returns the first mount point of mountinfo strictly below one
// of dirs and not below except, "" when there is none.
func mountUnder(mountinfo string, dirs []string, except string) string {
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		p := f[4] // octal escapes (\040) do not matter for a prefix test of clean paths
		if p == except || strings.HasPrefix(p, except+"/") {
			continue
		}
		for _, d := range dirs {
			if strings.HasPrefix(p, filepath.Clean(d)+"/") {
				return p
			}
		}
	}
	return ""
}

// pinned returns the inode of the mount namespace pinned at pin, 0 when
// nothing is pinned there (no file, or the bare file after a reboot or an
// unmount).
func pinned(pin string) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(pin, &fs); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, nil
		}
		return 0, fmt.Errorf("mount namespace pin %s: %w", pin, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return 0, nil
	}
	fd, err := unix.Open(pin, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("mount namespace pin %s: %w", pin, err)
	}
	defer unix.Close(fd)
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return 0, fmt.Errorf("mount namespace pin %s: %w", pin, err)
	}
	if typ != unix.CLONE_NEWNS {
		return 0, fmt.Errorf("mount namespace pin %s: pins a namespace of type %#x, not a mount namespace", pin, typ)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("mount namespace pin %s: %w", pin, err)
	}
	return st.Ino, nil
}

func nsInode(p string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return 0, fmt.Errorf("mount namespace: %w", err)
	}
	return st.Ino, nil
}

// newPinned creates the namespace on a throw-away thread (unshare of a
// mount namespace also gives the thread a filesystem context of its own),
// makes every mount in it a slave, and binds its namespace file on pin from
// another thread, still in the caller's namespace: a bind made from inside
// would land in the new namespace, and the kernel refuses to bind a
// namespace into itself. (unshare(1) --mount=FILE does the same with a
// forked child, but failed now and then with EINVAL in the test harness.)
//
// The kernel refuses (EINVAL) to bind a mount namespace whose ID is not
// above the binder's own namespace's, to rule out loops. IDs are handed
// out in per-CPU batches, so a namespace made on one CPU can get a lower
// ID than one made earlier on another: seen as intermittent EINVAL in the
// test harness. The CPU that made the caller's namespace only counts up
// from there, so newPinned tries each CPU in turn until the bind holds.
func newPinned(pin string) error {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("mount namespace: CPUs: %w", err)
	}
	err := fmt.Errorf("mount namespace: no CPU allowed: %w", unix.EINVAL)
	for cpu := 0; cpu < len(allowed)*64; cpu++ {
		if !allowed.IsSet(cpu) {
			continue
		}
		if err = newPinnedOn(cpu, pin); !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	return err
}

func newPinnedOn(cpu int, pin string) error {
	type made struct {
		tid int
		err error
	}
	ready := make(chan made, 1)
	done := make(chan struct{})
	go func() {
		// Never unlocked: the thread has left the process's namespace
		// and must exit with this goroutine.
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		err := unix.SchedSetaffinity(0, &set) // this thread only
		if err == nil {
			err = unix.Unshare(unix.CLONE_NEWNS)
		}
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, "")
		}
		ready <- made{unix.Gettid(), err}
		<-done
	}()
	m := <-ready
	defer close(done)
	if m.err != nil {
		return fmt.Errorf("mount namespace: create: %w", m.err)
	}
	src := fmt.Sprintf("/proc/%d/task/%d/ns/mnt", os.Getpid(), m.tid)
	if err := unix.Mount(src, pin, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount namespace: pin %s: %w", pin, err)
	}
	return nil
}

// create makes the namespace, a copy of the caller's with every mount a
// slave of the caller's, and pins it at pin. A lock file next to the pin
// keeps two podunit processes from pinning two namespaces.
func create(pin string) (uint64, error) {
	dir := filepath.Dir(pin)
	// The run dir above keeps the mode podunit gives it (0711: runtimes
	// in a pod's user namespace search it); only the pin's is private.
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return 0, fmt.Errorf("mount namespace pin dir: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return 0, fmt.Errorf("mount namespace pin dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("mount namespace lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("mount namespace lock: %w", err)
	}
	if ino, err := pinned(pin); err != nil || ino != 0 {
		return ino, err
	}
	if !IsMountPoint(dir) {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return 0, fmt.Errorf("mount namespace pin dir: bind %s: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return 0, fmt.Errorf("mount namespace pin dir: make %s private: %w", dir, err)
	}
	f, err := os.OpenFile(pin, os.O_CREATE|os.O_RDONLY, 0o444)
	if err != nil {
		return 0, fmt.Errorf("mount namespace pin: %w", err)
	}
	f.Close()
	if err := newPinned(pin); err != nil {
		return 0, err
	}
	ino, err := pinned(pin)
	if err == nil && ino == 0 {
		err = fmt.Errorf("mount namespace: nothing pinned at %s", pin)
	}
	return ino, err
}

// BindFromHost mounts, at dst in the calling process's namespace, a clone
// of the mount tree at src in the host's namespace (PID 1's). A clone of a
// shared mount is a peer of it, so mounts made below dst (or below a bind
// of it in a container, as a bidirectional CRI mount is) propagate to the
// host and back; in the private namespace src is only a slave copy, whose
// binds never propagate back. The tree is cloned on a thread that entered
// the host's namespace (OnThread) and is attached from this one.
func BindFromHost(src, dst string) error {
	fd := -1
	err := OnThread(hostNS, func() error {
		var err error
		fd, err = unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("host mount %s: clone: %w", src, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach host mount %s at %s: %w", src, dst, err)
	}
	return nil
}

// IsMountPoint: p is the root of a mount (statx's STATX_ATTR_MOUNT_ROOT,
// which also catches a bind of a directory on its own filesystem).
func IsMountPoint(p string) bool {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, 0, &st); err != nil {
		return false
	}
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}
