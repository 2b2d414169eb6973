package oci

import (
	"context"
	"io"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/console"
)

// Runtime is an OCI runtime CLI (runc, crun) and the one place its command
// lines are built. A container's init is not started through it: the
// ExecStart wrapper of its systemd unit runs CreateArgv, names the init
// the unit's main process, then runs StartArgv.
type Runtime interface {
	// Name is the handler name ("runc", "crun").
	Name() string
	// CreateArgv creates the container (its init waits for start), writes
	// the init's PID to pidFile and the runtime's errors as JSON lines to
	// logFile. consoleSocket, for a process with a terminal, is where
	// the runtime sends the terminal's master (package console); "" for
	// none.
	CreateArgv(id, bundle, pidFile, logFile, consoleSocket string) []string
	// StartArgv starts the created container.
	StartArgv(id, logFile string) []string
	// DeleteArgv is `delete --force id`, run by the unit's ExecStopPost
	// recorder.
	DeleteArgv(id string) []string
	// Exec runs p in the container, on a new terminal when
	// p.Process.Terminal is set, and waits for it: the one exec (ExecSync,
	// streamed exec, exec probes). ctx's end kills the exec'd process; on
	// a deadline the error wraps errdefs.ErrDeadline. A non-zero exit code
	// of the process is not an error; a runtime that could not start the
	// process is.
	Exec(ctx context.Context, id string, p ExecProcess) (exitCode int, err error)
	// Delete kills a running container and removes the runtime's state;
	// an unknown container is not an error.
	Delete(ctx context.Context, id string) error
	// Update writes new limits into the container's own cgroup (runc's
	// `update --resources -`): only the fields set in r change. A runtime
	// whose containers have no cgroup of their own does nothing.
	Update(ctx context.Context, id string, r *specs.LinuxResources) error
	// OwnCgroup reports whether the runtime creates the container's own
	// cgroup below the unit and writes the spec's limits into it (runc);
	// crun under --cgroup-manager=disabled leaves it in the unit's.
	OwnCgroup() bool
	// CheckpointArgv dumps a running container with CRIU into ck and
	// leaves it running; RestoreArgv restores ck as container id instead
	// of CreateArgv+StartArgv (see CLI.RestoreArgv).
	CheckpointArgv(id string, ck Checkpoint) []string
	RestoreArgv(id, bundle, pidFile, logFile string, ck Checkpoint) []string
	// Checkpoint runs CheckpointArgv; a CRIU failure carries CRIU's log.
	Checkpoint(ctx context.Context, id string, ck Checkpoint) error
	// Pause freezes the container's own cgroup (`pause`), Resume thaws
	// it (`resume`): a pod checkpoint holds each container there while
	// the others are dumped (docs/checkpoint.md).
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Features asks the runtime what it supports on this host (bounded by
	// FeaturesTimeout). It runs a command: callers probe once at start
	// and keep the answer.
	Features(ctx context.Context) (Features, error)
}

// ExecProcess is a process to run in a container.
type ExecProcess struct {
	// Process is what the runtime executes; with Terminal set it gets a
	// new terminal, relayed to Stdin and Stdout.
	Process specs.Process
	// Stdin may be nil; the process sees EOF when it ends.
	Stdin io.Reader
	// Stdout and Stderr may be nil; a terminal's output goes to Stdout.
	Stdout, Stderr io.Writer
	// Resize carries a terminal's sizes; it may be nil. The first size,
	// when it comes at once, is the terminal's size from the start.
	Resize <-chan console.WinSize
}
