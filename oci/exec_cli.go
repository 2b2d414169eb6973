package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/errdefs"
)

// drainTimeout bounds how long output is still copied after the runtime (or
// the terminal's command) has exited, and how long a runtime may take to
// return once its process was killed: a daemon the process left behind may
// hold the output open forever.
const drainTimeout = 2 * time.Second

// scratch makes an exec's directory under ExecDir with the process written
// as process.json: runc and crun take a process from a file only.
func (c *CLI) scratch(p specs.Process) (dir, procFile string, err error) {
	if err := os.MkdirAll(c.cfg.ExecDir, 0o700); err != nil {
		return "", "", fmt.Errorf("exec dir: %w", err)
	}
	dir, err = os.MkdirTemp(c.cfg.ExecDir, "exec-")
	if err != nil {
		return "", "", fmt.Errorf("exec dir: %w", err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("encode process: %w", err)
	}
	procFile = filepath.Join(dir, "process.json")
	if err := os.WriteFile(procFile, raw, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("write process: %w", err)
	}
	return dir, procFile, nil
}

// Exec implements Runtime: the one exec of podunit (ExecSync, streamed
// exec, exec probes). Without a terminal the runtime runs in the
// foreground and hands its stdio to the process, so its exit status is
// the process's; with one it runs detached under the exec helper
// (exec_terminal.go). Either way the runtime writes the process's PID to
// the exec's pid file, and ctx's end SIGKILLs that process (killOnDone).
func (c *CLI) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	if len(p.Process.Args) == 0 {
		return -1, invalid("exec", "no command")
	}
	if p.Process.Terminal && len(c.cfg.ExecHelper) == 0 {
		return -1, invalid("exec", "terminal exec without an exec helper")
	}
	proc := p.Process
	var size *console.WinSize
	if proc.Terminal {
		if size = firstSize(p.Resize); size != nil {
			proc.ConsoleSize = &specs.Box{Height: uint(size.Height), Width: uint(size.Width)}
		}
	}
	dir, procFile, err := c.scratch(proc)
	if err != nil {
		return -1, err
	}
	defer os.RemoveAll(dir)
	x := execRun{c: c, id: id, p: p, procFile: procFile, pidFile: filepath.Join(dir, "pid")}
	if proc.Terminal {
		return x.terminal(ctx, filepath.Join(dir, "console.sock"), size)
	}
	return x.piped(ctx)
}

type execRun struct {
	c                 *CLI
	id                string
	p                 ExecProcess
	procFile, pidFile string
}

func (x *execRun) piped(ctx context.Context) (int, error) {
	argv := x.c.execArgv(x.id, x.procFile, x.pidFile)
	cmd := exec.Command(argv[0], argv[1:]...)
	errTail := &tailBuffer{max: 4096}
	cmd.Stdout = orDiscard(x.p.Stdout)
	cmd.Stderr = io.MultiWriter(orDiscard(x.p.Stderr), errTail)
	cmd.WaitDelay = drainTimeout
	var stdin io.WriteCloser
	if x.p.Stdin != nil {
		// Copied by hand: exec.Cmd would wait for a client's stdin that may
		// never end, even after the process has exited.
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
		}
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, x.p.Stdin)
			stdin.Close()
		}()
	}
	var werr error
	exited := make(chan struct{})
	go func() { werr = cmd.Wait(); close(exited) }()
	killed := x.killOnDone(ctx, cmd, exited)
	<-exited
	if errors.Is(werr, exec.ErrWaitDelay) {
		// The runtime exited; something the process left behind still held
		// the output, which drainTimeout has cut.
		werr = nil
	}
	code := exitStatus(cmd, werr)
	if killed.Load() {
		return code, x.killedErr(ctx)
	}
	if werr != nil && !isExit(werr) {
		return code, fmt.Errorf("%s exec: %w", x.c.cfg.Name, werr)
	}
	if code != 0 {
		if _, err := os.Stat(x.pidFile); err != nil {
			// No process was started: the code and message are the runtime's.
			return code, classify(x.c.cfg.Name+" exec", errTail.String(), werr)
		}
	}
	return code, nil
}

// killOnDone: the runtime does not kill its process when it dies itself, so
// when ctx ends kill the exec'd process, which makes a foreground runtime
// (or the terminal exec's helper) return. runc copies the output itself
// and waits for its EOF, which a daemon the process left behind may hold:
// cmd (the runtime or the helper) goes too if it has not returned within
// drainTimeout.
func (x *execRun) killOnDone(ctx context.Context, cmd *exec.Cmd, exited <-chan struct{}) *atomic.Bool {
	var killed atomic.Bool
	go func() {
		select {
		case <-exited:
		case <-ctx.Done():
			select {
			case <-exited:
				return // both ready: it ended by itself
			default:
			}
			killed.Store(true)
			killByPidFile(x.pidFile, exited)
			select {
			case <-exited:
			case <-time.After(drainTimeout):
				_ = cmd.Process.Kill()
			}
		}
	}()
	return &killed
}

// killedErr is the error of an exec killed because ctx ended: a deadline
// (ExecSync's timeout) wraps errdefs.ErrDeadline.
func (x *execRun) killedErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("exec in %s: command %q timed out: %w", x.id, x.p.Process.Args, errdefs.ErrDeadline)
	}
	return fmt.Errorf("exec in %s: %w", x.id, ctx.Err())
}
