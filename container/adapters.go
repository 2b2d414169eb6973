package container

import (
	"context"
	"fmt"
	"strings"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/stats/cristats"
	"github.com/podunit/podunit/streaming"
	"github.com/podunit/podunit/systemd"
)

// The manager seen by the stats collector, the event translator and the
// streaming server. Each answers from the in-memory records: no D-Bus call
// per container.

// StatsContainers lists every container for the stats collector.
func (m *Manager) StatsContainers(ctx context.Context) ([]cristats.Container, error) {
	var out []cristats.Container
	for _, c := range m.all() {
		c.mu.Lock()
		r := c.rec
		if r == nil {
			c.mu.Unlock()
			continue
		}
		sc := cristats.Container{
			ID: r.ID, PodID: r.PodID, Metadata: r.Metadata, Image: r.ImageName,
			Labels: r.Config.GetLabels(), Annotations: r.Config.GetAnnotations(), StartedAt: r.StartedAt,
		}
		if r.State == StateRunning {
			sc.CgroupPath = systemd.UnitCgroupPath(r.Slice, r.Unit)
		}
		c.mu.Unlock()
		out = append(out, sc)
	}
	return out, nil
}

// ContainerOfUnit maps a container unit name to its container.
func (m *Manager) ContainerOfUnit(unit string) (events.Ref, bool) {
	if !strings.HasPrefix(unit, UnitPrefix) || !strings.HasSuffix(unit, ".service") {
		return events.Ref{}, false
	}
	id := strings.TrimSuffix(strings.TrimPrefix(unit, UnitPrefix), ".service")
	m.mu.RLock()
	c, ok := m.ctrs[id]
	m.mu.RUnlock()
	if !ok {
		return events.Ref{}, false
	}
	return events.Ref{ID: id, PodID: c.podID}, true
}

// Running lists the containers whose records say running.
func (m *Manager) Running(ctx context.Context) ([]events.Ref, error) {
	var out []events.Ref
	for _, c := range m.all() {
		c.mu.Lock()
		if c.rec != nil && c.rec.State == StateRunning {
			out = append(out, events.Ref{ID: c.rec.ID, PodID: c.podID})
		}
		c.mu.Unlock()
	}
	return out, nil
}

// UnitStopped resolves a container whose unit stopped. The manager
// publishes STOPPED itself on the running → exited transition (which
// CRI calls can make too), so it never asks the translator to: first is
// always false.
func (m *Manager) UnitStopped(ctx context.Context, id string, st systemd.UnitState) (bool, error) {
	// The ID comes from a unit's name, not a request: no prefix matching,
	// a stray unit must not stand for another container.
	m.mu.RLock()
	c, ok := m.ctrs[id]
	m.mu.RUnlock()
	if !ok {
		return false, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec == nil || c.rec.State != StateRunning {
		return false, nil
	}
	m.refreshLocked(ctx, c, st.ActiveState)
	return false, nil
}

// StreamTarget describes a container for exec and attach.
func (m *Manager) StreamTarget(ctx context.Context, id string) (streaming.Target, error) {
	// Attach polls this for the container's exit: no D-Bus call while the
	// init provably runs.
	c, err := m.lockCurrent(ctx, id, m.refreshStatusLocked)
	if err != nil {
		return streaming.Target{}, err
	}
	defer c.mu.Unlock()
	r := c.rec
	t := streaming.Target{
		ID:        r.ID,
		Running:   r.State == StateRunning,
		Stdin:     r.Config.GetStdin(),
		StdinOnce: r.Config.GetStdinOnce(),
		// The relay holds a tty container's terminal (docs/streaming.md).
		TTY: r.Config.GetTty(),
		// For the session process, which watches the container itself.
		InitPID: c.init.pid, InitStart: c.init.start, ExitFile: m.exitFile(r.ID),
	}
	if t.TTY {
		t.TapDir = m.runDir(r.ID)
	} else if t.Stdin {
		t.StdinPath = m.stdinFIFO(r.ID)
		// The unit's relay offers the output taps next to the FIFO.
		t.TapDir = m.runDir(r.ID)
	}
	return t, nil
}

// all snapshots the container set.
func (m *Manager) all() []*ctr {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*ctr, 0, len(m.ctrs))
	for _, c := range m.ctrs {
		out = append(out, c)
	}
	return out
}
