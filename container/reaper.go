package container

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/statefile"
)

// Deferred removal (docs/containers.md "Deferred removal"). Remove takes
// a container down synchronously (unit, runtime state, cgroups, every
// mount) and commits the removal by moving its state directory into the
// trash, durably; deleting its files (the writable layer and image volumes
// in storage, the run directory, the trash entry) is left to one reaper
// goroutine, because each unlink costs about a millisecond on a disk and
// storage's DeleteContainer makes dozens. A trash entry is the record of
// work still to do: it goes last, and a Manager started over a trash entry
// finishes it.

// trashName is the hidden directory, inside StateDir and RunDir (so that a
// rename into it never crosses a filesystem), holding removed containers'
// directories until the reaper deletes them. Recover and the gc's Dirs
// collectors skip hidden entries.
const trashName = ".trash"

const (
	// defaultReapQueue bounds the reaper's queue; a removal that finds it
	// full deletes inline.
	defaultReapQueue = 256
	// reapTimeout bounds the deletion of one container's files.
	reapTimeout = 2 * time.Minute
)

func (m *Manager) stateTrash() string            { return filepath.Join(m.opts.StateDir, trashName) }
func (m *Manager) runTrash() string              { return filepath.Join(m.opts.RunDir, trashName) }
func (m *Manager) stateTrashOf(id string) string { return filepath.Join(m.stateTrash(), id) }
func (m *Manager) runTrashOf(id string) string   { return filepath.Join(m.runTrash(), id) }

// reaper is the queue of removed containers whose files are still to be
// deleted; pending counts what Drain waits for (queued or being deleted).
type reaper struct {
	queue   chan string
	mu      sync.Mutex
	pending int
	idle    []chan struct{}
}

func (r *reaper) add(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending += n
	if r.pending == 0 {
		for _, c := range r.idle {
			close(c)
		}
		r.idle = nil
	}
}

// startReaper makes the trash directories and starts the reaper, which
// first takes every entry a previous run left in the trash (podunit died
// before deleting them, or deleting failed), then the queue.
func (m *Manager) startReaper() error {
	for _, d := range []string{m.stateTrash(), m.runTrash()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("container manager: %w", err)
		}
	}
	n := m.opts.reapQueue
	if n <= 0 {
		n = defaultReapQueue
	}
	m.reap.queue = make(chan string, n)
	// Listed now, before any Remove can add to the trash: the reaper
	// then takes each entry once.
	left := trashEntries(m.stateTrash())
	for _, id := range trashEntries(m.runTrash()) {
		if !slices.Contains(left, id) {
			left = append(left, id) // its state entry went, the run dir did not
		}
	}
	m.reap.add(len(left))
	if len(left) > 0 {
		m.opts.Logger.Info("deleting the files of containers removed before the restart", "containers", len(left))
	}
	go m.reapLoop(left)
	return nil
}

func trashEntries(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var ids []string
	for _, e := range ents {
		if validID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

func (m *Manager) reapLoop(left []string) {
	for _, id := range left {
		m.reapLogged(id)
		m.reap.add(-1)
	}
	for id := range m.reap.queue {
		m.reapLogged(id)
		m.reap.add(-1)
	}
}

func (m *Manager) reapLogged(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
	defer cancel()
	if err := m.reapFiles(ctx, id); err != nil {
		m.opts.Logger.Warn("deleting a removed container's files failed; retried at the next start", "container", id, "err", err)
	}
}

// deferReap hands a removed container's files to the reaper; with its
// queue full, they are deleted now instead.
func (m *Manager) deferReap(ctx context.Context, id string) {
	m.reap.add(1)
	select {
	case m.reap.queue <- id:
		return
	default:
	}
	m.reap.add(-1)
	m.opts.Logger.Debug("removal queue full: deleting the container's files inline", "container", id)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reapTimeout)
	defer cancel()
	if err := m.reapFiles(ctx, id); err != nil {
		m.opts.Logger.Warn("deleting a removed container's files failed; retried at the next start", "container", id, "err", err)
	}
}

// reapFiles deletes what a removed container left: its storage (writable
// layer, image volumes), its run directory wherever it is, and last its
// trash entry, the mark that work remains. Everything tolerates "already
// gone": a retry after a crash, or the start-up gc, which also collects
// storage containers no record owns, may have deleted it first.
func (m *Manager) reapFiles(ctx context.Context, id string) error {
	var errs []error
	if err := m.imgs.DeleteRootfs(ctx, id); err != nil {
		errs = append(errs, fmt.Errorf("rootfs: %w", err))
	}
	if err := m.imgs.DeleteImageVolumes(ctx, id); err != nil {
		errs = append(errs, fmt.Errorf("image volumes: %w", err))
	}
	for _, d := range []string{m.runDir(id), m.runTrashOf(id)} {
		if err := removeRunDirAt(d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(m.stateTrashOf(id)); err != nil {
		return fmt.Errorf("trash entry: %w", err)
	}
	return nil
}

// trashState commits a removal: the container's state directory leaves
// the directory Recover loads containers from, in one atomic rename made
// durable before Remove returns. Its run directory follows into the run
// trash (a tmpfs, nothing to make durable: the reaper looks for it at
// both places).
func (m *Manager) trashState(id string) error {
	err := statefile.Move(m.stateDir(id), m.stateTrashOf(id))
	if errors.Is(err, errdefs.ErrNotFound) {
		err = nil // nothing on disk: nothing to load again
	}
	if err != nil {
		return err
	}
	if err := os.Rename(m.runDir(id), m.runTrashOf(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.opts.Logger.Debug("run directory left in place for the reaper", "container", id, "err", err)
	}
	return nil
}

// Drain waits until every removed container's files handed to the reaper
// so far, and those a previous run left in the trash, are deleted (or
// failed to be), or ctx ends. Tests that look for leftovers and a graceful
// shutdown call it.
func (m *Manager) Drain(ctx context.Context) error {
	m.reap.mu.Lock()
	if m.reap.pending == 0 {
		m.reap.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	m.reap.idle = append(m.reap.idle, c)
	m.reap.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("container removals still deleting files: %w: %w", errdefs.ErrDeadline, ctx.Err())
	}
}
