// Package netns creates Linux namespaces without a process to hold them: each
// one is pinned by bind-mounting its nsfs file onto a regular file, so it
// lives exactly as long as the mount. Work that must happen inside a
// namespace runs on a dedicated OS thread that is thrown away afterwards, so
// no goroutine ever lands on a thread left in a pod's namespace.
package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/podunit/podunit/errdefs"
	"golang.org/x/sys/unix"
)

// Kind names a namespace type as in /proc/<pid>/ns/<kind>.
type Kind string

const (
	Net Kind = "net"
	IPC Kind = "ipc"
	UTS Kind = "uts"
	PID Kind = "pid"
)

// nsfsMagic is NSFS_MAGIC from linux/magic.h.
const nsfsMagic = 0x6e736673

func (k Kind) cloneFlag() (int, error) {
	switch k {
	case Net:
		return unix.CLONE_NEWNET, nil
	case IPC:
		return unix.CLONE_NEWIPC, nil
	case UTS:
		return unix.CLONE_NEWUTS, nil
	case PID:
		return unix.CLONE_NEWPID, nil
	}
	return 0, fmt.Errorf("namespace kind %q: %w", k, errdefs.ErrInvalid)
}

// onThread runs fn on a fresh goroutine locked to its OS thread and never
// unlocks it: when the goroutine ends the runtime terminates the thread, so a
// thread whose namespaces fn changed is never reused.
//
// The main thread is never used: Go parks it instead of ending it, and
// /proc/self/ns/* (which everyone reads as "the process' namespaces") shows
// the main thread's. Holding it locked while a nested call runs forces the
// work onto another thread.
func onThread(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			ch <- onThread(fn)
			runtime.UnlockOSThread()
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// New creates one fresh namespace per entry of pins (net, ipc, uts) and
// pins each at its path. Either all are pinned or none is.
func New(pins map[Kind]string) error {
	flags := 0
	for k := range pins {
		if k == PID {
			// A pid namespace without a process in it cannot be entered.
			return fmt.Errorf("pid namespace needs an init process: %w", errdefs.ErrInvalid)
		}
		f, err := k.cloneFlag()
		if err != nil {
			return err
		}
		flags |= f
	}
	if flags == 0 {
		return nil
	}
	return onThread(func() (retErr error) {
		if err := unix.Unshare(flags); err != nil {
			return fmt.Errorf("unshare namespaces: %w", err)
		}
		var done []string
		defer func() {
			if retErr != nil {
				for _, p := range done {
					_ = Unpin(p)
				}
			}
		}()
		for k, p := range pins {
			if err := pin(fmt.Sprintf("/proc/thread-self/ns/%s", k), p); err != nil {
				return err
			}
			done = append(done, p)
		}
		return nil
	})
}

// PinFrom pins an existing namespace file, e.g. /proc/<pid>/ns/pid, at path.
func PinFrom(src, path string) error { return pin(src, path) }

func pin(src, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return fmt.Errorf("pin dir: %w", err)
	}
	if IsPinned(path) {
		return fmt.Errorf("namespace pin %s: %w", path, errdefs.ErrExists)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("pin file: %w", err)
	}
	f.Close()
	if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("bind %s to %s: %w", src, path, err)
	}
	return nil
}

// Unpin unmounts and removes a pin. A path that is absent or not mounted is
// already unpinned; all mounts stacked on it are taken off.
func Unpin(path string) error {
	for i := 0; IsPinned(path); i++ {
		if i == 64 {
			return fmt.Errorf("unpin %s: still mounted after %d unmounts: %w", path, i, errdefs.ErrPrecondition)
		}
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				break
			}
			return fmt.Errorf("unpin %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pin %s: %w", path, err)
	}
	return nil
}

// IsPinned reports whether path is a mounted namespace file.
func IsPinned(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == nsfsMagic
}

// Inode returns the namespace identity (inode number) of a namespace file,
// so callers can tell two namespaces apart.
func Inode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat namespace %s: %w", path, err)
	}
	return st.Ino, nil
}

// Do runs fn on a throw-away OS thread that has joined the namespaces in
// pins (net, ipc, uts; pid affects only children and is refused). fn must
// not start goroutines that expect to be inside the namespaces.
func Do(pins map[Kind]string, fn func() error) error {
	type target struct {
		fd   int
		flag int
	}
	var targets []target
	defer func() {
		for _, t := range targets {
			unix.Close(t.fd)
		}
	}()
	for k, p := range pins {
		if k == PID {
			return fmt.Errorf("cannot enter a pid namespace from a thread: %w", errdefs.ErrInvalid)
		}
		flag, err := k.cloneFlag()
		if err != nil {
			return err
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open namespace %s: %w", p, err)
		}
		targets = append(targets, target{fd, flag})
	}
	return onThread(func() error {
		for _, t := range targets {
			if err := unix.Setns(t.fd, t.flag); err != nil {
				return fmt.Errorf("setns: %w", err)
			}
		}
		return fn()
	})
}
