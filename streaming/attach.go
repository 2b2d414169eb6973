package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/logrelay"
)

// OutputSource follows a non-TTY container's output from now on.
// Follow returns once it has fixed its position (output written after it
// returns is delivered); wait then copies until ctx ends.
type OutputSource interface {
	Follow(ctx context.Context, t Target, stdout, stderr io.Writer) (wait func() error, err error)
}

// exitPoll is how often a session checks whether its container is still
// running (a session without stdin ends when the container stops).
const exitPoll = time.Second

type attachSession struct {
	h        *handler
	t        Target
	in       io.Reader
	out, err io.Writer
	resize   <-chan console.WinSize
}

func (s *attachSession) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.t.TTY {
		return s.runTerminal(ctx)
	}
	return s.runPipes(ctx)
}

// runTerminal attaches to a tty container's terminal: output from the
// relay's stdout tap (the relay alone reads the master), input and
// resizes through the master the relay hands out. With stdin_once, the
// end of the client's stdin hangs the terminal up.
func (s *attachSession) runTerminal(ctx context.Context) error {
	if s.h.d.Terminals == nil {
		return fmt.Errorf("container %s: no terminal access: %w", s.t.ID, errdefs.ErrPrecondition)
	}
	raw, err := s.h.d.Terminals.Terminal(s.t.ID)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("container %s: its terminal is closed (stdin_once) or not held by the log relay: %w", s.t.ID, errdefs.ErrPrecondition)
		}
		return fmt.Errorf("container %s: terminal: %w", s.t.ID, err)
	}
	master, err := adopt(raw, raw.Name())
	if err != nil {
		return fmt.Errorf("container %s: terminal: %w", s.t.ID, err)
	}
	defer master.Close()
	waitOut := make(chan error, 1)
	if s.out != nil {
		wait, err := followTaps(ctx, s.t.TapDir, tap{logrelay.TapOut, s.out})
		if err != nil {
			return fmt.Errorf("container %s: follow the terminal: %w", s.t.ID, err)
		}
		go func() { waitOut <- wait() }()
	}
	if s.resize != nil {
		go func() {
			for sz := range s.resize { // closed with ctx

				if err := console.SetWinSize(master, sz.Height, sz.Width); err != nil {
					s.h.log.Debug("attach resize", "container", s.t.ID, "err", err)
				}
			}
		}()
	}
	var inDone chan struct{}
	if s.in != nil && s.t.Stdin {
		inDone = make(chan struct{})
		go func() {
			defer close(inDone)
			if _, err := io.Copy(master, s.in); err != nil && !errors.Is(err, os.ErrClosed) {
				s.h.log.Debug("attach stdin copy ended", "container", s.t.ID, "err", err)
			}
		}()
	} else if s.in != nil {
		go io.Copy(io.Discard, s.in)
	}
	select {
	case <-ctx.Done():
	case <-s.stopped(ctx):
	case <-inDone:
		if s.t.StdinOnce {
			// As the kubelet expects of stdin_once: the container's
			// stdin ends with this session. On a terminal that is a
			// hangup (containerd's shim closes the console then too).
			master.Close()
			if err := s.h.d.Terminals.Hangup(s.t.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return fmt.Errorf("container %s: close stdin: %w", s.t.ID, err)
			}
		}
	case err := <-waitOut:
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("container %s: output: %w", s.t.ID, err)
		}
	}
	return nil
}

// stopped is closed once the container no longer runs.
func (s *attachSession) stopped(ctx context.Context) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		defer close(c)
		t := time.NewTicker(exitPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				tg, err := s.h.d.Containers.StreamTarget(ctx, s.t.ID)
				if err != nil && errors.Is(err, errdefs.ErrNotFound) || err == nil && !tg.Running {
					return
				}
			}
		}
	}()
	return c
}

func (s *attachSession) runPipes(ctx context.Context) error {
	waitOut := make(chan error, 1)
	if s.out != nil || s.err != nil {
		out, errw := s.out, s.err
		if out == nil {
			out = io.Discard
		}
		if errw == nil {
			errw = io.Discard
		}
		wait, err := followTaps(ctx, s.t.TapDir, tap{logrelay.TapOut, out}, tap{logrelay.TapErr, errw})
		if err != nil {
			// No taps (container started by an older podunit): the
			// journal has the output, line by line.
			wait, err = s.h.d.Output.Follow(ctx, s.t, out, errw)
		}
		if err != nil {
			return fmt.Errorf("container %s: follow output: %w", s.t.ID, err)
		}
		go func() { waitOut <- wait() }()
	}
	var inDone chan struct{}
	if s.in != nil && s.t.Stdin {
		w, err := s.stdinWriter()
		if err != nil {
			return err
		}
		inDone = make(chan struct{})
		go func() {
			defer close(inDone)
			defer w.Close()
			_, err := io.Copy(w, s.in)
			if err != nil && !errors.Is(err, os.ErrClosed) {
				s.h.log.Debug("attach stdin copy ended", "container", s.t.ID, "err", err)
			}
		}()
	} else if s.in != nil {
		go io.Copy(io.Discard, s.in)
	}
	stopped := s.stopped(ctx)
	select {
	case <-ctx.Done():
	case <-stopped:
		// Give the journal a moment for the last lines.
		time.Sleep(200 * time.Millisecond)
	case <-inDone:
		// The session ends with the client's stdin: the container's stdin
		// stays open (the unit's wrapper holds the FIFO), so nothing would
		// tell it apart from a session still running.
	case err := <-waitOut:
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("container %s: output: %w", s.t.ID, err)
		}
	}
	return nil
}

// stdinWriter is where attach input goes: a write end of the container's
// FIFO opened for this session.
func (s *attachSession) stdinWriter() (*os.File, error) {
	if s.t.StdinPath == "" {
		return nil, fmt.Errorf("container %s: its stdin is closed (stdin_once) or was lost: %w", s.t.ID, errdefs.ErrPrecondition)
	}
	// Non-blocking: with no reader (container gone) this fails with ENXIO
	// instead of hanging.
	f, err := os.OpenFile(s.t.StdinPath, os.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("container %s: open stdin: %v: %w", s.t.ID, err, errdefs.ErrPrecondition)
	}
	return f, nil
}

// tap is one of the relay's attach taps and where its bytes go.
type tap struct {
	name string
	w    io.Writer
}

// followTaps connects to the relay's taps in dir and copies what the
// container writes from now on to their writers.
func followTaps(ctx context.Context, dir string, taps ...tap) (func() error, error) {
	if dir == "" {
		return nil, errors.New("no taps")
	}
	var d net.Dialer
	conns := make([]net.Conn, 0, len(taps))
	for _, t := range taps {
		c, err := d.DialContext(ctx, "unix", filepath.Join(dir, t.name))
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return func() error {
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-done:
			}
			for _, c := range conns {
				c.Close()
			}
		}()
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(taps[i].w, c) }()
		}
		wg.Wait()
		close(done)
		return nil
	}, nil
}
