//go:build integration

package container

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/podunit/podunit/unitprops"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// limitFiles is what a workload reads from its own /sys/fs/cgroup for r
// (JVM heap, GOMAXPROCS), in the host's hierarchy (v1 hybrid or v2).
func limitFiles(v2 bool, r *runtimeapi.LinuxContainerResources) map[string]string {
	if v2 {
		return map[string]string{
			"/sys/fs/cgroup/memory.max": fmt.Sprint(r.MemoryLimitInBytes),
			"/sys/fs/cgroup/cpu.max":    fmt.Sprintf("%d %d", r.CpuQuota, r.CpuPeriod),
			"/sys/fs/cgroup/cpu.weight": fmt.Sprint(unitprops.SharesToWeight(r.CpuShares)),
			"/sys/fs/cgroup/pids.max":   "max", // CRI has no container pids limit; the pod slice holds one
		}
	}
	return map[string]string{
		"/sys/fs/cgroup/memory/memory.limit_in_bytes": fmt.Sprint(r.MemoryLimitInBytes),
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":         fmt.Sprint(r.CpuQuota),
		"/sys/fs/cgroup/cpu/cpu.cfs_period_us":        fmt.Sprint(r.CpuPeriod),
		"/sys/fs/cgroup/cpu/cpu.shares":               fmt.Sprint(r.CpuShares),
		"/sys/fs/cgroup/pids/pids.max":                "max",
	}
}

// checkLimitsInside reads each file inside the container (ExecSync cat).
func (ie *inside) checkLimitsInside(ctx context.Context, t *testing.T, m *Manager, id, step string, want map[string]string) {
	t.Helper()
	for file, w := range want {
		out, errOut, code, err := m.ExecSync(ctx, id, []string{"cat", file}, 10)
		if got := strings.TrimSpace(string(out)); err != nil || code != 0 || got != w {
			t.Errorf("%s: inside the container %s = %q (exit %d, %v, %s), want %s", step, file, got, code, err, errOut, w)
		}
	}
}

// A container sees its own limits in its own cgroup (<unit>/container),
// as under containerd/runc, at create and after UpdateContainerResources
// raises and lowers them; the unit keeps the same limits as properties.
func (ie *inside) ownLimits(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	v2 := ie.opts.Caps.CgroupV2
	res := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuQuota: 10000, CpuPeriod: 100000, CpuShares: 512}
	cfg := shConfig("limits", trapTerm)
	cfg.Linux.Resources = res
	id := ie.run(ctx, t, m, cfg)
	if err := waitReady(ctx, m, id); err != nil {
		t.Fatal(err)
	}
	ie.checkLimitsInside(ctx, t, m, id, "create", limitFiles(v2, res))
	// Pinning reaches the workload on v1 too, where systemd has no cpuset
	// property and only the runtime's write to the container's cgroup pins.
	if goruntime.NumCPU() >= 2 {
		for i, cpus := range []string{"1", "0"} {
			if err := m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpusetCpus: cpus}); err != nil {
				t.Fatalf("cpuset %s: %v", cpus, err)
			}
			out, _, code, err := m.ExecSync(ctx, id, []string{"grep", "Cpus_allowed_list", "/proc/1/status"}, 10)
			if f := strings.Fields(string(out)); err != nil || code != 0 || len(f) != 2 || f[1] != cpus {
				t.Errorf("cpuset update %d: the container's init has %q (exit %d, %v), want CPUs %s", i, out, code, err, cpus)
			}
			st, _, err := m.Status(ctx, id, false)
			if err != nil || st.GetResources().GetLinux().GetCpusetCpus() != cpus {
				t.Errorf("cpuset update %d: status reports %q (%v)", i, st.GetResources().GetLinux().GetCpusetCpus(), err)
			}
		}
	}

	quotaFile := [2]string{"cpu", "cpu.cfs_quota_us"}
	if v2 {
		quotaFile = [2]string{"", "cpu.max"}
	}
	for _, step := range []struct {
		name      string
		upd       *runtimeapi.LinuxContainerResources
		unitQuota string // the unit's own cgroup, written by systemd
	}{
		{"raise", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuQuota: 50000, CpuPeriod: 100000, CpuShares: 1024}, "50000"},
		{"lower", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 48 << 20, CpuQuota: 20000, CpuPeriod: 100000, CpuShares: 256}, "20000"},
		// Below the first limit: on v1 this fails with EINVAL unless the
		// container's cgroup is lowered before the unit's.
		{"lower below start", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 40 << 20, CpuQuota: 5000, CpuPeriod: 50000, CpuShares: 128}, "5000"},
	} {
		if err := m.UpdateResources(ctx, id, step.upd); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		ie.checkLimitsInside(ctx, t, m, id, step.name, limitFiles(v2, step.upd))
		got := cgroupFile(quotaFile[0], unitName(id), quotaFile[1])
		if v2 {
			got, _, _ = strings.Cut(got, " ")
		}
		if got != step.unitQuota {
			t.Errorf("%s: the unit's %s = %s, want %s", step.name, quotaFile[1], got, step.unitQuota)
		}
	}
	if err := m.Stop(ctx, id, 5); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}
