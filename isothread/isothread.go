// Package isothread runs a function on an OS thread whose filesystem
// context (root, working directory, umask, mount namespace) is its own,
// so a chroot or a setns there changes nothing for the rest of the
// process. moby's unshare.Go does the same for its chrooted unpacking.
package isothread

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Run runs fn on a fresh OS thread that has unshared its filesystem
// context (CLONE_FS) and returns fn's error. The thread is never given
// back: a goroutine that exits locked takes its thread with it, so no
// other goroutine ever runs with what fn changed, and the runtime starts
// new threads from a template thread, not from a locked one. fn must do
// its work on the calling goroutine: one it starts runs on another thread.
// A process fn forks or execs starts from this thread, with its root and
// namespaces.
func Run(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: others read the process's root and
			// namespaces from it (/proc/PID/root, /proc/PID/ns), and the
			// runtime never retires it. While this goroutine holds it, a
			// new one runs on another thread.
			errc <- Run(fn)
			runtime.UnlockOSThread()
			return
		}
		// CLONE_FS gives this thread its own root, cwd and umask instead
		// of the ones all the process's threads share; setns(CLONE_NEWNS)
		// refuses a thread that shares them.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_FS): %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
