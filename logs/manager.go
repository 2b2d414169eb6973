package logs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/statefile"
)

// Options configure a Manager.
type Options struct {
	// StateDir is podunit's state directory; the Manager keeps one small
	// file per container in StateDir/logs.
	StateDir string
	// JournalctlPath and JournalctlArgs configure the default Journalctl
	// source (see Journalctl).
	JournalctlPath string
	JournalctlArgs []string
	// Source replaces the journalctl source (tests).
	Source Source
	Logger *slog.Logger
	// CommitInterval is how often, while lines flow, a container's file is
	// fsynced and its position recorded; 1s by default. It only bounds how
	// much is read again from the journal after a crash (correctness does
	// not depend on it) against the cost of three fsyncs per busy container
	// per commit. Lines reach the file (and `kubectl logs -f`) as soon as
	// they are read, whatever this is.
	CommitInterval time.Duration
}

// Manager writes every registered container's CRI log file from the
// journal, through one follower for all containers.
type Manager struct {
	opts     Options
	src      Source
	log      *slog.Logger
	stateDir string

	reqs chan func()
	// abandoned makes the loop stop like a killed podunit: no commit
	// (tests of crash recovery)
	abandoned bool
	started   chan struct{}
	stop      chan struct{}
	done      chan struct{}

	// owned by the loop goroutine
	writers map[string]*writer
	cursor  string   // the last entry the follower delivered, or where it started
	pos     Position // parsed cursor
	waiters []*flushWaiter
}

type flushWaiter struct {
	id     string
	target Position
	reply  chan error
}

// New checks the options and prepares the state directory. Nothing is
// followed before Start.
func New(opts Options) (*Manager, error) {
	if opts.StateDir == "" {
		return nil, fmt.Errorf("logs: state directory not set: %w", errdefs.ErrInvalid)
	}
	if opts.CommitInterval <= 0 {
		opts.CommitInterval = time.Second
	}
	m := &Manager{
		opts:     opts,
		src:      opts.Source,
		log:      opts.Logger,
		stateDir: filepath.Join(opts.StateDir, "logs"),
		reqs:     make(chan func()),
		started:  make(chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		writers:  map[string]*writer{},
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.src == nil {
		m.src = &Journalctl{Path: opts.JournalctlPath, Args: opts.JournalctlArgs}
	}
	if err := os.MkdirAll(m.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("logs state directory: %w", err)
	}
	return m, nil
}

// Start resumes every container registered before a restart, from the
// position its state records, and begins following the journal. ctx bounds
// the start only; Close ends the follower.
func (m *Manager) Start(ctx context.Context) error {
	select {
	case <-m.started:
		return fmt.Errorf("log manager already started: %w", errdefs.ErrPrecondition)
	default:
	}
	states, err := loadStates(m.stateDir)
	if err != nil {
		return err
	}
	start, startPos := "", Position{}
	for i, st := range states {
		w := m.newWriter(st)
		if err := w.open(); err != nil {
			w.fail(err)
		}
		m.writers[st.ContainerID] = w
		if i == 0 || startPos.After(st.Pos) {
			start, startPos = st.Cursor, st.Pos
		}
	}
	if len(states) == 0 {
		// nothing to catch up with: follow from now on
		if start, err = m.src.Tail(ctx); err == nil {
			startPos, err = ParseCursor(start)
		}
		if err != nil {
			return fmt.Errorf("journal position: %w", err)
		}
	}
	m.cursor, m.pos = start, startPos
	m.log.Info("following the journal for container logs", "containers", len(states), "cursor", start)
	close(m.started)
	go m.run()
	return nil
}

func (m *Manager) newWriter(st fileState) *writer {
	return &writer{
		st:        st,
		cursor:    st.Cursor,
		pos:       st.Pos,
		statePath: filepath.Join(m.stateDir, st.ContainerID+".json"),
		log:       m.log.With("container", st.ContainerID),
		persisted: time.Now(),
	}
}

// batch is what the reader goroutine hands the loop; gen tells batches of a
// replaced follower apart.
type batch struct {
	gen     int
	entries []Entry
	err     error
}

func (m *Manager) run() {
	defer close(m.done)
	batches := make(chan batch, 4)
	var stream EntryStream
	gen := 0
	follow := func() {
		gen++
		s, err := m.src.Follow(context.Background(), m.cursor)
		if err != nil {
			go func(g int) {
				select {
				case batches <- batch{gen: g, err: err}:
				case <-m.done:
				}
			}(gen)
			return
		}
		stream = s
		go func(g int) {
			for {
				es, err := s.Next()
				select {
				case batches <- batch{gen: g, entries: es, err: err}:
				case <-m.done:
					return
				}
				if err != nil {
					return
				}
			}
		}(gen)
	}
	follow()
	commitTimer := time.NewTimer(time.Hour)
	commitTimer.Stop()
	commitArmed := false
	var restart <-chan time.Time
	backoff := 100 * time.Millisecond
	for {
		select {
		case b := <-batches:
			if b.gen != gen {
				continue
			}
			if len(b.entries) > 0 {
				backoff = 100 * time.Millisecond
				m.dispatch(b.entries)
				if len(m.waiters) > 0 {
					m.serveWaiters()
				}
				if !commitArmed {
					commitTimer.Reset(m.opts.CommitInterval)
					commitArmed = true
				}
			}
			if b.err != nil {
				m.log.Warn("journal follower stopped; restarting", "error", b.err, "in", backoff)
				if stream != nil {
					stream.Close()
					stream = nil
				}
				gen++
				restart = time.After(backoff)
				backoff = min(backoff*2, 10*time.Second)
			}
		case <-restart:
			restart = nil
			follow()
		case <-commitTimer.C:
			commitArmed = false
			m.commitAll()
		case f := <-m.reqs:
			f()
		case <-m.stop:
			if stream != nil {
				stream.Close()
			}
			if m.abandoned {
				for _, w := range m.writers {
					w.close()
				}
				return
			}
			m.commitAll()
			for _, w := range m.writers {
				w.close()
			}
			for _, fw := range m.waiters {
				fw.reply <- fmt.Errorf("container %s: log manager closed: %w", fw.id, errdefs.ErrUnavailable)
			}
			m.waiters = nil
			return
		}
	}
}

func (m *Manager) dispatch(entries []Entry) {
	var last *writer
	touched := map[*writer]struct{}{}
	for i := range entries {
		e := &entries[i]
		w := last
		if w == nil || w.id() != e.ContainerID {
			w = m.writers[e.ContainerID]
		}
		if w != nil {
			w.add(e)
			if w != last {
				touched[w] = struct{}{}
				last = w
			}
		}
		if e.Pos.After(m.pos) {
			m.cursor, m.pos = e.Cursor, e.Pos
		}
	}
	// lines reach the file (and `kubectl logs -f`) now; durability follows
	// at the next commit
	for w := range touched {
		w.writeOut()
	}
}

func (m *Manager) commitAll() {
	now := time.Now()
	for _, w := range m.writers {
		var err error
		if w.dirty {
			err = w.commit()
		} else {
			err = w.advance(m.cursor, m.pos, now)
		}
		if err != nil {
			m.log.Error("commit container log", "container", w.id(), "error", err)
		}
	}
}

// serveWaiters answers the Flush calls whose container has reached its
// target, after making its lines durable.
func (m *Manager) serveWaiters() {
	kept := m.waiters[:0]
	for _, fw := range m.waiters {
		w := m.writers[fw.id]
		switch {
		case w == nil:
			fw.reply <- fmt.Errorf("container %s: %w", fw.id, errdefs.ErrNotFound)
		case !fw.target.After(w.pos):
			fw.reply <- w.commit()
		default:
			kept = append(kept, fw)
		}
	}
	m.waiters = kept
}

// call runs f on the loop goroutine.
func (m *Manager) call(f func() error) error {
	select {
	case <-m.started:
	default:
		return fmt.Errorf("log manager not started: %w", errdefs.ErrPrecondition)
	}
	errc := make(chan error, 1)
	select {
	case m.reqs <- func() { errc <- f() }:
		return <-errc
	case <-m.done:
		return fmt.Errorf("log manager stopped: %w", errdefs.ErrUnavailable)
	}
}

// Register starts writing containerID's output to logPath (absolute). It
// must be called before the container's unit starts: output that reaches
// the journal earlier may be missed. A new file is owned by uid:gid; a
// negative id is taken from the nearest existing directory above logPath
// (the pod's log directory). Registering a known container again changes
// nothing.
func (m *Manager) Register(containerID, logPath string, uid, gid int) error {
	if containerID == "" || !filepath.IsAbs(logPath) || filepath.Base(containerID) != containerID {
		return fmt.Errorf("register log of container %q at %q: %w", containerID, logPath, errdefs.ErrInvalid)
	}
	if uid < 0 || gid < 0 {
		duid, dgid, err := ownerAbove(logPath)
		if err != nil {
			return err
		}
		if uid < 0 {
			uid = duid
		}
		if gid < 0 {
			gid = dgid
		}
	}
	return m.call(func() error {
		if w := m.writers[containerID]; w != nil {
			if w.st.LogPath != logPath {
				return fmt.Errorf("container %s already logs to %s: %w", containerID, w.st.LogPath, errdefs.ErrExists)
			}
			return nil
		}
		w := m.newWriter(fileState{ContainerID: containerID, LogPath: logPath, UID: uid, GID: gid, Cursor: m.cursor, Pos: m.pos})
		if err := w.create(); err != nil {
			w.close()
			_ = statefile.Remove(w.statePath)
			return fmt.Errorf("container %s: %w", containerID, err)
		}
		m.writers[containerID] = w
		return nil
	})
}

func ownerAbove(path string) (int, int, error) {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		var st syscall.Stat_t
		err := syscall.Stat(dir, &st)
		if err == nil {
			return int(st.Uid), int(st.Gid), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == "/" {
			return 0, 0, fmt.Errorf("log directory %s: %w", dir, err)
		}
	}
}

// Unregister stops writing containerID's log (the container was removed).
// The log file stays for the kubelet to delete; the journal keeps its
// entries under its own retention.
func (m *Manager) Unregister(containerID string) error {
	return m.call(func() error {
		w := m.writers[containerID]
		if w == nil {
			return nil
		}
		if w.dirty && w.broken == nil {
			w.writeOut()
			if w.f != nil {
				_ = w.f.Sync()
			}
		}
		w.close()
		delete(m.writers, containerID)
		m.serveWaiters()
		return statefile.Remove(w.statePath)
	})
}

// Reopen makes containerID's next lines go to a new file at its log path,
// after the kubelet renamed the current one. Lines handled so far stay in
// the renamed file.
func (m *Manager) Reopen(containerID string) error {
	return m.call(func() error {
		w := m.writers[containerID]
		if w == nil {
			return fmt.Errorf("container %s has no log: %w", containerID, errdefs.ErrNotFound)
		}
		if err := w.reopen(); err != nil {
			return fmt.Errorf("reopen log of container %s: %w", containerID, err)
		}
		return nil
	})
}

// flushSettle is the pause between two looks at the journal in Flush.
const flushSettle = 40 * time.Millisecond

// Flush waits until the file holds, durably, every line the journal has
// for containerID at the time of the call (journald is asked to process
// its queued stream data first). Call it after the container exited and
// before reporting it EXITED, so `kubectl logs` of a finished container is
// complete.
func (m *Manager) Flush(ctx context.Context, containerID string) error {
	// journald 252's sync does not wait for data still queued in stream
	// sockets, so a container that just exited may have lines journald has
	// not read yet: ask until two answers in a row agree (bounded).
	var (
		last     Entry
		ok       bool
		prev     Position
		prevOK   bool
		attempts = 8
	)
	for i := 0; i < attempts; i++ {
		if err := m.src.Sync(ctx); err != nil {
			// no local journald to ask (a journal read from a directory):
			// what it has stored is still a complete answer
			m.log.Debug("journal sync before flush", "container", containerID, "error", err)
		}
		var err error
		last, ok, err = m.src.Last(ctx, containerID)
		if err != nil {
			return fmt.Errorf("flush log of container %s: %w", containerID, err)
		}
		if i > 0 && ok == prevOK && (!ok || last.Pos == prev) {
			break
		}
		prev, prevOK = last.Pos, ok
		if i < attempts-1 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("flush log of container %s: %w: %w", containerID, errdefs.ErrDeadline, ctx.Err())
			case <-time.After(flushSettle):
			}
		}
	}
	fw := &flushWaiter{id: containerID, target: last.Pos, reply: make(chan error, 1)}
	if !ok {
		fw.target = Position{}
	}
	if err := m.call(func() error {
		m.waiters = append(m.waiters, fw)
		m.serveWaiters()
		return nil
	}); err != nil {
		return err
	}
	select {
	case err := <-fw.reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("flush log of container %s: %w: %w", containerID, errdefs.ErrDeadline, ctx.Err())
	}
}

// Containers lists the registered containers, e.g. for recovery to
// unregister those that no longer exist.
func (m *Manager) Containers() []string {
	var ids []string
	_ = m.call(func() error {
		for id := range m.writers {
			ids = append(ids, id)
		}
		return nil
	})
	sort.Strings(ids)
	return ids
}

// Close stops following, commits what was written and closes the files.
func (m *Manager) Close() error {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	select {
	case <-m.started:
		<-m.done
	default:
	}
	return nil
}
