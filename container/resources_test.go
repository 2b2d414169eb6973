package container

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerFirst(t *testing.T) {
	res := func(quota, period int64) *runtimeapi.LinuxContainerResources {
		return &runtimeapi.LinuxContainerResources{CpuQuota: quota, CpuPeriod: period, MemoryLimitInBytes: 1 << 20}
	}
	for _, tt := range []struct {
		name      string
		cur, next *runtimeapi.LinuxContainerResources
		want      bool
	}{
		{"lower quota", res(20000, 100000), res(10000, 100000), true},
		{"higher quota", res(10000, 100000), res(20000, 100000), false},
		{"same quota", res(10000, 100000), res(10000, 100000), false},
		{"same share, shorter period", res(20000, 100000), res(10000, 50000), false},
		{"longer period lowers", res(10000, 50000), res(10000, 100000), true},
		{"default period", res(20000, 0), res(10000, 100000), true},
		{"limit from none", nil, res(10000, 100000), true},
		{"limit from unlimited", res(-1, 100000), res(50000, 100000), true},
		{"to unlimited", res(10000, 100000), res(-1, 100000), false},
		{"no quota either side", res(0, 0), &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1}, false},
	} {
		if got := containerFirst(tt.cur, tt.next); got != tt.want {
			t.Errorf("%s: containerFirst = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func (e *env) bundleSpec(id string) *specs.Spec {
	e.t.Helper()
	s, err := oci.ReadBundle(e.m.bundleDir(id))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// setPropertyCalls counts the fake systemd's SetUnitProperties calls.
func (e *env) setPropertyCalls() int {
	n := 0
	for _, c := range e.sd.Calls {
		if strings.HasPrefix(c, "set-property ") {
			n++
		}
	}
	return n
}

// The container's own cgroup gets the limits: through the bundle while it
// is created, through the runtime's update once it runs; the unit gets
// them as properties.
func TestUpdateResourcesOwnCgroup(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	r := e.bundleSpec(id).Linux.Resources
	if r.Memory == nil || *r.Memory.Limit != 64<<20 || r.CPU == nil || *r.CPU.Shares != 512 || r.CPU.Quota != nil {
		t.Fatalf("bundle resources at create: %+v", r)
	}
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuQuota: 20000, CpuPeriod: 100000}); err != nil {
		t.Fatal(err)
	}
	r = e.bundleSpec(id).Linux.Resources
	if r.CPU == nil || *r.CPU.Quota != 20000 || *r.CPU.Period != 100000 || *r.CPU.Shares != 512 || *r.Memory.Limit != 64<<20 || len(r.Devices) == 0 {
		t.Errorf("bundle after an update before start: %+v", r)
	}
	if len(e.rt.updates) != 0 {
		t.Errorf("runtime update of a created container: %v", e.rt.updates)
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := e.sd.Units[unitName(id)].Props["MemoryMax"]; got != uint64(32<<20) {
		t.Errorf("MemoryMax = %v", got)
	}
	if len(e.rt.updates) != 1 {
		t.Fatalf("runtime updates: %v", e.rt.updates)
	}
	// The whole current memory and CPU state, not only the changed field.
	u := e.rt.updates[0]
	if u.Memory == nil || *u.Memory.Limit != 32<<20 || u.CPU == nil || *u.CPU.Quota != 20000 || *u.CPU.Period != 100000 || *u.CPU.Shares != 512 ||
		u.HugepageLimits != nil || u.Unified != nil || u.Devices != nil {
		t.Errorf("runtime update = %+v", u)
	}
}

// On cgroup v1 a child's CFS quota may not exceed its parent's: lowering
// goes to the container first, raising to the unit first.
func TestUpdateResourcesOrder(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuQuota: 20000, CpuPeriod: 100000}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	var unitBefore []int // SetUnitProperties calls made when the runtime was called
	e.rt.update = func(string, *specs.LinuxResources) error {
		unitBefore = append(unitBefore, e.setPropertyCalls())
		return nil
	}
	for _, step := range []struct {
		name      string
		res       *runtimeapi.LinuxContainerResources
		unitFirst bool
	}{
		{"lower", &runtimeapi.LinuxContainerResources{CpuQuota: 10000}, false},
		{"raise", &runtimeapi.LinuxContainerResources{CpuQuota: 50000}, true},
		{"memory only", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20}, true},
		{"longer period lowers", &runtimeapi.LinuxContainerResources{CpuPeriod: 200000}, false},
	} {
		before := e.setPropertyCalls()
		unitBefore = nil
		if err := e.m.UpdateResources(ctx, id, step.res); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if e.setPropertyCalls() != before+1 || len(unitBefore) != 1 {
			t.Fatalf("%s: %d unit updates, runtime calls %v", step.name, e.setPropertyCalls()-before, unitBefore)
		}
		if gotUnitFirst := unitBefore[0] == before+1; gotUnitFirst != step.unitFirst {
			t.Errorf("%s: unit first = %v, want %v", step.name, gotUnitFirst, step.unitFirst)
		}
	}
	if got := e.sd.Units[unitName(id)].Props["CPUQuotaPerSecUSec"]; got != uint64(250000) {
		t.Errorf("CPUQuotaPerSecUSec = %v (50000 per 200000)", got)
	}

	// A failed runtime update fails the call and keeps the recorded limits;
	// being first for a lowering, it left the unit alone too.
	e.rt.update = func(string, *specs.LinuxResources) error { return errors.New("runc update: EINVAL") }
	before := e.setPropertyCalls()
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuQuota: 1000}); err == nil || !strings.Contains(err.Error(), "EINVAL") {
		t.Fatalf("failed runtime update: %v", err)
	}
	if e.setPropertyCalls() != before {
		t.Errorf("unit updated although the container's cgroup refused")
	}
	if q := e.status(id).Resources.GetLinux().GetCpuQuota(); q != 50000 {
		t.Errorf("recorded quota after a failed update = %d", q)
	}
}

// What ContainerStatus reports is what some writer applies: the unit's
// properties, or the runtime for a container with its own cgroup.
func TestResourcesInForce(t *testing.T) {
	asked := &runtimeapi.LinuxContainerResources{
		CpuShares: 512, MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 128 << 20,
		CpusetCpus: "0", CpusetMems: "0",
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
		Unified:        map[string]string{"memory.high": "50000000"},
	}
	for _, tt := range []struct {
		name                           string
		v2, noHugetlb, crun            bool
		swap, cpuset, hugetlb, unified bool
	}{
		{name: "v1 runc", cpuset: true, hugetlb: true},
		{name: "v1 runc, hugetlb bound to cgroup2", noHugetlb: true, cpuset: true},
		{name: "v1 crun", crun: true},
		{name: "v2 runc", v2: true, swap: true, cpuset: true, hugetlb: true, unified: true},
		{name: "v2 crun", v2: true, crun: true, swap: true, cpuset: true, unified: true},
	} {
		e := newEnv(t)
		e.m.opts.Caps.CgroupV2, e.m.opts.NoHugetlb, e.rt.noCgroup = tt.v2, tt.noHugetlb, tt.crun
		got := e.m.inForce(e.rt, asked)
		if got.GetCpuShares() != 512 || got.GetMemoryLimitInBytes() != 64<<20 {
			t.Errorf("%s: CPU and memory are always applied: %+v", tt.name, got)
		}
		if (got.GetMemorySwapLimitInBytes() != 0) != tt.swap || (got.GetCpusetCpus() != "") != tt.cpuset ||
			(got.GetCpusetMems() != "") != tt.cpuset || (len(got.GetHugepageLimits()) != 0) != tt.hugetlb || (len(got.GetUnified()) != 0) != tt.unified {
			t.Errorf("%s: in force %+v; want swap %v cpuset %v hugetlb %v unified %v", tt.name, got, tt.swap, tt.cpuset, tt.hugetlb, tt.unified)
		}
	}
}

// unified is refused where nobody would write it, at create and update,
// and a refused update changes nothing.
func TestUnifiedRefusedWhereNotApplied(t *testing.T) {
	for _, tt := range []struct {
		name     string
		v2, crun bool
		uni      map[string]string
	}{
		{"cgroup v1", false, false, map[string]string{"memory.high": "50000000"}},
		{"crun on v2, no unit property", true, true, map[string]string{"memory.swap.max": "0", "cpu.idle": "1"}},
		{"crun on v2, memory.oom.group neither 0 nor 1", true, true, map[string]string{"memory.oom.group": "2"}},
	} {
		uni := tt.uni
		e := newEnv(t)
		e.m.opts.Caps.CgroupV2, e.rt.noCgroup = tt.v2, tt.crun
		cfg := containerConfig("app")
		cfg.Linux.Resources.Unified = uni
		if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: create with unified: %v, want invalid", tt.name, err)
		}
		id := e.create("pod1", "app")
		if err := e.m.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		calls := e.setPropertyCalls()
		if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20, Unified: uni}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: update with unified: %v, want invalid", tt.name, err)
		}
		if len(e.rt.updates) != 0 || e.setPropertyCalls() != calls || e.status(id).GetResources().GetLinux().GetMemoryLimitInBytes() != 64<<20 {
			t.Errorf("%s: a refused update changed something: runtime %v, systemd %v", tt.name, e.rt.updates, e.sd.Calls)
		}
	}
}

// A running runc container gets cpusets and unified through the runtime's
// update (on v1 systemd has no cpuset to set), and a hugepage change, which
// runc's update would drop, is refused.
func TestUpdateRunningCpusetUnifiedHugepages(t *testing.T) {
	e := newEnv(t)
	e.m.opts.Caps.CgroupV2 = true
	cfg := containerConfig("app")
	cfg.Linux.Resources.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}}
	id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The kubelet resends the same hugepage limits with every resize.
	upd := &runtimeapi.LinuxContainerResources{CpusetCpus: "1", Unified: map[string]string{"memory.high": "50000000"},
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}}}
	if err := e.m.UpdateResources(ctx, id, upd); err != nil {
		t.Fatal(err)
	}
	if len(e.rt.updates) != 1 || e.rt.updates[0].CPU == nil || e.rt.updates[0].CPU.Cpus != "1" || e.rt.updates[0].Unified["memory.high"] != "50000000" {
		t.Fatalf("runtime updates %+v", e.rt.updates)
	}
	st := e.status(id).GetResources().GetLinux()
	if st.GetCpusetCpus() != "1" || st.GetUnified()["memory.high"] != "50000000" {
		t.Errorf("status after the update: %+v", st)
	}
	calls := e.setPropertyCalls()
	err = e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}})
	if !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("hugepage change of a running container: %v", err)
	}
	if len(e.rt.updates) != 1 || e.setPropertyCalls() != calls || e.status(id).GetResources().GetLinux().GetMemoryLimitInBytes() != 64<<20 {
		t.Errorf("the refused update changed something")
	}
}

// crun's containers live in the unit's cgroup: the unified keys systemd
// has a property for (the kubelet sends memory.swap.max on v2) reach them
// through the unit.
func TestUnifiedThroughTheUnitForCrun(t *testing.T) {
	e := newEnv(t)
	e.m.opts.Caps.CgroupV2, e.rt.noCgroup = true, true
	cfg := containerConfig("app")
	cfg.Linux.Resources.Unified = map[string]string{"memory.swap.max": "0"}
	id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := e.sd.Units[unitName(id)].Props["MemorySwapMax"]; got != uint64(0) {
		t.Errorf("MemorySwapMax = %v", got)
	}
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "max"}}); err != nil {
		t.Fatal(err)
	}
	if got := e.sd.Units[unitName(id)].Props["MemoryHigh"]; got != uint64(math.MaxUint64) {
		t.Errorf("MemoryHigh = %v", got)
	}
	if u := e.status(id).GetResources().GetLinux().GetUnified(); u["memory.high"] != "max" {
		t.Errorf("status unified %v", u)
	}
}

// The unit's start job is bounded by podunit's start_timeout, not by the
// manager's DefaultTimeoutStartSec (30 s in the test harness, 90 s on
// Debian), which killed slow starts podunit still waited for.
func TestUnitStartTimeoutIsPodunits(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, want := e.sd.Units[unitName(id)].Props["TimeoutStartUSec"], uint64(e.m.opts.StartTimeout/time.Microsecond); got != want || want == 0 {
		t.Errorf("TimeoutStartUSec = %v, want %d", got, want)
	}
}

// The kubelet (cgroup v2, singleProcessOOMKill off) sends memory.oom.group
// with every container. crun's containers live in the unit's cgroup, where
// systemd writes it for OOMPolicy=kill; runc writes it in its own cgroup.
// A running container's value cannot change (OOMPolicy= is fixed at start),
// but the kubelet's resize repeats it, which passes.
func TestUnifiedOOMGroupAsOOMPolicy(t *testing.T) {
	for _, tt := range []struct {
		name   string
		crun   bool
		value  string
		policy any // the unit's OOMPolicy property; nil: not set
	}{
		{"crun kill", true, "1", "kill"},
		{"crun continue", true, "0", "continue"},
		{"runc writes it itself", false, "1", nil},
	} {
		e := newEnv(t)
		e.m.opts.Caps.CgroupV2, e.rt.noCgroup = true, tt.crun
		cfg := containerConfig("app")
		cfg.Linux.Resources.Unified = map[string]string{"memory.oom.group": tt.value}
		id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
		if err != nil {
			t.Fatalf("%s: create: %v", tt.name, err)
		}
		if err := e.m.Start(ctx, id); err != nil {
			t.Fatalf("%s: start: %v", tt.name, err)
		}
		if got := e.sd.Units[unitName(id)].Props["OOMPolicy"]; got != tt.policy {
			t.Errorf("%s: unit OOMPolicy = %v, want %v", tt.name, got, tt.policy)
		}
		if got := e.status(id).GetResources().GetLinux().GetUnified()["memory.oom.group"]; got != tt.value {
			t.Errorf("%s: status unified memory.oom.group = %q, want %q", tt.name, got, tt.value)
		}
		same := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20, Unified: map[string]string{"memory.oom.group": tt.value}}
		if err := e.m.UpdateResources(ctx, id, same); err != nil {
			t.Errorf("%s: resize repeating memory.oom.group: %v", tt.name, err)
		}
		if !tt.crun {
			continue
		}
		other := map[string]string{"1": "0", "0": "1"}[tt.value]
		calls := e.setPropertyCalls()
		err = e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 16 << 20, Unified: map[string]string{"memory.oom.group": other}})
		if !errors.Is(err, errdefs.ErrPrecondition) {
			t.Errorf("%s: changing memory.oom.group of a running crun container: %v, want failed precondition", tt.name, err)
		}
		if e.setPropertyCalls() != calls || e.status(id).GetResources().GetLinux().GetMemoryLimitInBytes() != 32<<20 {
			t.Errorf("%s: a refused update changed something: systemd %v", tt.name, e.sd.Calls)
		}
	}
}
