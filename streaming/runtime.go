package streaming

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
)

// Target is what streaming needs to know about one container.
type Target struct {
	ID      string
	Running bool
	// Stdin, StdinOnce and TTY are the container config's values.
	Stdin, StdinOnce, TTY bool
	// StdinPath is the container's stdin FIFO, where attach input goes
	// (the unit's wrapper opened the FIFO read-write itself: input works,
	// stdin_once cannot end it).
	StdinPath string
	// JournalMatch selects the container's output in the journal for
	// non-TTY attach (journalctl match syntax, e.g. "CONTAINER_ID=<id>");
	// empty means CONTAINER_ID=<ID>.
	JournalMatch []string
	// TapDir holds the relay's attach taps (logrelay.TapOut, logrelay.TapErr)
	// of an attachable container: its output byte for byte, partial lines
	// included, which the journal only has once a line is complete.
	TapDir string
	// InitPID and InitStart (procstat's start time) identify the
	// container's init while it runs (0 when unknown), ExitFile is where
	// its exit record appears: the session process, which cannot ask
	// podunit, tells from them that the container stopped.
	InitPID   int
	InitStart uint64
	ExitFile  string
}

// ExecTarget is what the session process needs to run a container's
// execs with the one exec of package oci: the container's runtime and its
// process, from which oci.ExecSpec derives each exec's.
type ExecTarget struct {
	ID      string
	Runtime oci.CLISpec
	Process specs.Process
}

// ExecTargets resolves a running container's ExecTarget
// (container.Manager); an unknown container wraps errdefs.ErrNotFound.
type ExecTargets interface {
	ExecTarget(ctx context.Context, id string) (ExecTarget, error)
}

// Containers looks containers up for exec and attach. An unknown ID must
// wrap errdefs.ErrNotFound.
type Containers interface {
	StreamTarget(ctx context.Context, id string) (Target, error)
}

// Terminals gives access to tty containers' terminals, which the node's
// log relay holds (logrelay.Client). Unknown terminals wrap
// errdefs.ErrNotFound.
type Terminals interface {
	// Terminal returns the master for a session's input and resizes; the
	// relay alone reads it.
	Terminal(id string) (*os.File, error)
	// Hangup closes the terminal for good (stdin_once).
	Hangup(id string) error
}

// Pods gives a pod's pinned network namespace. An unknown pod must wrap
// errdefs.ErrNotFound; a pod on the host network returns "" and the
// forward then dials the host's loopback.
type Pods interface {
	NetNSPath(ctx context.Context, podID string) (string, error)
}

// ExecProcess is one command run in a container for a stream.
type ExecProcess struct {
	Args []string
	// Stdin is nil when the client sends none.
	Stdin io.Reader
	// Stdout and Stderr may be nil; with TTY only Stdout is used.
	Stdout, Stderr io.Writer
	TTY            bool
	// Resize carries terminal sizes for TTY processes; it may be nil.
	Resize <-chan console.WinSize
}

// Executor runs a process in a running container and returns its exit
// code once it has ended and its output has been written. An unknown
// container must wrap errdefs.ErrNotFound.
type Executor interface {
	Exec(ctx context.Context, id string, p ExecProcess) (exitCode int, err error)
}

// handler is the cri-streaming library's Runtime.
type handler struct {
	d   Deps
	log *slog.Logger
}

func (h *handler) running(ctx context.Context, id string) (Target, error) {
	return running(ctx, h.d.Containers, id)
}

// running is the container's Target if it runs now.
func running(ctx context.Context, cs Containers, id string) (Target, error) {
	t, err := cs.StreamTarget(ctx, id)
	if err != nil {
		return Target{}, fmt.Errorf("container %s: %w", id, err)
	}
	if !t.Running {
		return Target{}, fmt.Errorf("container %s is not running: %w", id, errdefs.ErrPrecondition)
	}
	return t, nil
}

// resizes adapts the library's resize channel; it ends with ctx.
func resizes(ctx context.Context, in <-chan remotecommand.TerminalSize) <-chan console.WinSize {
	if in == nil {
		return nil
	}
	out := make(chan console.WinSize)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case s, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- console.WinSize{Width: s.Width, Height: s.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

func (h *handler) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	t, err := h.running(ctx, id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := ExecProcess{Args: cmd, Stdin: in, TTY: tty, Resize: resizes(ctx, resize)}
	// A nil io.WriteCloser inside an io.Writer is not nil.
	if out != nil {
		p.Stdout = out
	}
	if errw != nil {
		p.Stderr = errw
	}
	code, err := h.d.Exec.Exec(ctx, t.ID, p)
	if err != nil {
		return err
	}
	if code != 0 {
		// The library reports an ExitError as the command's exit code
		// instead of an internal error.
		return utilexec.CodeExitError{Err: fmt.Errorf("command exited with %d", code), Code: code}
	}
	return nil
}

func (h *handler) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	t, err := h.running(ctx, id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := attachSession{h: h, t: t, resize: resizes(ctx, resize)}
	if in != nil {
		s.in = in
	}
	if out != nil {
		s.out = out
	}
	if errw != nil {
		s.err = errw
	}
	return s.run(ctx)
}

func (h *handler) PortForward(ctx context.Context, podID string, port int32, stream io.ReadWriteCloser) error {
	path, err := h.d.Pods.NetNSPath(ctx, podID)
	if err != nil {
		return fmt.Errorf("pod %s: %w", podID, err)
	}
	return forward(ctx, path, port, stream)
}
