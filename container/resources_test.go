package container

import (
	"errors"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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
