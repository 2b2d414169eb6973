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

	"github.com/podunit/podunit/errdefs"
)

// Exec implements Runtime. The runtime runs in the foreground and hands its
// stdio to the process, so its exit status is the process's.
func (c *CLI) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	if len(p.Process.Args) == 0 {
		return -1, invalid("exec", "no command")
	}
	if p.Process.Terminal {
		return -1, invalid("exec", "terminal")
	}
	if err := os.MkdirAll(c.cfg.ExecDir, 0o700); err != nil {
		return -1, fmt.Errorf("exec dir: %w", err)
	}
	dir, err := os.MkdirTemp(c.cfg.ExecDir, "exec-")
	if err != nil {
		return -1, fmt.Errorf("exec dir: %w", err)
	}
	defer os.RemoveAll(dir)
	procJSON, err := json.Marshal(p.Process)
	if err != nil {
		return -1, fmt.Errorf("encode process: %w", err)
	}
	x := execRun{c: c, id: id, p: p, procFile: filepath.Join(dir, "process.json"), pidFile: filepath.Join(dir, "pid")}
	if err := os.WriteFile(x.procFile, procJSON, 0o600); err != nil {
		return -1, err
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
	cmd.Stdin = x.p.Stdin
	cmd.Stdout = orDiscard(x.p.Stdout)
	cmd.Stderr = io.MultiWriter(orDiscard(x.p.Stderr), errTail)
	// A process that leaves a daemon holding its stdout must not hang us
	// after it exits.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
	}
	var werr error
	exited := make(chan struct{})
	go func() { werr = cmd.Wait(); close(exited) }()
	killed := x.killOnDone(ctx, exited)
	<-exited
	return x.result(ctx, exitStatus(cmd, werr), werr, errTail, killed.Load())
}

// killOnDone: the runtime does not kill its process when it dies itself, so
// on timeout kill the exec'd process, which makes a foreground runtime return.
func (x *execRun) killOnDone(ctx context.Context, exited <-chan struct{}) *atomic.Bool {
	var killed atomic.Bool
	go func() {
		select {
		case <-exited:
		case <-ctx.Done():
			killed.Store(true)
			killByPidFile(x.pidFile, exited)
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
