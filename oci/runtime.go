package oci

import (
	"context"
	"io"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Runtime is an OCI runtime CLI (runc, crun) and the one place its command
// lines are built. A container's init is not started through it: its
// systemd unit runs CreateArgv as ExecStart and StartArgv as
// ExecStartPost, so the container's init becomes the unit's main process.
type Runtime interface {
	// Name is the handler name ("runc", "crun").
	Name() string
	// CreateArgv creates the container (its init waits for start), writes
	// the init's PID to pidFile and the runtime's errors as JSON lines to
	// logFile.
	CreateArgv(id, bundle, pidFile, logFile string) []string
	// StartArgv starts the created container.
	StartArgv(id, logFile string) []string
	// DeleteArgv is `delete --force id`, run by the unit's ExecStopPost
	// recorder.
	DeleteArgv(id string) []string
	// ExecArgv runs args in the foreground with the container's own
	// process spec (user, environment, capabilities, cwd).
	ExecArgv(id string, args []string) []string
	// ExecProcessArgv runs the process in processFile (a specs.Process as
	// JSON) in the foreground.
	ExecProcessArgv(id, processFile string) []string
	// StateArgv prints the runtime's state of the container as JSON.
	StateArgv(id string) []string
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
