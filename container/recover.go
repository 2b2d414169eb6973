package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/statefile"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitprops"
)

// Recover rebuilds the manager from the state directory and systemd after
// podunit (re)starts. Running containers are left alone; containers whose
// unit ended while podunit was down get their recorded exit. Leftovers of a
// create that crashed half way (a directory without a record) are removed,
// and so are container units no record owns.
func (m *Manager) Recover(ctx context.Context) error {
	entries, err := os.ReadDir(m.opts.StateDir)
	if err != nil {
		return fmt.Errorf("recover containers: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		if strings.HasPrefix(id, ".") {
			continue // the trash (removed containers: reaper.go)
		}
		var r record
		err := statefile.Read(m.stateFile(id), &r)
		if errors.Is(err, errdefs.ErrNotFound) {
			errs = append(errs, m.removeOrphan(ctx, id))
			continue
		}
		if err != nil || r.ID != id {
			m.opts.Logger.Error("unreadable container record, leaving it for inspection", "container", id, "err", err)
			continue
		}
		c := &ctr{podID: r.PodID, handler: r.Handler, rec: &r}
		m.mu.Lock()
		m.ctrs[id] = c
		m.names[nameKey(r.PodID, r.Metadata)] = id
		m.mu.Unlock()
	}
	// Resolve containers that exited while we were away. Their logs are
	// not flushed here: the unit's ExecStopPost helper already waited for
	// the relay to write them, and recovery must not wait per container.
	_ = m.snapshot(context.WithValue(ctx, noLogFlush{}, true))
	errs = append(errs, m.reapplyStartLimits(ctx))

	units, err := m.sd.ListUnits(ctx, UnitPrefix+"*.service")
	if err != nil {
		errs = append(errs, fmt.Errorf("recover containers: list units: %w", err))
	}
	for _, u := range units {
		m.mu.RLock()
		_, known := m.ctrs[idOfUnit(u.Name)]
		m.mu.RUnlock()
		if !known {
			m.opts.Logger.Warn("stopping container unit without a record", "unit", u.Name)
			if err := m.sd.StopUnit(ctx, u.Name); err != nil {
				errs = append(errs, err)
			}
			_ = m.sd.ResetFailedUnit(ctx, u.Name)
			// Its ExecStopPost just wrote an exit record nobody will read.
			id := idOfUnit(u.Name)
			if !strings.ContainsAny(id, "/.") && id != "" {
				_ = os.RemoveAll(m.stateDir(id))
				_ = m.removeRunDir(id)
			}
		}
	}
	return errors.Join(errs...)
}

// reapplyStartLimits sets again the limits Start sets only after the start
// job (unitprops.SplitStartLimits) where a running container's unit lacks
// them: podunit killed between the job and that call leaves a container
// running unlimited otherwise. Units that have them are only read.
func (m *Manager) reapplyStartLimits(ctx context.Context) error {
	m.mu.RLock()
	cs := make([]*ctr, 0, len(m.ctrs))
	for _, c := range m.ctrs {
		cs = append(cs, c)
	}
	m.mu.RUnlock()
	var errs []error
	for _, c := range cs {
		c.mu.Lock()
		err := m.reapplyStartLimitsLocked(ctx, c)
		c.mu.Unlock()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (m *Manager) reapplyStartLimitsLocked(ctx context.Context, c *ctr) error {
	r := c.rec
	if r == nil || r.State != StateRunning {
		return nil
	}
	rt, err := m.runtime(r.Handler)
	if err != nil || !rt.OwnCgroup() {
		return nil
	}
	props, err := unitprops.Properties(m.service(r, rt), r.Resources, m.opts.Caps)
	if err != nil {
		return fmt.Errorf("recover container %s: %w", r.ID, err)
	}
	_, want := unitprops.SplitStartLimits(props)
	if len(want) == 0 {
		return nil
	}
	have, err := m.sd.UnitProperties(ctx, r.Unit, "Service")
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil // exited meanwhile: the next status call records it
	}
	if err != nil {
		return fmt.Errorf("recover container %s: limits: %w", r.ID, err)
	}
	var missing []systemd.Property
	for _, p := range want {
		if have[p.Name] != p.Value.Value() {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	m.opts.Logger.Warn("setting limits a start left unset (podunit stopped in between)", "container", r.ID, "unit", r.Unit)
	if err := m.applyStartLimits(ctx, r.Unit, missing); err != nil {
		return fmt.Errorf("recover container %s: %w", r.ID, err)
	}
	return nil
}

// noLogFlush in a context skips the log flush when a container is found
// exited (recovery).
type noLogFlush struct{}

func idOfUnit(unit string) string {
	id := unit[len(UnitPrefix):]
	return id[:len(id)-len(".service")]
}

// removeOrphan deletes what a crashed create may have left for id.
func (m *Manager) removeOrphan(ctx context.Context, id string) error {
	m.opts.Logger.Warn("removing leftovers of an unfinished container create", "container", id)
	_ = m.sd.StopUnit(ctx, unitName(id))
	for _, rt := range m.runtimes() {
		_ = rt.Delete(ctx, id)
	}
	if err := m.unbindRootfs(id); err != nil {
		return fmt.Errorf("orphan container %s: %w", id, err)
	}
	if err := m.imgs.UnmountRootfs(ctx, id); err != nil {
		return fmt.Errorf("orphan container %s: %w", id, err)
	}
	if err := m.imgs.DeleteRootfs(ctx, id); err != nil {
		return fmt.Errorf("orphan container %s: %w", id, err)
	}
	if err := m.imgs.DeleteImageVolumes(ctx, id); err != nil {
		return fmt.Errorf("orphan container %s: %w", id, err)
	}
	if err := m.removeRunDir(id); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(m.opts.StateDir, id))
}

// forPod runs fn on each of the pod's containers, a few at a time, so a
// pod with many containers stops in about the time of its slowest one.
func (m *Manager) forPod(ctx context.Context, podID string, fn func(context.Context, string) error) error {
	ids := m.PodContainers(podID)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 8)
	)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StopPodContainers stops every container of the pod at once (no grace:
// the kubelet has already stopped them gracefully one by one).
func (m *Manager) StopPodContainers(ctx context.Context, podID string) error {
	return m.forPod(ctx, podID, func(ctx context.Context, id string) error { return m.Stop(ctx, id, 0) })
}

// RemovePodContainers removes every container of the pod.
func (m *Manager) RemovePodContainers(ctx context.Context, podID string) error {
	return m.forPod(ctx, podID, m.Remove)
}

// Wait blocks until the container is no longer running or ctx ends.
func (m *Manager) Wait(ctx context.Context, id string) error {
	for {
		st, _, err := m.Status(ctx, id, false)
		if err != nil {
			return err
		}
		if st.GetState() != criState[StateRunning] {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for container %s: %w", id, errdefs.ErrDeadline)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
