package oci

import (
	"context"
	"io"
	"syscall"
	"time"

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
	// ConsoleRunArgv is RunArgv for a spec with process.terminal: the runtime
	// sends the pty master to consoleSocket (see ConsoleSocket).
	ConsoleRunArgv(id, bundle, pidFile, consoleSocket string) []string
	// Exec runs p in the container and waits for it. ctx's deadline kills
	// the exec'd process; the error then wraps errdefs.ErrDeadline. A non-zero
	// exit code of the process is not an error.
	Exec(ctx context.Context, id string, p ExecProcess) (exitCode int, err error)
	// Kill signals the init (all: every process in the container).
	// ErrNotFound for an unknown container, ErrPrecondition when it is not
	// running.
	Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error
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
	// State reports the runtime's view; ErrNotFound for an unknown container.
	State(ctx context.Context, id string) (*State, error)
	// List reports every container under the runtime's root.
	List(ctx context.Context) ([]State, error)
	// Features reports what the handler supports, for the CRI Status.
	Features(ctx context.Context) (*Features, error)
}

// Status values the runtimes report.
const (
	StatusCreating = "creating"
	StatusCreated  = "created"
	StatusRunning  = "running"
	StatusStopped  = "stopped"
	StatusPaused   = "paused"
)

// State is the runtime's view of one container.
type State struct {
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Created     time.Time         `json:"created"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ExecProcess is a process to run in a container.
type ExecProcess struct {
	// Process is what the runtime executes (ExecProcessSpec derives it from
	// the container's spec); Terminal selects a pty.
	Process specs.Process
	// Stdin may be nil. With a terminal, Stdout receives the pty's output and
	// Stderr is unused.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Resize carries terminal size changes for a terminal exec; it may be nil.
	Resize <-chan TerminalSize
}

// TerminalSize is a pty window size.
type TerminalSize struct {
	Width, Height uint16
}
