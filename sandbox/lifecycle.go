package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/mountns"
	"github.com/podunit/podunit/netns"
	"github.com/podunit/podunit/statefile"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var removeState = statefile.Remove

// lookup returns the live entry locked, or nil when the pod does not exist
// (or was removed while the caller waited for the lock).
func (m *Manager) lookup(id string) *entry {
	m.mu.Lock()
	e, ok := m.pods[id]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	e.mu.Lock()
	if e.sb == nil {
		e.mu.Unlock()
		return nil
	}
	return e
}

// Stop stops the pod's init and its network. The pod's containers must
// be stopped first (package podlife does both, in that order). A pod that
// does not exist or is already stopped is fine: the kubelet retries Stop
// freely.
func (m *Manager) Stop(ctx context.Context, id string) error {
	e := m.lookup(id)
	if e == nil {
		return nil
	}
	defer e.release()
	return m.stopLocked(ctx, e.sb)
}

func (m *Manager) stopLocked(ctx context.Context, sb *Sandbox) error {
	if pl := m.opts.Plugins; pl != nil && sb.State == StateReady {
		// Once per pod: the containers are stopped, the pod's network
		// and namespaces are still there. A plugin's error cannot keep
		// a pod from stopping (the kubelet would retry forever).
		if err := pl.StopPodSandbox(ctx, sb.clone()); err != nil {
			m.log.Warn("NRI plugins failed on pod stop", "pod", sb.ID, "err", err)
		}
	}
	if sb.InitUnit != "" {
		if err := m.opts.Systemd.StopUnit(ctx, sb.InitUnit); err != nil {
			return fmt.Errorf("stop pod init %s: %w", sb.InitUnit, err)
		}
		if err := netns.Unpin(sb.PIDNSPath); err != nil {
			return err
		}
	}
	changed := sb.State != StateNotReady
	if sb.NetworkUp && sb.NetNSPath != "" {
		if err := m.net.Teardown(ctx, m.netRequest(sb)); err != nil {
			return fmt.Errorf("pod network: %w", err)
		}
		sb.NetworkUp = false
		changed = true
	}
	if !changed {
		return nil
	}
	sb.State = StateNotReady
	if err := m.save(sb, phaseCreated); err != nil {
		return err
	}
	m.log.Info("pod sandbox stopped", "pod", sb.ID)
	return nil
}

// Remove stops the pod if it is ready and removes everything it owns:
// pins, shm, pod files, CNI state, the slice if podunit made it, the
// record. The pod's containers must be gone first (package podlife).
// Removing a pod that does not exist succeeds.
func (m *Manager) Remove(ctx context.Context, id string) error {
	e := m.lookup(id)
	if e == nil {
		return nil
	}
	defer e.release()
	sb := e.sb
	if sb.State == StateReady {
		if err := m.stopLocked(ctx, sb); err != nil {
			return err
		}
	}
	if err := m.teardown(ctx, sb); err != nil {
		// The record stays so that a retry, or the next start, finishes.
		_ = m.save(sb, phaseCreated)
		return fmt.Errorf("remove pod sandbox %s: %w", sb.ID, err)
	}
	m.mu.Lock()
	delete(m.pods, id)
	if m.names[nameKey(sb.Config.GetMetadata())] == id {
		delete(m.names, nameKey(sb.Config.GetMetadata()))
	}
	m.mu.Unlock()
	e.sb = nil
	if pl := m.opts.Plugins; pl != nil {
		if err := pl.RemovePodSandbox(ctx, sb); err != nil {
			m.log.Warn("NRI plugins were not told of the removed pod", "pod", id, "err", err)
		}
	}
	m.log.Info("pod sandbox removed", "pod", id)
	return nil
}

// UpdateResources records new pod-level resources and applies them (plus
// the pod's overhead) to a slice podunit owns. A kubelet-owned slice is
// left alone: the kubelet resizes it before this call (CRI: "called after
// the Kubelet reconfigures the pod-level cgroups"), see setupSlice.
func (m *Manager) UpdateResources(ctx context.Context, id string, r *runtimeapi.LinuxContainerResources) error {
	e := m.lookup(id)
	if e == nil {
		return fmt.Errorf("pod sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	defer e.release()
	if r == nil {
		return nil
	}
	if e.sb.OwnSlice {
		props := resourceProperties(podLimits(r, e.sb.Config.GetLinux().GetOverhead()))
		if len(props) > 0 {
			if err := m.opts.Systemd.SetUnitProperties(ctx, e.sb.Slice, props...); err != nil {
				return fmt.Errorf("pod slice %s resources: %w", e.sb.Slice, err)
			}
		}
	}
	if lin := e.sb.Config.GetLinux(); lin != nil {
		lin.Resources = r
	} else {
		e.sb.Config.Linux = &runtimeapi.LinuxPodSandboxConfig{Resources: r}
	}
	return m.save(e.sb, phaseCreated)
}

// startInit starts the unit that holds a shared PID namespace and pins the
// namespace its init runs in.
func (m *Manager) startInit(ctx context.Context, sb *Sandbox) error {
	md := sb.Config.GetMetadata()
	desc := fmt.Sprintf("podunit pod %s/%s pid namespace init", md.GetNamespace(), md.GetName())
	if err := m.opts.Systemd.StartTransientUnit(ctx, sb.InitUnit, initProperties(desc, sb.Slice, mountns.Wrap(m.opts.MountNS, initCommand(m.opts.PodInit, sb.UserNSPath)))); err != nil {
		return fmt.Errorf("pod init %s: %w", sb.InitUnit, err)
	}
	props, err := m.opts.Systemd.UnitProperties(ctx, sb.InitUnit, "Service")
	if err != nil {
		return fmt.Errorf("pod init %s: %w", sb.InitUnit, err)
	}
	pid, _ := props["MainPID"].(uint32)
	if pid == 0 {
		return fmt.Errorf("pod init %s has no main process: %w", sb.InitUnit, errdefs.ErrPrecondition)
	}
	child, err := waitPIDNamespace(ctx, int(pid))
	if err != nil {
		return fmt.Errorf("pod init %s: %w", sb.InitUnit, err)
	}
	if err := netns.PinFrom(fmt.Sprintf("/proc/%d/ns/pid", child), sb.PIDNSPath); err != nil {
		return fmt.Errorf("pin pod pid namespace: %w", err)
	}
	return nil
}

// waitPIDNamespace waits until the init wrapper (pid) has created its PID
// namespace and forked the init into it, and returns the init's host PID.
// The start job completes at fork time, before the wrapper has unshared.
func waitPIDNamespace(ctx context.Context, pid int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	own, err := netns.Inode(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return 0, err
	}
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if child := firstChild(pid); child > 0 {
			if ino, err := netns.Inode(fmt.Sprintf("/proc/%d/ns/pid", child)); err == nil && ino != own {
				return child, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("init process %d did not enter a new pid namespace: %w", pid, errdefs.ErrDeadline)
		case <-time.After(delay):
		}
	}
}

func firstChild(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	c, _ := strconv.Atoi(f[0])
	return c
}

// Recover rebuilds the manager from the records on disk. Sandboxes that
// never finished creating are rolled back; the rest come back with their
// IPs and namespaces, NotReady if their namespaces or init did not survive
// (a node reboot empties /run). Nothing that is still pinned is touched.
func (m *Manager) Recover(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(m.opts.StateDir, "sandboxes", "*.json"))
	if err != nil {
		return fmt.Errorf("list sandbox records: %w", err)
	}
	var errs []error
	for _, f := range files {
		sb, ph, err := m.load(f)
		if err != nil {
			m.log.Error("unreadable pod sandbox record, left in place", "file", f, "err", err)
			continue
		}
		if sb.ID+".json" != filepath.Base(f) {
			m.log.Error("pod sandbox record names another id, left in place", "file", f, "id", sb.ID)
			continue
		}
		if ph == phaseCreating {
			m.log.Warn("rolling back pod sandbox interrupted while being created", "pod", sb.ID)
			if err := m.teardown(ctx, sb); err != nil {
				errs = append(errs, fmt.Errorf("roll back pod %s: %w", sb.ID, err))
			}
			continue
		}
		if sb.State == StateReady && !m.alive(ctx, sb) {
			m.log.Warn("pod sandbox lost its namespaces or init; now not ready", "pod", sb.ID)
			sb.State = StateNotReady
			if err := m.save(sb, phaseCreated); err != nil {
				errs = append(errs, err)
			}
		}
		m.mu.Lock()
		m.pods[sb.ID] = newEntry(sb)
		m.names[nameKey(sb.Config.GetMetadata())] = sb.ID
		m.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (m *Manager) alive(ctx context.Context, sb *Sandbox) bool {
	if sb.UserNSPath != "" && !netns.IsPinned(sb.UserNSPath) {
		return false
	}
	for _, p := range m.nsPins(sb) {
		if !netns.IsPinned(p) {
			return false
		}
	}
	if sb.InitUnit != "" {
		if !netns.IsPinned(sb.PIDNSPath) {
			return false
		}
		props, err := m.opts.Systemd.UnitProperties(ctx, sb.InitUnit, "Unit")
		if errors.Is(err, errdefs.ErrNotFound) {
			return false
		}
		if err != nil {
			// systemd not answering yet says nothing about the pod; a
			// wrongly NotReady pod would be recreated by the kubelet.
			m.log.Warn("cannot check pod init; keeping pod ready", "pod", sb.ID, "unit", sb.InitUnit, "err", err)
			return true
		}
		if props["ActiveState"] != "active" {
			return false
		}
	}
	return true
}
