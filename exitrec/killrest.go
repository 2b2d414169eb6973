package exitrec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
	if unitPath == "" {
		return 0
	}
	dir := ""
	for _, c := range []string{
		filepath.Join(root, unitPath),            // v2
		filepath.Join(root, "systemd", unitPath), // v1 / hybrid: systemd's own hierarchy
		filepath.Join(root, "unified", unitPath), // hybrid
	} {
		if _, err := os.Stat(filepath.Join(c, "cgroup.procs")); err == nil {
			dir = c
			break
		}
	}
	if dir == "" {
		return 0
	}
	self := os.Getpid()
	killed := map[int]bool{}
	deadline := time.Now().Add(d)
	for {
		left := 0
		_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil || pid <= 0 || pid == self {
					continue
				}
				left++
				if !killed[pid] {
					killed[pid] = true
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
			return nil
		})
		if left == 0 || time.Now().After(deadline) {
			return len(killed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
