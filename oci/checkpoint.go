package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podunit/podunit/errdefs"
)

// CRIU's own logs, written into the work directory: runc and crun pass
// these names to criu.
const (
	criuDumpLog    = "dump.log"
	criuRestoreLog = "restore.log"
)

// Checkpoint is one container checkpoint: CRIU writes its images to
// ImagePath and its log and scratch files to WorkPath.
type Checkpoint struct {
	ImagePath, WorkPath string
}

// CheckpointArgv dumps the container's processes with CRIU and leaves them
// running, as the kubelet's checkpoint API expects (a forensic copy, not a
// migration). Established TCP connections and unlinked-but-open files are
// refused by CRIU unless asked: podunit does not ask, so a checkpoint never
// holds a connection that a restore would replay against a peer that moved
// on.
func (c *CLI) CheckpointArgv(id string, ck Checkpoint) []string {
	return append(c.global(), "checkpoint", "--image-path", ck.ImagePath, "--work-path", ck.WorkPath,
		"--leave-running", id)
}

// RestoreArgv restores a checkpoint as container id from bundle, detached:
// the restored init's PID goes to pidFile, as with CreateArgv, and the
// runtime's own errors to logFile. It inherits the caller's stdio for the
// pipes the checkpointed init had on 0-2 (runc maps them through
// descriptors.json), which is how the restored container's output reaches
// the unit's stdio wrapper.
func (c *CLI) RestoreArgv(id, bundle, pidFile, logFile string, ck Checkpoint) []string {
	return append(c.globalWithLog(logFile), "restore", "--detach", "--pid-file", pidFile, "--bundle", bundle,
		"--image-path", ck.ImagePath, "--work-path", ck.WorkPath, id)
}

// Checkpoint implements Runtime. A CRIU failure carries the end of CRIU's
// log, where the reason is (the runtime only says "criu failed").
func (c *CLI) Checkpoint(ctx context.Context, id string, ck Checkpoint) error {
	_, err := c.command(ctx, c.CheckpointArgv(id, ck))
	if err == nil || errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrPrecondition) {
		return err
	}
	if tail := CRIULogTail(filepath.Join(ck.WorkPath, criuDumpLog), 10); tail != "" {
		return fmt.Errorf("%w; criu log %s:\n%s", err, criuDumpLog, tail)
	}
	return err
}

// PauseArgv freezes the container's own cgroup; ResumeArgv thaws it.
// CRIU dumps a paused container and leaves it paused: it reads the
// cgroup's own freezer state, thaws the cgroup to run its parasite in
// the seized tasks, and freezes it again before it lets them go.
func (c *CLI) PauseArgv(id string) []string  { return append(c.global(), "pause", id) }
func (c *CLI) ResumeArgv(id string) []string { return append(c.global(), "resume", id) }

// Pause implements Runtime.
func (c *CLI) Pause(ctx context.Context, id string) error {
	_, err := c.command(ctx, c.PauseArgv(id))
	return err
}

// Resume implements Runtime.
func (c *CLI) Resume(ctx context.Context, id string) error {
	_, err := c.command(ctx, c.ResumeArgv(id))
	return err
}

// RestoreLog is where CRIU writes the log of a restore from ck.
func (ck Checkpoint) RestoreLog() string { return filepath.Join(ck.WorkPath, criuRestoreLog) }

// CRIULogTail is the last n error lines of a CRIU log (all lines when it
// has no "Error" line), "" when it cannot be read.
func CRIULogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var all, errs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := sc.Text()
		all = append(all, l)
		if strings.Contains(l, "Error") {
			errs = append(errs, l)
		}
	}
	lines := errs
	if len(lines) == 0 {
		lines = all
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
