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

	"github.com/podunit/podunit/errdefs"
)

// drainTimeout bounds how long output is still copied after the runtime has
// exited, and how long a runtime may take to return once its process was
// killed: a daemon the process left behind may hold the output open forever.
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

// TerminalExec implements Runtime.
func (c *CLI) TerminalExec(id string, p specs.Process) (*TerminalExec, error) {
	if len(p.Args) == 0 {
		return nil, invalid("exec", "no command")
	}
	if !p.Terminal {
		return nil, invalid("terminal exec", "process has no terminal")
	}
	dir, procFile, err := c.scratch(p)
	if err != nil {
		return nil, err
	}
	t := &TerminalExec{ConsoleSocket: filepath.Join(dir, "console.sock"), PidFile: filepath.Join(dir, "pid"), dir: dir}
	t.Argv = c.terminalExecArgv(id, procFile, t.ConsoleSocket, t.PidFile)
	return t, nil
}

// Exec implements Runtime. The runtime runs in the foreground and hands its
// stdio to the process, so its exit status is the process's.
func (c *CLI) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	if len(p.Process.Args) == 0 {
		return -1, invalid("exec", "no command")
	}
	if p.Process.Terminal {
		return -1, invalid("exec", "terminal")
	}
	dir, procFile, err := c.scratch(p.Process)
	if err != nil {
		return -1, err
	}
	defer os.RemoveAll(dir)
	x := execRun{c: c, id: id, p: p, procFile: procFile, pidFile: filepath.Join(dir, "pid")}
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
	return x.result(ctx, exitStatus(cmd, werr), werr, errTail, killed.Load())
}

// killOnDone: the runtime does not kill its process when it dies itself, so
// when ctx ends kill the exec'd process, which makes a foreground runtime
// return. runc copies the output itself and waits for its EOF, which a
// daemon the process left behind may hold: the runtime goes too if it has
// not returned within drainTimeout.
func (x *execRun) killOnDone(ctx context.Context, cmd *exec.Cmd, exited <-chan struct{}) *atomic.Bool {
	var killed atomic.Bool
	go func() {
		select {
		case <-exited:
		case <-ctx.Done():
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

func (x *execRun) result(ctx context.Context, code int, werr error, errTail *tailBuffer, killed bool) (int, error) {
	if killed {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return code, fmt.Errorf("exec in %s: command %q timed out: %w", x.id, x.p.Process.Args, errdefs.ErrDeadline)
		}
		return code, fmt.Errorf("exec in %s: %w", x.id, ctx.Err())
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
