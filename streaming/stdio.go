package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

// DefaultSocketDir holds console sockets while TTY containers start. It
// is short on purpose: a unix socket path has at most 107 bytes.
const DefaultSocketDir = "/run/podunit/console"

// TTYSink receives everything a TTY container writes to its terminal.
// podunit holds the terminal's master, so this is the only way that
// output reaches the logs; it is called from one goroutine per container.
type TTYSink interface {
	TTYOutput(containerID string, p []byte)
}

// StdioConfig configures Stdio.
type StdioConfig struct {
	// SocketDir holds console sockets; empty means DefaultSocketDir.
	SocketDir string
	// Store keeps descriptors across restarts; nil means NotifyFDStore{}.
	Store FDStore
	// Restored are the stored descriptors systemd passed back at start
	// (see SplitActivationFiles); Stdio owns them from now on.
	Restored []*os.File
	// Sink receives TTY output; nil drops it (tests only).
	Sink   TTYSink
	Logger *slog.Logger
}

// Stdio holds the ends of containers' stdio that attach needs and that no
// process of the container's unit can keep for podunit: the write end of
// a stdin FIFO and a terminal's master. Each is also parked in systemd's
// fd store, so a restarted podunit gets it back.
type Stdio struct {
	dir   string
	store FDStore
	sink  TTYSink
	log   *slog.Logger

	mu   sync.Mutex
	ctrs map[string]*ctrIO
	// storeWarned notes that the fd store is unreachable (podunit not
	// under systemd): attach works until podunit restarts.
	storeWarned bool
}

type ctrIO struct {
	stdin *os.File // write end of the stdin FIFO
	fifo  string
	pty   *ptyHub
	// Console socket while a TTY container starts.
	sock     string
	lis      *net.UnixListener
	ready    chan struct{} // closed when pty is set or the wait failed
	readyErr error
}

// NewStdio adopts the restored descriptors and resumes copying terminal
// output to the sink.
func NewStdio(cfg StdioConfig) *Stdio {
	s := &Stdio{dir: cfg.SocketDir, store: cfg.Store, sink: cfg.Sink, log: cfg.Logger, ctrs: map[string]*ctrIO{}}
	if s.dir == "" {
		s.dir = DefaultSocketDir
	}
	if s.store == nil {
		s.store = NotifyFDStore{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	for _, f := range cfg.Restored {
		name := f.Name()
		nf, err := adopt(f, name)
		if err != nil {
			s.log.Error("cannot adopt stored descriptor", "name", name, "err", err)
			continue
		}
		switch {
		case strings.HasPrefix(name, stdinFDPrefix):
			id := strings.TrimPrefix(name, stdinFDPrefix)
			s.entry(id).stdin = nf
		case strings.HasPrefix(name, ptyFDPrefix):
			id := strings.TrimPrefix(name, ptyFDPrefix)
			c := s.entry(id)
			c.pty = newPTYHub(id, nf, s.sink)
			c.ready = closedChan()
		default:
			nf.Close()
			continue
		}
		s.log.Info("restored container stdio from the fd store", "name", name)
	}
	return s
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// entry returns the container's record, creating it; callers hold s.mu
// or run before s is shared.
func (s *Stdio) entry(id string) *ctrIO {
	c := s.ctrs[id]
	if c == nil {
		c = &ctrIO{}
		s.ctrs[id] = c
	}
	return c
}

func (s *Stdio) park(name string, f *os.File) {
	if err := s.store.Store(name, f); err != nil {
		s.mu.Lock()
		warned := s.storeWarned
		s.storeWarned = true
		s.mu.Unlock()
		if !warned || !errors.Is(err, errdefs.ErrUnavailable) {
			s.log.Warn("cannot park descriptor in systemd's fd store; attach will not survive a podunit restart", "name", name, "err", err)
		}
	}
}

// PrepareRequest describes a container about to be started.
type PrepareRequest struct {
	ID string
	// Dir is the container's run directory; the stdin FIFO is made there.
	Dir string
	// TTY and Stdin are the container config's values.
	TTY, Stdin bool
}

// Setup is what the container's unit must be given.
type Setup struct {
	// StdinPath, when set, is a FIFO the unit's ExecStart wrapper opens
	// with OpenStdin and makes the runtime's (and so the container's)
	// fd 0. Empty means /dev/null.
	StdinPath string
	// ConsoleSocket, when set, goes to the runtime as
	// `run --console-socket <path>`; the spec must have terminal: true.
	ConsoleSocket string
}

// Prepare makes the container's stdio endpoints before its unit starts:
// for Stdin without TTY a FIFO whose write end podunit keeps (so the
// container never reads EOF until stdin_once ends it); for TTY a console
// socket on which podunit receives the terminal's master. Call Started
// once the unit is up, and Release when the start fails or the container
// is removed.
func (s *Stdio) Prepare(req PrepareRequest) (_ Setup, retErr error) {
	if req.ID == "" || strings.ContainsAny(req.ID, "/:\n") || len(req.ID) > 200 {
		return Setup{}, fmt.Errorf("container id %q: %w", req.ID, errdefs.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.ctrs[req.ID]; c != nil {
		return Setup{}, fmt.Errorf("stdio of container %s already prepared: %w", req.ID, errdefs.ErrExists)
	}
	c := &ctrIO{}
	defer func() {
		if retErr != nil {
			c.close()
		}
	}()
	var setup Setup
	if req.TTY {
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return Setup{}, fmt.Errorf("console socket directory: %w", err)
		}
		short := req.ID
		if len(short) > 32 {
			short = short[:32]
		}
		c.sock = filepath.Join(s.dir, short+".sock")
		os.Remove(c.sock)
		lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.sock, Net: "unix"})
		if err != nil {
			return Setup{}, fmt.Errorf("console socket: %w", err)
		}
		lis.SetUnlinkOnClose(true)
		c.lis = lis
		c.ready = make(chan struct{})
		go s.receiveConsole(req.ID, c)
		setup.ConsoleSocket = c.sock
	} else if req.Stdin {
		if req.Dir == "" {
			return Setup{}, fmt.Errorf("stdin FIFO needs the container's run directory: %w", errdefs.ErrInvalid)
		}
		c.fifo = filepath.Join(req.Dir, "stdin")
		os.Remove(c.fifo)
		if err := unix.Mkfifo(c.fifo, 0o600); err != nil {
			return Setup{}, fmt.Errorf("stdin FIFO: %w", err)
		}
		// A FIFO opened write-only blocks (or fails, non-blocking) until
		// a reader exists, so podunit briefly is its own reader.
		rw, err := os.OpenFile(c.fifo, os.O_RDWR|unix.O_NONBLOCK, 0)
		if err != nil {
			return Setup{}, fmt.Errorf("open stdin FIFO: %w", err)
		}
		w, err := os.OpenFile(c.fifo, os.O_WRONLY|unix.O_NONBLOCK, 0)
		rw.Close()
		if err != nil {
			return Setup{}, fmt.Errorf("open stdin FIFO for writing: %w", err)
		}
		c.stdin = w
		s.park(stdinFDPrefix+req.ID, w)
		setup.StdinPath = c.fifo
	}
	s.ctrs[req.ID] = c
	return setup, nil
}

// receiveConsole takes the terminal master the runtime sends to the
// console socket.
func (s *Stdio) receiveConsole(id string, c *ctrIO) {
	master, err := recvFD(c.lis)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		master, err = adopt(master, ptyFDPrefix+id)
	}
	if err != nil {
		c.readyErr = fmt.Errorf("receive terminal of container %s: %w", id, err)
	} else if s.ctrs[id] != c || c.lis == nil {
		// Released while the runtime was sending.
		master.Close()
		c.readyErr = fmt.Errorf("container %s released: %w", id, errdefs.ErrNotFound)
	} else {
		s.park(ptyFDPrefix+id, master)
		c.pty = newPTYHub(id, master, s.sink)
	}
	if c.lis != nil {
		c.lis.Close()
		c.lis = nil
	}
	close(c.ready)
}

// recvFD accepts one connection and reads one descriptor sent with
// SCM_RIGHTS (runc and crun send the master this way).
func recvFD(lis *net.UnixListener) (*os.File, error) {
	conn, err := lis.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) == 0 {
		return nil, errors.New("no descriptor in console socket message")
	}
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	unix.CloseOnExec(fds[0])
	return os.NewFile(uintptr(fds[0]), "pty-master"), nil
}

// Started waits until a TTY container's runtime has handed over the
// terminal (no-op otherwise). Call it after the unit's start job is done.
func (s *Stdio) Started(ctx context.Context, id string) error {
	s.mu.Lock()
	c := s.ctrs[id]
	s.mu.Unlock()
	if c == nil || c.ready == nil {
		return nil
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		s.mu.Lock()
		if c.lis != nil {
			c.lis.Close()
		}
		s.mu.Unlock()
		<-c.ready
		if c.readyErr == nil {
			return nil
		}
		return fmt.Errorf("container %s: the runtime did not hand over its terminal: %w", id, ctx.Err())
	}
	return c.readyErr
}

// Release closes the container's stdio ends and drops them from the fd
// store. It is idempotent.
func (s *Stdio) Release(id string) {
	s.mu.Lock()
	c := s.ctrs[id]
	delete(s.ctrs, id)
	s.mu.Unlock()
	if c == nil {
		return
	}
	if c.stdin != nil {
		s.store.Remove(stdinFDPrefix + id)
	}
	if c.pty != nil {
		s.store.Remove(ptyFDPrefix + id)
	}
	s.mu.Lock()
	c.close()
	s.mu.Unlock()
}

// Prune releases every container keep rejects: after a restart, ends
// parked for containers removed while podunit was down.
func (s *Stdio) Prune(keep func(id string) bool) {
	s.mu.Lock()
	var drop []string
	for id := range s.ctrs {
		if !keep(id) {
			drop = append(drop, id)
		}
	}
	s.mu.Unlock()
	for _, id := range drop {
		s.Release(id)
	}
}

// close is called with s.mu held (or on an unshared entry).
func (c *ctrIO) close() {
	if c.lis != nil {
		c.lis.Close()
		c.lis = nil
	}
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
	}
	if c.fifo != "" {
		os.Remove(c.fifo)
	}
	if c.pty != nil {
		c.pty.close()
	}
}

// OpenStdin opens a container's stdin FIFO for reading; the unit's
// ExecStart wrapper calls it and installs the result as fd 0 before it
// execs the runtime. It never blocks: if podunit's write end is gone
// (podunit lost it), the container reads EOF instead of hanging at start.
func OpenStdin(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open stdin FIFO %s: %w", path, err)
	}
	// The container expects ordinary blocking reads.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stdin FIFO %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// stdinWriter returns the held write end of a container's stdin FIFO.
func (s *Stdio) stdinWriter(id string) *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.ctrs[id]; c != nil {
		return c.stdin
	}
	return nil
}

// closeStdin ends a container's stdin (stdin_once): with podunit's write
// end gone the container reads EOF.
func (s *Stdio) closeStdin(id string) {
	s.mu.Lock()
	c := s.ctrs[id]
	var f *os.File
	if c != nil {
		f, c.stdin = c.stdin, nil
	}
	s.mu.Unlock()
	if f != nil {
		s.store.Remove(stdinFDPrefix + id)
		f.Close()
	}
}

func (s *Stdio) terminal(id string) *ptyHub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.ctrs[id]; c != nil {
		return c.pty
	}
	return nil
}

// ptyHub copies a terminal's output to the sink and to attached clients.
type ptyHub struct {
	id     string
	master *os.File
	sink   TTYSink
	done   chan struct{} // closed when the terminal has no more output

	mu   sync.Mutex
	subs map[*ptySub]struct{}
	wmu  sync.Mutex // serialises input from concurrent attach sessions
}

type ptySub struct {
	w    io.Writer
	gone chan struct{}
}

func newPTYHub(id string, master *os.File, sink TTYSink) *ptyHub {
	h := &ptyHub{id: id, master: master, sink: sink, done: make(chan struct{}), subs: map[*ptySub]struct{}{}}
	go h.pump()
	return h
}

// pump runs for the terminal's life. Until a podunit restart resumes it,
// a container that fills the terminal's buffer blocks on its writes.
func (h *ptyHub) pump() {
	defer close(h.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := h.master.Read(buf)
		if n > 0 {
			p := buf[:n]
			if h.sink != nil {
				h.sink.TTYOutput(h.id, p)
			}
			h.mu.Lock()
			for s := range h.subs {
				if _, werr := s.w.Write(p); werr != nil {
					delete(h.subs, s)
					close(s.gone)
				}
			}
			h.mu.Unlock()
		}
		if err != nil {
			// EIO: every slave is closed, the container has exited.
			return
		}
	}
}

func (h *ptyHub) subscribe(w io.Writer) *ptySub {
	s := &ptySub{w: w, gone: make(chan struct{})}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

func (h *ptyHub) unsubscribe(s *ptySub) {
	h.mu.Lock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.gone)
	}
	h.mu.Unlock()
}

func (h *ptyHub) write(p []byte) (int, error) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return h.master.Write(p)
}

func (h *ptyHub) close() {
	h.master.Close()
}
