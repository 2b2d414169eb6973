package oci

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// tailBuffer keeps the last max bytes: the runtime's own error, if any, is
// the last thing it writes to the stderr it shares with the process.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func isExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// exitStatus maps the runtime's exit to the process's: the runtime exits
// with the process's code, or 128+signal when it was killed.
func exitStatus(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return -1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if err != nil && !isExit(err) {
		return -1
	}
	return cmd.ProcessState.ExitCode()
}

// killByPidFile SIGKILLs the exec'd process once the runtime has written its
// PID, giving up when the runtime exits.
func killByPidFile(pidFile string, exited <-chan struct{}) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				return
			}
		}
		select {
		case <-exited:
			return
		case <-t.C:
		}
	}
}

// ExecSpec derives an exec'd process from the container's: it gets the
// container's identity, environment, working directory, capabilities,
// confinement and OOM score (not podunit's, which it would otherwise
// inherit): only the command and whether it gets a terminal (its own,
// whatever the container's) differ.
func ExecSpec(ctr *specs.Process, cmd []string, terminal bool) specs.Process {
	p := *ctr
	p.Args = slices.Clone(cmd)
	p.Terminal = terminal
	p.ConsoleSize = nil
	// The runtime refuses a relative or empty cwd.
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	return p
}
