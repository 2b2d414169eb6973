package logrelay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/fdstore"
	"github.com/podunit/podunit/statefile"
)

// Options configure a relay server.
type Options struct {
	// Socket is where Register and Wait reach the relay (mode 0600).
	Socket string
	// StateDir remembers the tap directories of attachable containers
	// across relay restarts.
	StateDir string
	// Store keeps pipes and streams across relay restarts (systemd's fd
	// store); nil keeps them only in this process.
	Store fdstore.Store
	// DoneTTL is how long a finished container is still answered as done
	// to Wait (default 10 min).
	DoneTTL time.Duration
	Logger  *slog.Logger
}

// Server relays the output of every registered container.
type Server struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	active    map[string]*relay
	done      map[string]time.Time
	storeWarn bool
}

// relay is one container's pair of streams.
type relay struct {
	id string
	meta
	left     int
	finished chan struct{}
	// waiter is the PID of the unit's ExecStopPost helper once it waits:
	// a live process of the unit to send the last output as.
	waiter atomic.Int32
}

// meta is what a relay needs besides the descriptors; it is kept in the
// state dir so a restarted relay has it too.
type meta struct {
	TapDir    string `json:"tap_dir,omitempty"`
	CgroupDir string `json:"cgroup_dir,omitempty"`
	// PID is the process that registered (the unit's ExecStart wrapper).
	PID int32 `json:"pid,omitempty"`
}

// New makes a server; Restore and Serve start it.
func New(o Options) *Server {
	if o.DoneTTL <= 0 {
		o.DoneTTL = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Server{opts: o, log: o.Logger, active: map[string]*relay{}, done: map[string]time.Time{}}
}

// fdName names a stored descriptor: kind "p" for the pipe, "s" for the
// journald stream.
func fdName(id, stream, kind string) string { return "lr." + id + "." + stream + "." + kind }

func parseFDName(name string) (id, stream, kind string, ok bool) {
	rest, ok := strings.CutPrefix(name, "lr.")
	if !ok {
		return "", "", "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", "", "", false
	}
	kind, rest = rest[i+1:], rest[:i]
	j := strings.LastIndexByte(rest, '.')
	if j < 0 {
		return "", "", "", false
	}
	id, stream = rest[:j], rest[j+1:]
	if !ValidID(id) || (stream != "out" && stream != "err") || (kind != "p" && kind != "s") {
		return "", "", "", false
	}
	return id, stream, kind, true
}

// Restore resumes the streams a previous relay left in the fd store
// (activation files, Name() = FDNAME). Descriptors that are not the
// relay's are closed; a pipe without its stream (or the reverse) is
// dropped from the store.
func (s *Server) Restore(files []*os.File) {
	type pair struct{ pipe, sock *os.File }
	byID := map[string]map[string]*pair{}
	for _, f := range files {
		id, stream, kind, ok := parseFDName(f.Name())
		if !ok {
			s.log.Warn("closing an fd store entry that is not a relay stream", "name", f.Name())
			f.Close()
			continue
		}
		nf, err := fdstore.Adopt(f, f.Name())
		if err != nil {
			s.log.Warn("cannot restore a relay stream", "name", f.Name(), "err", err)
			s.forget(f.Name())
			continue
		}
		if byID[id] == nil {
			byID[id] = map[string]*pair{}
		}
		p := byID[id][stream]
		if p == nil {
			p = &pair{}
			byID[id][stream] = p
		}
		if kind == "p" {
			p.pipe = nf
		} else {
			p.sock = nf
		}
	}
	for id, streams := range byID {
		var m meta
		_ = statefile.Read(s.metaFile(id), &m)
		r := &relay{id: id, meta: m, finished: make(chan struct{})}
		s.mu.Lock()
		s.active[id] = r
		for stream, p := range streams {
			if p.pipe == nil || p.sock == nil {
				for kind, f := range map[string]*os.File{"p": p.pipe, "s": p.sock} {
					if f != nil {
						f.Close()
						s.forget(fdName(id, stream, kind))
					}
				}
				continue
			}
			r.left++
			s.startPump(r, stream, p.pipe, p.sock)
		}
		if r.left == 0 {
			delete(s.active, id)
			s.done[id] = time.Now()
			close(r.finished)
		}
		s.mu.Unlock()
		s.log.Info("resumed relaying a container's output", "container", id, "streams", r.left)
	}
}

func (s *Server) metaFile(id string) string { return filepath.Join(s.opts.StateDir, id+".json") }

// forget drops a name from the fd store.
func (s *Server) forget(name string) {
	if s.opts.Store == nil {
		return
	}
	if err := s.opts.Store.Remove(name); err != nil {
		s.log.Debug("fd store remove", "name", name, "err", err)
	}
}

// register starts relaying a new container's streams. Called with the
// received descriptors: out pipe, out stream, err pipe, err stream.
func (s *Server) register(id string, m meta, fds []int) error {
	if !ValidID(id) {
		closeAll(fds)
		return fmt.Errorf("bad container id %q", id)
	}
	if len(fds) != 4 {
		closeAll(fds)
		return fmt.Errorf("want 4 descriptors, got %d", len(fds))
	}
	for _, d := range []string{m.TapDir, m.CgroupDir} {
		if d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) != d) {
			closeAll(fds)
			return fmt.Errorf("directory %q is not a clean absolute path", d)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.active[id]; ok {
		closeAll(fds)
		return fmt.Errorf("container %s is already being relayed", id)
	}
	files := make([]*os.File, 4)
	for i, fd := range fds {
		f, err := fileOf(fd, fdName(id, streamNames[i/2], []string{"p", "s"}[i%2]))
		if err != nil {
			closeAll(fds[i:])
			for _, g := range files[:i] {
				g.Close()
			}
			return err
		}
		files[i] = f
	}
	if err := statefile.Write(s.metaFile(id), m); err != nil {
		s.log.Warn("cannot save the container's relay state; a relay restart would lose its journal fields and taps", "container", id, "err", err)
	}
	if s.opts.Store != nil {
		for _, f := range files {
			if err := s.opts.Store.Store(f.Name(), f); err != nil && !s.storeWarn {
				s.storeWarn = true
				s.log.Warn("cannot park streams in systemd's fd store: a relay restart would cut container output", "err", err)
			}
		}
	}
	delete(s.done, id)
	r := &relay{id: id, meta: m, left: 2, finished: make(chan struct{})}
	s.active[id] = r
	s.startPump(r, "out", files[0], files[1])
	s.startPump(r, "err", files[2], files[3])
	return nil
}

// startPump runs one stream; s.mu is held.
func (s *Server) startPump(r *relay, stream string, pipe, sock *os.File) {
	var t *Tap
	if r.TapDir != "" {
		name := TapOut
		if stream == "err" {
			name = TapErr
		}
		t = NewTap(filepath.Join(r.TapDir, name))
	}
	a := &anchor{pid: r.PID, cgroupDir: r.CgroupDir, waiter: &r.waiter}
	if a.pid == 0 {
		a.refresh()
	}
	go func() {
		err := pump(pipe, sock, a, t)
		if t != nil {
			t.Close()
		}
		pipe.Close()
		sock.Close()
		s.forget(fdName(r.id, stream, "p"))
		s.forget(fdName(r.id, stream, "s"))
		if err != nil {
			// The journald stream is gone: the container gets EPIPE on
			// its next write rather than blocking on a pipe nobody reads.
			s.log.Warn("container output stream ended with an error", "container", r.id, "stream", stream, "err", err)
		}
		s.finish(r)
	}()
}

func (s *Server) finish(r *relay) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.left--
	if r.left > 0 {
		return
	}
	delete(s.active, r.id)
	now := time.Now()
	s.done[r.id] = now
	close(r.finished)
	_ = os.Remove(s.metaFile(r.id))
	for id, t := range s.done {
		if now.Sub(t) > s.opts.DoneTTL {
			delete(s.done, id)
		}
	}
}

// wait answers WAIT: done, unknown, or timeout.
func (s *Server) wait(ctx context.Context, id string, d time.Duration, waiter int32) string {
	s.mu.Lock()
	r, active := s.active[id]
	_, done := s.done[id]
	s.mu.Unlock()
	switch {
	case active:
		if waiter > 0 {
			r.waiter.Store(waiter)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-r.finished:
			return replyDone
		case <-t.C:
			return replyTimeout
		case <-ctx.Done():
			return replyTimeout
		}
	case done:
		return replyDone
	}
	return replyUnknown
}

// Active is the number of containers whose output is being relayed.
func (s *Server) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.active)
}

// Serve answers requests on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
		go s.handle(ctx, c)
	}
}

func (s *Server) handle(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	var fds []int
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for i := range msgs {
				if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	var peer int32
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				peer = cred.Pid
			}
		})
	}
	reply := s.dispatch(ctx, buf[:n], fds, peer)
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte(reply))
}

func (s *Server) dispatch(ctx context.Context, msg []byte, fds []int, peer int32) string {
	line, rest, _ := bytes.Cut(msg, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) == 0 {
		closeAll(fds)
		return "ERR empty request"
	}
	switch {
	case f[0] == "REGISTER" && len(f) == 2:
		tapDir, cgroupDir, _ := strings.Cut(string(rest), "\n")
		if err := s.register(f[1], meta{TapDir: tapDir, CgroupDir: cgroupDir, PID: peer}, fds); err != nil {
			return "ERR " + err.Error()
		}
		return replyOK
	case f[0] == "WAIT" && len(f) == 3:
		closeAll(fds)
		ms, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || ms < 0 || ms > 10*60*1000 || !ValidID(f[1]) {
			return "ERR bad WAIT"
		}
		return s.wait(ctx, f[1], time.Duration(ms)*time.Millisecond, peer)
	case f[0] == "PING" && len(f) == 1:
		closeAll(fds)
		return replyOK
	}
	closeAll(fds)
	return "ERR unknown request " + strconv.Quote(f[0])
}

// Listen binds the relay's socket (mode 0600), replacing a stale one but
// refusing when a relay answers there.
func Listen(socket string) (*net.UnixListener, error) {
	if err := Ping(socket, time.Second); err == nil {
		return nil, fmt.Errorf("a log relay already answers at %s", socket)
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o711); err != nil {
		return nil, err
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	return l, nil
}
