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

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/fdstore"
	"github.com/podunit/podunit/logs"
	"github.com/podunit/podunit/statefile"
)

// Options configure a relay server.
type Options struct {
	// Socket is where Register and Wait reach the relay (mode 0600).
	Socket string
	// StateDir remembers each container's metadata (log path, tap
	// directory) and its streams' write-ahead records across relay
	// restarts; it should be on tmpfs (a record is saved per chunk).
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

	stats counters
}

// counters are the relay's answer to STATS, podunit's metrics of the CRI
// log files: they start at zero with each relay process.
type counters struct {
	// failing is how many streams cannot write their CRI log file now.
	failing atomic.Int64
	// noSpace and other count failed writes of a chunk (ENOSPC or EDQUOT:
	// /var/log/pods full; anything else).
	noSpace, other atomic.Uint64
}

func (c *counters) writeFailed(err error) {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		c.noSpace.Add(1)
	} else {
		c.other.Add(1)
	}
}

// relay is one container's pair of streams.
type relay struct {
	id string
	meta
	lf       *logFile // nil without a log path
	recs     [2]*recorder
	spools   [2]*spool
	left     int
	finished chan struct{}
	// written is closed once both pipes are at EOF and every line is in
	// the log file (finished also waits for journald, at most 5 s).
	toWrite int
	written chan struct{}
	// waiter is the PID of the unit's ExecStopPost helper once it waits:
	// a live process of the unit to send the last output as.
	waiter atomic.Int32
	// master is a tty container's terminal (its "out" stream), handed to
	// attach sessions; hungUp is set once HANGUP closed it.
	master *os.File
	hungUp atomic.Bool
}

// meta is what a relay needs besides the descriptors; it is kept in the
// state dir so a restarted relay has it too.
type meta struct {
	TapDir    string `json:"tap_dir,omitempty"`
	CgroupDir string `json:"cgroup_dir,omitempty"`
	// PID is the process that registered (the unit's ExecStart wrapper).
	PID int32 `json:"pid,omitempty"`
	// LogPath is the CRI log file; UID and GID its owner (-1: the pod log
	// directory's).
	LogPath string `json:"log_path,omitempty"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	// NoJournal keeps the output out of journald (config logs.journald).
	NoJournal bool `json:"no_journal,omitempty"`
	// TTY: the "out" stream is the container's terminal master and there
	// is no "err" stream.
	TTY bool `json:"tty,omitempty"`
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
// journald stream; the CRI log file is logFDName.
func fdName(id, stream, kind string) string { return "lr." + id + "." + stream + "." + kind }

func logFDName(id string) string { return fdName(id, "log", "f") }

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
	if stream == "log" && kind == "f" && ValidID(id) {
		return id, stream, kind, true
	}
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
	logFiles := map[string]*os.File{}
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
		if kind == "f" {
			if old := logFiles[id]; old != nil {
				old.Close()
			}
			logFiles[id] = nf
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
	for id, f := range logFiles {
		if byID[id] == nil {
			f.Close()
			s.forget(logFDName(id))
		}
	}
	for id, streams := range byID {
		m := meta{UID: -1, GID: -1}
		_ = statefile.Read(s.metaFile(id), &m)
		r := &relay{id: id, meta: m, finished: make(chan struct{}), written: make(chan struct{})}
		s.restoreLog(r, logFiles[id])
		s.mu.Lock()
		s.active[id] = r
		started := map[string]bool{}
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
			r.toWrite++
			if stream == "out" && (r.TTY || isTerminal(p.pipe)) {
				// The descriptor itself tells, should the metadata be lost.
				r.TTY, r.master = true, p.pipe
			}
			s.startPump(r, stream, p.pipe, p.sock)
			started[stream] = true
		}
		// A stream that ended before the kill leaves its record and spool.
		for i, stream := range streamNames {
			if !started[stream] {
				if r.recs[i] != nil {
					r.recs[i].close()
				}
				removeRecords(s.recordBase(id, stream))
				r.spools[i].close()
			}
		}
		streamsLeft := r.left // the pumps change it once the lock is released
		if r.left == 0 {
			delete(s.active, id)
			s.done[id] = time.Now()
			close(r.finished)
			close(r.written)
			s.closeLog(r)
		}
		s.mu.Unlock()
		s.log.Info("resumed relaying a container's output", "container", id, "streams", streamsLeft)
	}
}

func (s *Server) metaFile(id string) string { return filepath.Join(s.opts.StateDir, id+".json") }

func (s *Server) recordBase(id, stream string) string {
	return filepath.Join(s.opts.StateDir, id+"."+stream+".rec")
}

func (s *Server) spoolBase(id, stream string) string {
	return filepath.Join(s.opts.StateDir, id+"."+stream+".spool")
}

// restoreLog takes back a container's CRI log file after a relay restart:
// the stored descriptor (the very file the records speak of, even if the
// kubelet renamed it meanwhile) or else the file at the log path, and
// finishes the write a kill interrupted.
func (s *Server) restoreLog(r *relay, f *os.File) {
	if r.LogPath == "" {
		if f != nil {
			f.Close()
			s.forget(logFDName(r.id))
		}
		return
	}
	lf := &logFile{path: r.LogPath, uid: r.UID, gid: r.GID}
	if f != nil {
		// Adopt made it non-blocking, which a regular file ignores.
		if err := lf.use(f); err != nil {
			f.Close()
		}
	}
	if lf.f == nil {
		s.openLog(r, lf)
	}
	var recs []*record
	for i, stream := range streamNames {
		rc, rec, err := openRecorder(s.recordBase(r.id, stream))
		if err != nil {
			s.log.Error("cannot keep the container's log records; a relay restart may cut a line", "container", r.id, "err", err)
			continue
		}
		r.recs[i] = rc
		var gen uint64
		var consumed int64
		if rec != nil {
			recs = append(recs, rec)
			gen, consumed = rec.gen, rec.consumed
		}
		sp, err := openSpool(s.spoolBase(r.id, stream), gen, consumed)
		if err != nil {
			s.log.Error("cannot open the stream's log spool; a relay restart may lose a chunk", "container", r.id, "err", err)
			continue
		}
		r.spools[i] = sp
	}
	if err := lf.repair(recs); err != nil {
		s.log.Error("cannot finish the log write a relay restart interrupted", "container", r.id, "err", err)
	}
	r.lf = lf
}

// newLog opens a newly registered container's log file and fresh records.
func (s *Server) newLog(r *relay) {
	if r.LogPath == "" {
		return
	}
	lf := &logFile{path: r.LogPath, uid: r.UID, gid: r.GID}
	s.openLog(r, lf)
	for i, stream := range streamNames {
		removeRecords(s.recordBase(r.id, stream))
		rc, _, err := openRecorder(s.recordBase(r.id, stream))
		if err != nil {
			s.log.Error("cannot keep the container's log records; a relay restart may cut a line", "container", r.id, "err", err)
			continue
		}
		r.recs[i] = rc
		if err := os.Remove(spoolPath(s.spoolBase(r.id, stream), 0)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("stale log spool", "container", r.id, "err", err)
		}
		sp, err := openSpool(s.spoolBase(r.id, stream), 0, 0)
		if err != nil {
			s.log.Error("cannot open the stream's log spool; a relay restart may lose a chunk", "container", r.id, "err", err)
			continue
		}
		r.spools[i] = sp
	}
	r.lf = lf
}

// openLog opens the file at the container's log path for lf and parks it in
// the fd store; a failure is logged, and the output then reaches only
// journald.
func (s *Server) openLog(r *relay, lf *logFile) {
	f, err := openLogFile(r.LogPath, r.UID, r.GID)
	if err == nil {
		err = lf.use(f)
	}
	if err != nil {
		s.log.Error("cannot open the container's log file; its output reaches only journald", "container", r.id, "path", r.LogPath, "err", err)
		return
	}
	s.storeLog(r.id, f)
}

// storeLog parks the log file in the fd store under the container's name,
// replacing the one stored before.
func (s *Server) storeLog(id string, f *os.File) {
	if s.opts.Store == nil {
		return
	}
	s.forget(logFDName(id))
	if err := s.opts.Store.Store(logFDName(id), f); err != nil {
		s.log.Warn("cannot park the container's log file in the fd store", "container", id, "err", err)
	}
}

// closeLog closes a finished container's log file; s.mu is held.
func (s *Server) closeLog(r *relay) {
	if r.lf == nil {
		return
	}
	r.lf.mu.Lock()
	if r.lf.f != nil {
		r.lf.f.Close()
		r.lf.f = nil
	}
	r.lf.mu.Unlock()
	s.forget(logFDName(r.id))
}

// reopen answers REOPEN: the kubelet renamed the log file (rotation) and
// wants new lines in a new file at the log path; it returns once the
// switch is done, so no line written after it reaches the renamed file.
func (s *Server) reopen(id string) string {
	s.mu.Lock()
	r, ok := s.active[id]
	s.mu.Unlock()
	if !ok || r.lf == nil {
		return replyUnknown
	}
	f, err := openLogFile(r.LogPath, r.UID, r.GID)
	if err != nil {
		return "ERR " + err.Error()
	}
	r.lf.mu.Lock()
	err = r.lf.use(f)
	r.lf.mu.Unlock()
	if err != nil {
		f.Close()
		return "ERR " + err.Error()
	}
	s.storeLog(id, f)
	return replyOK
}

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
// received descriptors: out pipe, out stream, err pipe, err stream; for a
// tty container (m.TTY) the terminal's master and the out stream.
func (s *Server) register(id string, m meta, fds []int) error {
	if !ValidID(id) {
		closeAll(fds)
		return fmt.Errorf("bad container id %q", id)
	}
	want := 4
	if m.TTY {
		want = 2
	}
	if len(fds) != want {
		closeAll(fds)
		return fmt.Errorf("want %d descriptors, got %d", want, len(fds))
	}
	for _, d := range []string{m.TapDir, m.CgroupDir, m.LogPath} {
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
	files := make([]*os.File, len(fds))
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
	n := len(files) / 2
	r := &relay{id: id, meta: m, left: n, toWrite: n, finished: make(chan struct{}), written: make(chan struct{})}
	s.newLog(r)
	s.active[id] = r
	s.startPump(r, "out", files[0], files[1])
	if m.TTY {
		r.master = files[0]
		// A terminal has one output: no stderr records or spool.
		if r.recs[1] != nil {
			r.recs[1].close()
			r.recs[1] = nil
		}
		removeRecords(s.recordBase(id, "err"))
		r.spools[1].close()
		r.spools[1] = nil
		return nil
	}
	s.startPump(r, "err", files[2], files[3])
	return nil
}

// isTerminal reports whether f is a terminal (a tty container's master).
func isTerminal(f *os.File) bool {
	return console.Control(f, func(fd int) error {
		_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		return err
	}) == nil
}

// terminal answers TERMINAL: a tty container's master for an attach
// session, nil when the relay holds none.
func (s *Server) terminal(id string) *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.active[id]
	if !ok || r.master == nil || r.hungUp.Load() {
		return nil
	}
	return r.master
}

// hangup answers HANGUP: the relay closes a tty container's terminal for
// good and drops it from the fd store. The pump sees the close and ends
// the stream; the container's process sees the hangup once the attach
// sessions' copies are closed too.
func (s *Server) hangup(id string) string {
	s.mu.Lock()
	r, ok := s.active[id]
	if !ok || r.master == nil || r.hungUp.Swap(true) {
		s.mu.Unlock()
		return replyUnknown
	}
	s.mu.Unlock()
	s.forget(fdName(id, "out", "p"))
	r.master.Close()
	return replyOK
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
	i, cs := 0, logs.Stdout
	if stream == "err" {
		i, cs = 1, logs.Stderr
	}
	var cri *criStream
	if r.lf != nil {
		cri = &criStream{stream: cs, lf: r.lf, rec: r.recs[i], sp: r.spools[i]}
	}
	var j *journalSink
	if !r.NoJournal {
		a := &anchor{pid: r.PID, cgroupDir: r.CgroupDir, waiter: &r.waiter}
		if a.pid == 0 {
			a.refresh()
		}
		j = newJournalSink(sock, a)
	}
	// Only the pump's goroutine reads and writes failing.
	failing := false
	onWriteErr := func(err error) {
		if err == nil {
			if failing {
				failing = false
				s.stats.failing.Add(-1)
				s.log.Info("container log file writable again", "container", r.id, "stream", stream)
			}
			return
		}
		s.stats.writeFailed(err)
		if !failing {
			failing = true
			s.stats.failing.Add(1)
			s.log.Error("cannot write the container's CRI log file; its lines are lost for kubectl logs until it is writable again (journald still gets them)", "container", r.id, "stream", stream, "path", r.LogPath, "err", err)
		}
	}
	go func() {
		err := pump(pipe, r.TTY && stream == "out", cri, j, t, onWriteErr)
		if r.hungUp.Load() {
			err = nil // the read the close ended
		}
		if failing {
			s.stats.failing.Add(-1)
		}
		s.mu.Lock()
		if r.toWrite--; r.toWrite == 0 {
			close(r.written)
		}
		s.mu.Unlock()
		if t != nil {
			t.Close()
		}
		if j != nil {
			if !j.close(5 * time.Second) {
				s.log.Warn("journald did not take the container's last output in time", "container", r.id, "stream", stream)
			} else if j.err != nil {
				s.log.Warn("journald stream failed; later output reached only the CRI log file", "container", r.id, "stream", stream, "err", j.err)
			}
			if n := j.dropped.Load(); n > 0 {
				s.log.Warn("journald could not keep up: output bytes left out of the journal (the CRI log file has them)", "container", r.id, "stream", stream, "bytes", n)
			}
		}
		pipe.Close()
		sock.Close()
		s.forget(fdName(r.id, stream, "p"))
		s.forget(fdName(r.id, stream, "s"))
		if err != nil {
			s.log.Warn("container output stream ended with an error", "container", r.id, "stream", stream, "err", err)
		}
		if r.recs[i] != nil {
			r.recs[i].close()
		}
		removeRecords(s.recordBase(r.id, stream))
		r.spools[i].close()
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
	s.closeLog(r)
	_ = os.Remove(s.metaFile(r.id))
	close(r.finished)
	for id, t := range s.done {
		if now.Sub(t) > s.opts.DoneTTL {
			delete(s.done, id)
		}
	}
}

// wait answers WAIT and FLUSH: done, unknown, or timeout. waiter, when
// set, is the unit's ExecStopPost helper, which the last output is sent to
// journald as.
func (s *Server) wait(ctx context.Context, id string, d time.Duration, waiter int32, flush bool) string {
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
		end := r.finished
		if flush {
			// podunit only needs the CRI file complete.
			end = r.written
		}
		select {
		case <-end:
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
	msg, fds, err := console.RecvFDs(c, 8)
	if err != nil {
		return
	}
	var peer int32
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				peer = cred.Pid
			}
		})
	}
	reply, f := s.dispatch(ctx, msg, fds, peer)
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if f != nil {
		_ = console.Send(c, reply, f)
		return
	}
	_, _ = c.Write([]byte(reply))
}

// dispatch answers one request; f, when not nil, goes with the reply.
func (s *Server) dispatch(ctx context.Context, msg []byte, fds []int, peer int32) (reply string, f *os.File) {
	w := strings.Fields(string(msg))
	if len(w) == 0 || w[0] != "TERMINAL" && w[0] != "HANGUP" {
		return s.dispatchLog(ctx, msg, fds, peer), nil
	}
	closeAll(fds)
	if len(w) != 2 || !ValidID(w[1]) {
		return "ERR bad " + w[0], nil
	}
	if w[0] == "HANGUP" {
		return s.hangup(w[1]), nil
	}
	if m := s.terminal(w[1]); m != nil {
		return replyOK, m
	}
	return replyUnknown, nil
}

func (s *Server) dispatchLog(ctx context.Context, msg []byte, fds []int, peer int32) string {
	line, rest, _ := bytes.Cut(msg, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) == 0 {
		closeAll(fds)
		return "ERR empty request"
	}
	switch {
	case (f[0] == "REGISTER" || f[0] == "REGISTER-TTY") && len(f) == 2:
		m, err := parseRegister(string(rest))
		if err != nil {
			closeAll(fds)
			return "ERR " + err.Error()
		}
		m.PID = peer
		m.TTY = f[0] == "REGISTER-TTY"
		if err := s.register(f[1], m, fds); err != nil {
			return "ERR " + err.Error()
		}
		return replyOK
	case (f[0] == "WAIT" || f[0] == "FLUSH") && len(f) == 3:
		closeAll(fds)
		ms, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || ms < 0 || ms > 10*60*1000 || !ValidID(f[1]) {
			return "ERR bad " + f[0]
		}
		if f[0] == "FLUSH" {
			// podunit, not a process of the unit: not one to send as.
			peer = 0
		}
		return s.wait(ctx, f[1], time.Duration(ms)*time.Millisecond, peer, f[0] == "FLUSH")
	case f[0] == "REOPEN" && len(f) == 2:
		closeAll(fds)
		if !ValidID(f[1]) {
			return "ERR bad REOPEN"
		}
		return s.reopen(f[1])
	case f[0] == "PING" && len(f) == 1:
		closeAll(fds)
		return replyOK
	case f[0] == "STATS" && len(f) == 1:
		closeAll(fds)
		return fmt.Sprintf("%s failing=%d nospace=%d other=%d", replyOK,
			s.stats.failing.Load(), s.stats.noSpace.Load(), s.stats.other.Load())
	}
	closeAll(fds)
	return "ERR unknown request " + strconv.Quote(f[0])
}

// parseRegister reads REGISTER's lines after the first: tap dir, cgroup
// dir, and from wrappers that know of CRI log files the log path and
// "<uid> <gid> <journal 1|0>".
func parseRegister(rest string) (meta, error) {
	m := meta{UID: -1, GID: -1}
	lines := strings.Split(rest, "\n")
	get := func(i int) string {
		if i < len(lines) {
			return lines[i]
		}
		return ""
	}
	m.TapDir, m.CgroupDir, m.LogPath = get(0), get(1), get(2)
	if opts := get(3); opts != "" {
		var journal int
		if _, err := fmt.Sscanf(opts, "%d %d %d", &m.UID, &m.GID, &journal); err != nil {
			return m, fmt.Errorf("bad log options %q: %w", opts, err)
		}
		m.NoJournal = journal == 0
	}
	return m, nil
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
