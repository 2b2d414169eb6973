package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/streaming"
)

// capped keeps the first max bytes written and discards the rest, so a
// chatty exec cannot grow podunit's memory; the writer never fails (the
// process must not get EPIPE because we stopped listening).
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

// ExecSync runs cmd in a running container and returns its output (each
// stream capped at Options.ExecOutputMax) and exit code. A timeout (in
// seconds, 0 = none) kills the process and returns ErrDeadline.
func (m *Manager) ExecSync(ctx context.Context, id string, cmd []string, timeout int64) (stdout, stderr []byte, exitCode int32, err error) {
	if len(cmd) == 0 {
		return nil, nil, 0, fmt.Errorf("exec in container %s: empty command: %w", id, errdefs.ErrInvalid)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeout)*time.Second)
		defer cancel()
	}
	o, e := &capped{max: m.opts.ExecOutputMax}, &capped{max: m.opts.ExecOutputMax}
	code, err := m.Exec(ctx, id, streaming.ExecProcess{Args: cmd, Stdout: o, Stderr: e})
	if err != nil {
		if errors.Is(err, errdefs.ErrDeadline) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return o.buf.Bytes(), e.buf.Bytes(), 0, fmt.Errorf("exec in container %s: command %q timed out after %ds: %w", id, cmd, timeout, errdefs.ErrDeadline)
		}
		return o.buf.Bytes(), e.buf.Bytes(), 0, err
	}
	return o.buf.Bytes(), e.buf.Bytes(), int32(code), nil
}

// Exec runs p in a running container and waits for it: ExecSync's and the
// streaming server's one way in (streaming.Executor), with or without a
// terminal. The process is the container's own with p's command (see
// oci.ExecSpec); the runtime's Exec runs it. Streamed execs run the same
// way in the session process (ExecTarget, docs/streaming.md).
func (m *Manager) Exec(ctx context.Context, id string, p streaming.ExecProcess) (int, error) {
	if len(p.Args) == 0 {
		return -1, fmt.Errorf("exec in container %s: empty command: %w", id, errdefs.ErrInvalid)
	}
	r, rt, err := m.running(ctx, id)
	if err != nil {
		return -1, err
	}
	spec, err := oci.ReadBundle(m.bundleDir(r.ID))
	if err != nil || spec.Process == nil {
		return -1, fmt.Errorf("exec in container %s: bundle: %v: %w", id, err, errdefs.ErrNotFound)
	}
	proc := oci.ExecSpec(spec.Process, p.Args, p.TTY)
	code, err := rt.Exec(ctx, r.ID, oci.ExecProcess{Process: proc, Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr, Resize: p.Resize})
	if err != nil {
		return code, fmt.Errorf("exec in container %s: %w", id, err)
	}
	return code, nil
}

// ExecTarget is what the streaming session process needs to run execs in
// a running container (streaming.ExecTargets): its runtime, described so
// that the other process builds the same one, and its process, from which
// each exec's is derived (oci.ExecSpec) as Exec does here.
func (m *Manager) ExecTarget(ctx context.Context, id string) (streaming.ExecTarget, error) {
	r, rt, err := m.running(ctx, id)
	if err != nil {
		return streaming.ExecTarget{}, err
	}
	cli, ok := rt.(interface{ Spec() oci.CLISpec })
	if !ok {
		return streaming.ExecTarget{}, fmt.Errorf("exec in container %s: runtime %s cannot be described to the session process: %w", id, rt.Name(), errdefs.ErrPrecondition)
	}
	spec, err := oci.ReadBundle(m.bundleDir(r.ID))
	if err != nil || spec.Process == nil {
		return streaming.ExecTarget{}, fmt.Errorf("exec in container %s: bundle: %v: %w", id, err, errdefs.ErrNotFound)
	}
	return streaming.ExecTarget{ID: r.ID, Runtime: cli.Spec(), Process: *spec.Process}, nil
}

// running returns a container's record and runtime if it is running now.
func (m *Manager) running(ctx context.Context, id string) (*record, oci.Runtime, error) {
	c, err := m.lockCurrent(ctx, id, m.refreshStatusLocked)
	if err != nil {
		return nil, nil, err
	}
	r := c.rec
	c.mu.Unlock()
	if r.State != StateRunning {
		return nil, nil, fmt.Errorf("container %s is %s, not running: %w", id, r.State, errdefs.ErrPrecondition)
	}
	rt, err := m.runtime(r.Handler)
	if err != nil {
		return nil, nil, err
	}
	return r, rt, nil
}
