package oci

import (
	"context"
	"io"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Runtime is an OCI runtime CLI (runc, crun). The container's init is not
// started through it: podunit's systemd unit runs RunArgv as ExecStart, so the
// container becomes the unit's main process. Everything after that goes
// through these methods.
type Runtime interface {
	// Name is the handler name ("runc", "crun").
	Name() string
	// RunArgv is the unit's ExecStart for a container without a terminal:
	// start detached, write the init's PID to pidFile.
	RunArgv(id, bundle, pidFile string) []string
	// Exec runs p in the container and waits for it. ctx's deadline kills
	// the exec'd process; the error then wraps errdefs.ErrDeadline. A non-zero
	// exit code of the process is not an error.
	Exec(ctx context.Context, id string, p ExecProcess) (exitCode int, err error)
	// Delete removes the runtime's state; an unknown container is not an
	// error. force kills a running container first.
	Delete(ctx context.Context, id string, force bool) error
	// Update writes new limits into the container's own cgroup (runc's
	// `update --resources -`): only the fields set in r change. A runtime
	// whose containers have no cgroup of their own does nothing.
	Update(ctx context.Context, id string, r *specs.LinuxResources) error
	// OwnCgroup reports whether the runtime creates the container's own
	// cgroup below the unit and writes the spec's limits into it (runc);
	// crun under --cgroup-manager=disabled leaves it in the unit's.
	OwnCgroup() bool
}

// ExecProcess is a process to run in a container, without a terminal
// (terminal execs go through package streaming's helper).
type ExecProcess struct {
	// Process is what the runtime executes.
	Process specs.Process
	// Stdin may be nil.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}
