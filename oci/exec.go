package oci

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// MaxExecSyncOutput caps each of ExecSync's stdout and stderr, like the
// kubelet's own limit; the excess is dropped.
const MaxExecSyncOutput = 16 << 20

// ExecProcessSpec derives an exec'd process from the container's: same user,
// environment, working directory, capabilities and confinement, new args.
func ExecProcessSpec(ctr *specs.Spec, args []string, tty bool) specs.Process {
	var p specs.Process
	if ctr != nil && ctr.Process != nil {
		p = *ctr.Process
	}
	p.Args = append([]string(nil), args...)
	p.Terminal = tty
	p.ConsoleSize = nil
	p.OOMScoreAdj = nil
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	return p
}

// ExecSyncResult is ExecSync's outcome.
type ExecSyncResult struct {
	ExitCode       int
	Stdout, Stderr []byte
}

// ExecSync runs proc in the container without a terminal and collects its
// output, each stream capped at MaxExecSyncOutput. timeout 0 means none; when
// it expires the process is killed and the error wraps errdefs.ErrDeadline.
func ExecSync(ctx context.Context, rt Runtime, id string, proc specs.Process, timeout time.Duration) (*ExecSyncResult, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	proc.Terminal = false
	stdout := &cappedBuffer{max: MaxExecSyncOutput}
	stderr := &cappedBuffer{max: MaxExecSyncOutput}
	code, err := rt.Exec(ctx, id, ExecProcess{Process: proc, Stdout: stdout, Stderr: stderr})
	res := &ExecSyncResult{ExitCode: code, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	return res, err
}

// cappedBuffer keeps the first max bytes and accepts (drops) the rest, so a
// chatty process is never blocked on a full pipe.
type cappedBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *cappedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

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

func pumpTerminal(master *os.File, p ExecProcess, exited <-chan struct{}, wg *sync.WaitGroup) {
	if p.Stdin != nil {
		go func() { _, _ = io.Copy(master, p.Stdin) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Reading ends with EIO once the last slave fd closes.
		_, _ = io.Copy(orDiscard(p.Stdout), master)
	}()
	if p.Resize != nil {
		go func() {
			for {
				select {
				case <-exited:
					return
				case sz, ok := <-p.Resize:
					if !ok {
						return
					}
					_ = ResizeConsole(master, sz)
				}
			}
		}()
	}
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
