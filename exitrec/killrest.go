package exitrec

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/unitcgroup"
)

// KillRest SIGKILLs every process left in the unit's cgroup but the
// caller, and waits (at most d) until none is left. It returns how many
// it signalled.
//
// Why: the container's main process is gone, but in a pod with a shared
// PID namespace its children live on (killing the container's PID 1 does
// not take them with it), and when the unit was stopped systemd runs
// ExecStopPost before it kills them. They still hold the container's
// stdout/stderr, so the log relay would never see EOF and the exit record
// would wait for nothing. containerd's shim does the same kill-all when a
// container's init exits; systemd would SIGKILL them right after.
func KillRest(root, unitPath string, d time.Duration) int {
	dir := unitcgroup.Dir(root, unitPath)
	if dir == "" {
		return 0
	}
	self := os.Getpid()
	killed := map[int]bool{}
	deadline := time.Now().Add(d)
	for {
		left := 0
		unitcgroup.EachPID(dir, func(pid int) bool {
			if pid == self {
				return true
			}
			left++
			if !killed[pid] {
				killed[pid] = true
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			return true
		})
		if left == 0 || time.Now().After(deadline) {
			return len(killed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
