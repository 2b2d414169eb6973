package container

import (
	"context"
	"fmt"
	"math"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/statefile"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitprops"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateResources changes a container's limits in both places that hold
// them: the unit (systemd properties; systemd writes the unit's cgroup)
// and the container's own cgroup below it (the runtime's `update`), which
// is what the workload reads. A created container gets them in its bundle
// and its unit at start. The record keeps them for ContainerStatus. Fields
// left zero keep their current value.
func (m *Manager) UpdateResources(ctx context.Context, id string, res *runtimeapi.LinuxContainerResources) error {
	return m.updateResources(ctx, id, res, true)
}

// updateResources is UpdateResources; ask: the plugins see the request
// first and may change it (not when they asked for it).
func (m *Manager) updateResources(ctx context.Context, id string, res *runtimeapi.LinuxContainerResources, ask bool) error {
	if res == nil {
		return nil
	}
	c, err := m.lockCurrent(ctx, id, m.refreshNowLocked)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	rt, err := m.runtime(c.rec.Handler)
	if err != nil {
		return err
	}
	if err := m.checkUnified(rt, res.GetUnified()); err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	if ask && m.plugins != nil {
		if res, err = m.plugins.UpdateContainer(ctx, c.rec.info(c.init.pid), res); err != nil {
			return fmt.Errorf("update container %s: %w", id, err)
		}
		if err := m.checkUnified(rt, res.GetUnified()); err != nil {
			return fmt.Errorf("update container %s: NRI: %w", id, err)
		}
	}
	if c.rec.State == StateRunning {
		if err := checkOOMGroupUpdate(rt, c.rec.Resources, res); err != nil {
			return fmt.Errorf("update container %s: %w", id, err)
		}
	}
	next := mergeResources(c.rec.Resources, res)
	if c.rec.State == StateRunning && m.hugetlbInForce(rt) && !sameHugepages(c.rec.Resources.GetHugepageLimits(), next.GetHugepageLimits()) {
		// runc's update reads hugepage limits and drops them.
		return fmt.Errorf("update container %s: hugepage limits of a running container cannot change (the OCI runtime's update does not apply them); recreate it: %w", id, errdefs.ErrPrecondition)
	}
	props, err := unitprops.ResourceProperties(unitUpdate(res, next), m.opts.Caps)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	lr, err := oci.LinuxResources(next)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	switch c.rec.State {
	case StateRunning:
		if err := m.applyResources(ctx, c.rec, props, lr, containerFirst(c.rec.Resources, next)); err != nil {
			return fmt.Errorf("update container %s: %w", id, err)
		}
	case StateCreated:
		if err := m.rewriteBundleLimits(id, lr); err != nil {
			return fmt.Errorf("update container %s: %w", id, err)
		}
	}
	r := c.rec.clone()
	r.Resources = next
	if err := m.save(r); err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	c.rec = r
	if ask && m.plugins != nil {
		m.plugins.PostUpdateContainer(ctx, r.info(c.init.pid))
	}
	return nil
}

// unitUpdate is what an update changes on the unit. systemd's quota is
// per second, CRI's per period: a new quota or period alone would keep the
// other's old ratio on the unit but not in the container's cgroup, so
// either one sends both, from the merged limits.
func unitUpdate(upd, next *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	if upd.GetCpuQuota() == 0 && upd.GetCpuPeriod() == 0 {
		return upd
	}
	u := mergeResources(&runtimeapi.LinuxContainerResources{}, upd)
	u.CpuQuota, u.CpuPeriod = next.GetCpuQuota(), next.GetCpuPeriod()
	return u
}

// applyResources changes a running container's limits: the unit's
// properties and its own cgroup's memory, CPU, cpusets and unified
// (hugetlb keeps its values from create). ctrFirst orders the two writes.
func (m *Manager) applyResources(ctx context.Context, r *record, props []systemd.Property, lr *specs.LinuxResources, ctrFirst bool) error {
	rt, err := m.runtime(r.Handler)
	if err != nil {
		return err
	}
	unit := func() error {
		if len(props) == 0 {
			return nil
		}
		return m.sd.SetUnitProperties(ctx, r.Unit, props...)
	}
	own := func() error {
		if lr == nil || (lr.Memory == nil && lr.CPU == nil && lr.Unified == nil) {
			return nil
		}
		return rt.Update(ctx, r.ID, &specs.LinuxResources{Memory: lr.Memory, CPU: lr.CPU, Unified: lr.Unified})
	}
	steps := []func() error{unit, own}
	if ctrFirst {
		steps = []func() error{own, unit}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// containerFirst orders an update of a running container. On cgroup v1 a
// child's CFS quota (as a share of its period) may not exceed its parent's
// (EINVAL), so a lower CPU limit goes to the container's cgroup first and
// then to the unit, a higher or equal one to the unit first. Memory and
// shares have no such rule; v2 takes the minimum and accepts either order.
// No quota (unset or negative) is no limit.
func containerFirst(cur, next *runtimeapi.LinuxContainerResources) bool {
	return cpuLimit(next) < cpuLimit(cur)
}

// cpuLimit is the CFS quota as CPUs (quota / period); +Inf for none.
func cpuLimit(r *runtimeapi.LinuxContainerResources) float64 {
	if r.GetCpuQuota() <= 0 {
		return math.Inf(1)
	}
	period := r.GetCpuPeriod()
	if period <= 0 {
		period = unitprops.DefaultCFSPeriod
	}
	return float64(r.GetCpuQuota()) / float64(period)
}

// rewriteBundleLimits gives a created container's bundle its new limits:
// the runtime applies them to the container's cgroup at start, when the
// unit gets them too.
func (m *Manager) rewriteBundleLimits(id string, lr *specs.LinuxResources) error {
	spec, err := oci.ReadBundle(m.bundleDir(id))
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if m.opts.NoHugetlb && lr != nil {
		lr.HugepageLimits = nil
	}
	oci.SetLimits(spec, lr)
	if err := statefile.Write(filepath.Join(m.bundleDir(id), "config.json"), spec); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}

// mergeResources overlays the set fields of upd on cur.
func mergeResources(cur, upd *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	n := &runtimeapi.LinuxContainerResources{}
	if cur != nil {
		n = &runtimeapi.LinuxContainerResources{
			CpuPeriod: cur.CpuPeriod, CpuQuota: cur.CpuQuota, CpuShares: cur.CpuShares,
			MemoryLimitInBytes: cur.MemoryLimitInBytes, OomScoreAdj: cur.OomScoreAdj,
			CpusetCpus: cur.CpusetCpus, CpusetMems: cur.CpusetMems,
			HugepageLimits: cur.HugepageLimits, Unified: cur.Unified,
			MemorySwapLimitInBytes: cur.MemorySwapLimitInBytes,
		}
	}
	if upd.CpuPeriod != 0 {
		n.CpuPeriod = upd.CpuPeriod
	}
	if upd.CpuQuota != 0 {
		n.CpuQuota = upd.CpuQuota
	}
	if upd.CpuShares != 0 {
		n.CpuShares = upd.CpuShares
	}
	if upd.MemoryLimitInBytes != 0 {
		n.MemoryLimitInBytes = upd.MemoryLimitInBytes
	}
	if upd.MemorySwapLimitInBytes != 0 {
		n.MemorySwapLimitInBytes = upd.MemorySwapLimitInBytes
	}
	if upd.CpusetCpus != "" {
		n.CpusetCpus = upd.CpusetCpus
	}
	if upd.CpusetMems != "" {
		n.CpusetMems = upd.CpusetMems
	}
	if upd.OomScoreAdj != 0 {
		n.OomScoreAdj = upd.OomScoreAdj
	}
	if len(upd.HugepageLimits) > 0 {
		n.HugepageLimits = upd.HugepageLimits
	}
	if len(upd.Unified) > 0 {
		n.Unified = upd.Unified
	}
	return n
}

// Which limits are in force depends on who can write them: systemd's unit
// properties (cgroup v2 for swap, cpusets and unified) and, for a runtime that gives
// the container a cgroup of its own (runc), the OCI spec at create and the
// runtime's update later. crun runs without a cgroup manager, so only the
// unit's properties reach its containers. ContainerStatus reports these,
// not merely what was asked (docs/containers.md "Resources").

// checkUnified refuses unified cgroup settings nobody would apply. On v2
// systemd sets the keys it has a unit property for (the kubelet's
// memory.swap.max among them); a runtime with its own cgroup writes any
// key; crun's containers, which live in the unit's cgroup, get only the
// former.
func (m *Manager) checkUnified(rt oci.Runtime, unified map[string]string) error {
	if len(unified) == 0 {
		return nil
	}
	if !m.opts.Caps.CgroupV2 {
		return fmt.Errorf("resources.unified needs cgroup v2; this node runs v1: %w", errdefs.ErrInvalid)
	}
	if rt.OwnCgroup() {
		return nil
	}
	for k, v := range unified {
		if k == unitprops.OOMGroupKey {
			if _, err := unitprops.OOMPolicy(v); err != nil {
				return err
			}
			continue
		}
		if !unitprops.UnifiedUnitKey(k) {
			return fmt.Errorf("resources.unified %s: runtime handler %q gives containers no cgroup of their own and systemd has no property for it: %w", k, rt.Name(), errdefs.ErrInvalid)
		}
	}
	return nil
}

// oomPolicy is the unit's OOMPolicy= for a container whose runtime gives
// it no cgroup of its own: systemd then writes memory.oom.group to the
// unit's cgroup, where the container runs. Empty leaves systemd's default.
func oomPolicy(rt oci.Runtime, r *runtimeapi.LinuxContainerResources) string {
	v, ok := r.GetUnified()[unitprops.OOMGroupKey]
	if !ok || rt.OwnCgroup() {
		return ""
	}
	p, _ := unitprops.OOMPolicy(v) // checked at create and update
	return p
}

// checkOOMGroupUpdate refuses changing memory.oom.group of a running
// container that lives in its unit's cgroup: OOMPolicy= is fixed when
// systemd creates the unit. The kubelet repeats the value it created the
// container with on every resize, which passes.
func checkOOMGroupUpdate(rt oci.Runtime, cur, upd *runtimeapi.LinuxContainerResources) error {
	want := oomPolicy(rt, upd)
	if want == "" {
		return nil
	}
	have := oomPolicy(rt, cur)
	if have == "" {
		have = "continue" // systemd's default for a Delegate= unit
	}
	if want != have {
		return fmt.Errorf("resources.unified %s of a running container of runtime handler %q cannot change (systemd's OOMPolicy= is fixed at start); recreate it: %w", unitprops.OOMGroupKey, rt.Name(), errdefs.ErrPrecondition)
	}
	return nil
}

// hugetlbInForce reports whether hugepage limits reach the container.
func (m *Manager) hugetlbInForce(rt oci.Runtime) bool {
	return rt.OwnCgroup() && !m.opts.NoHugetlb
}

// inForce is the part of r that is applied to a container run by rt.
func (m *Manager) inForce(rt oci.Runtime, r *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	if r == nil {
		return nil
	}
	out := mergeResources(r, &runtimeapi.LinuxContainerResources{})
	caps := m.opts.Caps
	if !caps.CgroupV2 || r.GetMemoryLimitInBytes() <= 0 {
		out.MemorySwapLimitInBytes = 0 // MemorySwapMax is set with MemoryMax, on v2 only
	}
	if !rt.OwnCgroup() && !(caps.CgroupV2 && caps.SystemdVersion >= 244) {
		out.CpusetCpus, out.CpusetMems = "", ""
	}
	if !m.hugetlbInForce(rt) {
		out.HugepageLimits = nil
	}
	if !caps.CgroupV2 {
		out.Unified = nil // refused at create and update; never recorded
	}
	return out
}

// sameHugepages compares two hugepage limit lists by page size.
func sameHugepages(a, b []*runtimeapi.HugepageLimit) bool {
	if len(a) != len(b) {
		return false
	}
	want := make(map[string]uint64, len(a))
	for _, h := range a {
		want[h.GetPageSize()] = h.GetLimit()
	}
	for _, h := range b {
		if v, ok := want[h.GetPageSize()]; !ok || v != h.GetLimit() {
			return false
		}
	}
	return true
}
