package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/podunit/podunit/errdefs"
)

// Source is the journal as the Manager sees it. Journalctl is the real one;
// tests use a fake.
type Source interface {
	// Follow streams container entries (FieldLog=1, stream transport) from
	// cursor on, inclusive; the empty cursor starts at the oldest entry.
	// The stream blocks for new entries until closed.
	Follow(ctx context.Context, cursor string) (EntryStream, error)
	// Tail returns the cursor of the newest entry of any kind, "" when the
	// journal is empty.
	Tail(ctx context.Context) (string, error)
	// Last returns the newest entry of one container; ok is false if the
	// journal has none.
	Last(ctx context.Context, containerID string) (e Entry, ok bool, err error)
	// Sync asks journald to process and store everything it has received
	// so far, including data still queued on stream sockets.
	Sync(ctx context.Context) error
}

// EntryStream yields entries in journal order.
type EntryStream interface {
	// Next returns a batch of one or more entries; it blocks until there
	// is at least one. An error ends the stream.
	Next() ([]Entry, error)
	Close() error
}

// Journalctl is a Source backed by the journalctl binary: one long-running
// `journalctl --follow -o export` for all containers, and short calls for
// Tail, Last and Sync. Running journalctl keeps podunit free of cgo and
// libsystemd headers; the export format is binary-safe and cheap to parse.
type Journalctl struct {
	// Path is the journalctl binary ("journalctl" by default, found in PATH).
	Path string
	// Args come before podunit's own, e.g. {"--directory", dir} to read a
	// journal that is not the local system's (tests read the harness'
	// journal from the host that way).
	Args []string
}

// followFields are the fields the follower asks for; journalctl always adds
// the cursor and the timestamps.
var followFields = strings.Join([]string{fieldMessage, fieldPriority, FieldContainerID, fieldLineBreak}, ",")

// matches select container output: journald's stream transport only, so a
// helper in the unit logging natively, or syslog from inside a container,
// never lands in the CRI log.
var matches = []string{FieldLog + "=1", fieldTransport + "=stdout"}

func (j *Journalctl) path() string {
	if j.Path == "" {
		return "journalctl"
	}
	return j.Path
}

func (j *Journalctl) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, j.path(), append(append([]string{}, j.Args...), args...)...)
	// the follower must not outlive a podunit killed with SIGKILL (it would
	// otherwise linger until its next write hits the closed pipe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Follow implements Source.
func (j *Journalctl) Follow(ctx context.Context, cursor string) (EntryStream, error) {
	args := []string{"--follow", "--no-tail", "--quiet", "--output=export", "--output-fields=" + followFields}
	if cursor != "" {
		args = append(args, "--cursor="+cursor)
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd := j.command(ctx, append(args, matches...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("journalctl follow: %w", err)
	}
	stderr := &limitedBuffer{max: 4096}
	cmd.Stderr = stderr
	exited := make(chan struct{})
	if err := startPinned(cmd, exited); err != nil {
		cancel()
		return nil, fmt.Errorf("start %s: %w: %w", j.path(), errdefs.ErrUnavailable, err)
	}
	return &journalStream{cmd: cmd, cancel: cancel, dec: NewExportDecoder(out), stderr: stderr, exited: exited}, nil
}

// startPinned starts cmd from an OS thread that stays alive until exited
// is closed. Pdeathsig fires when the forking thread ends, not the
// process, and Go ends threads: netns.Do's throw-away threads exit
// locked. A follower forked from a thread that a pod's namespace setup
// later took over was SIGKILLed (after a restart, at about every fifth
// RunPodSandbox: "journal follower stopped; restarting").
func startPinned(cmd *exec.Cmd, exited <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		errc <- err
		if err == nil {
			<-exited
		}
		runtime.UnlockOSThread()
	}()
	return <-errc
}

type journalStream struct {
	cmd      *exec.Cmd
	cancel   context.CancelFunc
	dec      *ExportDecoder
	stderr   *limitedBuffer
	waitOnce sync.Once
	waitErr  error
	exited   chan struct{} // closed once reaped: frees startPinned's thread
}

// wait reaps journalctl once; Next (on EOF) and Close may both get there.
func (s *journalStream) wait() error {
	s.waitOnce.Do(func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	})
	return s.waitErr
}

// A batch ends at maxBatch entries or maxBatchBytes of messages, whichever
// comes first, so memory stays bounded (a journal entry can hold 48 KiB)
// and the Manager gets control back often under a sustained flood.
const (
	maxBatch      = 4096
	maxBatchBytes = 4 << 20
)

func (s *journalStream) Next() ([]Entry, error) {
	var batch []Entry
	size := 0
	for {
		f, err := s.dec.Next()
		if err != nil {
			if len(batch) > 0 {
				return batch, nil
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				werr := s.wait()
				return nil, fmt.Errorf("journalctl exited (%v): %s: %w", werr, strings.TrimSpace(s.stderr.String()), errdefs.ErrUnavailable)
			}
			return nil, err
		}
		e, err := EntryFromFields(f)
		if err != nil {
			// one malformed entry must not stop every container's log
			continue
		}
		batch = append(batch, e)
		size += len(e.Message)
		if len(batch) >= maxBatch || size >= maxBatchBytes || s.dec.Buffered() == 0 {
			return batch, nil
		}
	}
}

func (s *journalStream) Close() error {
	s.cancel()
	_ = s.wait()
	return nil
}

// Tail implements Source.
func (j *Journalctl) Tail(ctx context.Context) (string, error) {
	out, err := j.run(ctx, "--quiet", "--lines=0", "--show-cursor")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if c, ok := strings.CutPrefix(line, "-- cursor: "); ok {
			return strings.TrimSpace(c), nil
		}
	}
	return "", nil
}

// Last implements Source.
func (j *Journalctl) Last(ctx context.Context, containerID string) (Entry, bool, error) {
	args := []string{"--quiet", "--lines=1", "--output=export", "--output-fields=" + followFields}
	args = append(append(args, matches...), FieldContainerID+"="+containerID)
	out, err := j.run(ctx, args...)
	if err != nil {
		return Entry{}, false, err
	}
	f, err := NewExportDecoder(bytes.NewReader(out)).Next()
	if errors.Is(err, io.EOF) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	e, err := EntryFromFields(f)
	if err != nil {
		return Entry{}, false, err
	}
	return e, true, nil
}

// Sync implements Source. journald answers only once the queued data
// ahead of the request is processed, which makes it a barrier.
func (j *Journalctl) Sync(ctx context.Context) error {
	// --sync talks to the local journald; --directory does not apply
	cmd := exec.CommandContext(ctx, j.path(), "--sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("journalctl --sync: %v: %s: %w", err, bytes.TrimSpace(out), errdefs.ErrUnavailable)
	}
	return nil
}

func (j *Journalctl) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := j.command(ctx, args...)
	var stderr limitedBuffer
	stderr.max = 4096
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("journalctl %s: %w: %w", strings.Join(args, " "), errdefs.ErrDeadline, ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("journalctl %s: %v: %s: %w", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()), errdefs.ErrUnavailable)
	}
	return out, nil
}

// limitedBuffer keeps the first max bytes written to it: enough of
// journalctl's stderr for an error message, never unbounded.
type limitedBuffer struct {
	max int
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		if len(p) > room {
			b.buf.Write(p[:room])
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string { return b.buf.String() }
