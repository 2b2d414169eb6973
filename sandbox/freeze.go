package sandbox

import (
	"context"
	"fmt"

	"github.com/podunit/podunit/errdefs"
)

// Freeze freezes every process of a ready pod through systemd's freezer
// on the pod's slice (FreezeUnit): its containers, their stdio wrappers
// and the pod's init stop at once, so what is read of them next is one
// moment of the pod (CheckpointPod, docs/checkpoint.md). The slice must
// hold this pod alone: a cgroup_parent slice shared with another pod
// would freeze that pod too. The caller must Thaw, also when it fails
// after Freeze succeeded.
func (m *Manager) Freeze(ctx context.Context, id string) error {
	e := m.lookup(id)
	if e == nil {
		return fmt.Errorf("pod sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	defer e.release()
	sb := e.sb
	if sb.State != StateReady {
		return fmt.Errorf("freeze pod %s: pod is not ready: %w", id, errdefs.ErrPrecondition)
	}
	if !sb.OwnSlice {
		for _, o := range m.List(ctx) {
			if o.ID != id && o.Slice == sb.Slice {
				return fmt.Errorf("freeze pod %s: its slice %s also holds pod %s: %w", id, sb.Slice, o.ID, errdefs.ErrPrecondition)
			}
		}
	}
	if err := m.opts.Systemd.FreezeUnit(ctx, sb.Slice); err != nil {
		return fmt.Errorf("freeze pod %s (slice %s): %w", id, sb.Slice, err)
	}
	m.log.Info("pod frozen", "pod", id, "slice", sb.Slice)
	return nil
}

// Thaw undoes Freeze; thawing a pod that is not frozen, or is gone, is
// fine.
func (m *Manager) Thaw(ctx context.Context, id string) error {
	e := m.lookup(id)
	if e == nil {
		return nil
	}
	defer e.release()
	if err := m.opts.Systemd.ThawUnit(ctx, e.sb.Slice); err != nil {
		return fmt.Errorf("thaw pod %s (slice %s): %w", id, e.sb.Slice, err)
	}
	m.log.Info("pod thawed", "pod", id, "slice", e.sb.Slice)
	return nil
}
