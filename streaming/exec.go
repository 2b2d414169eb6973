package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/podunit/podunit/errdefs"
)

// drainTimeout bounds how long output is still copied after the runtime
// has exited; a process the command left in the background may hold the
// output open forever.
const drainTimeout = 2 * time.Second

// CLIExecutor runs the runtime's `exec <id> <args...>` in the foreground.
// runc and crun then join the container's namespaces and cgroup and take
// user, environment, capabilities and working directory from the
// container's own process spec, and exit with the command's status.
//
// TTY execs run detached through Helper (podunit's own binary and
// ExecHelperName); see ExecHelperMain.
type CLIExecutor struct {
	Helper []string
}

func (e CLIExecutor) Exec(ctx context.Context, t Target, p ExecProcess) (int, error) {
	if t.Runtime == nil {
		return -1, fmt.Errorf("container %s has no runtime: %w", t.ID, errdefs.ErrInvalid)
	}
	if len(p.Args) == 0 {
		return -1, fmt.Errorf("exec needs a command: %w", errdefs.ErrInvalid)
	}
	if p.TTY {
		if len(e.Helper) == 0 {
			return -1, fmt.Errorf("terminal exec without the exec helper: %w", errdefs.ErrPrecondition)
		}
		return runTTYHelper(ctx, e.Helper, t, p)
	}
	argv := t.Runtime.ExecArgv(t.ID, p.Args)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = drainTimeout
	return exitCode(ctx, runPipes(cmd, p))
}

func exitCode(ctx context.Context, err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		return 0, nil
	}
	return -1, fmt.Errorf("run %s: %w", cmd0(err), err)
}

func cmd0(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Path
	}
	return "runtime exec"
}

func runPipes(cmd *exec.Cmd, p ExecProcess) error {
	if p.Stdout != nil {
		cmd.Stdout = p.Stdout
	}
	if p.Stderr != nil {
		cmd.Stderr = p.Stderr
	}
	if p.Stdin == nil {
		return cmd.Run()
	}
	// Copied by hand: exec.Cmd would wait for a client stdin that may
	// never end, even after the command has exited.
	w, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		io.Copy(w, p.Stdin)
		w.Close()
	}()
	return cmd.Wait()
}

// relayTerminal serves one exec's terminal: resize requests, stdin into
// the master and the master's output to stdout. copied closes once the
// output ended (EIO when the last holder of the slave has exited); stop
// ends the resize loop.
func relayTerminal(master *os.File, p ExecProcess) (stop func(), copied <-chan struct{}) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s, ok := <-p.Resize:
				if !ok {
					return
				}
				setWinSize(master, s)
			case <-done:
				return
			}
		}
	}()
	if p.Stdin != nil {
		go io.Copy(master, p.Stdin)
	}
	out := p.Stdout
	if out == nil {
		out = io.Discard
	}
	c := make(chan struct{})
	go func() {
		io.Copy(out, master)
		close(c)
	}()
	return func() { close(done) }, c
}
