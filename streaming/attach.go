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
	resize   <-chan WinSize
}

func (s *attachSession) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return s.runPipes(ctx)
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
		wait, err := followTaps(ctx, s.t.TapDir, out, errw)
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

// followTaps connects to the relay's taps in dir and copies what the
// container writes from now on to stdout and stderr.
func followTaps(ctx context.Context, dir string, stdout, stderr io.Writer) (func() error, error) {
	if dir == "" {
		return nil, errors.New("no taps")
	}
	var d net.Dialer
	out, err := d.DialContext(ctx, "unix", filepath.Join(dir, logrelay.TapOut))
	if err != nil {
		return nil, err
	}
	errc, err := d.DialContext(ctx, "unix", filepath.Join(dir, logrelay.TapErr))
	if err != nil {
		out.Close()
		return nil, err
	}
	return func() error {
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-done:
			}
			out.Close()
			errc.Close()
		}()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = io.Copy(stdout, out) }()
		go func() { defer wg.Done(); _, _ = io.Copy(stderr, errc) }()
		wg.Wait()
		close(done)
		return nil
	}, nil
}
