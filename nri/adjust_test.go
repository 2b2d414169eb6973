package nri

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	api "github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func bareSpec() *specs.Spec {
	return &specs.Spec{
		Annotations: map[string]string{"keep": "1", "drop": "2"},
		Process: &specs.Process{
			Args:    []string{"/pause"},
			Env:     []string{"PATH=/bin", "OLD=1", "GONE=1"},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/data", Type: "bind", Source: "/old"},
			{Destination: "/tmp/x", Type: "bind", Source: "/x"},
		},
		Linux: &specs.Linux{
			CgroupsPath: "/pod.slice/podunit-ctr-1.service/container",
			Devices:     []specs.LinuxDevice{{Path: "/dev/old", Type: "c", Major: 1, Minor: 1}},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{
				{Allow: false, Access: "rwm"},
				{Allow: true, Type: "c", Major: i64(1), Minor: i64(1), Access: "rwm"},
			}},
			Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/run/netns/x"}, {Type: specs.MountNamespace}},
		},
	}
}

func i64(v int64) *int64 { return &v }

// Each adjustment lands in the spec as containerd and CRI-O place it.
func TestApplyAdjustmentSpec(t *testing.T) {
	adj := &api.ContainerAdjustment{}
	adj.AddAnnotation("new", "v")
	adj.RemoveAnnotation("drop")
	adj.AddMount(&api.Mount{Destination: "/data", Type: "bind", Source: "/new", Options: []string{"rbind", "ro"}})
	adj.AddMount(&api.Mount{Destination: "/a", Type: "tmpfs", Source: "tmpfs"})
	adj.RemoveMount("/tmp/x")
	adj.AddEnv("OLD", "2")
	adj.AddEnv("NEW", "3")
	adj.RemoveEnv("GONE")
	adj.UpdateArgs([]string{"/bin/sh", "-c", "true"})
	adj.AddHooks(&api.Hooks{CreateRuntime: []*api.Hook{{Path: "/bin/hook", Args: []string{"hook"}}}})
	adj.AddRlimit("RLIMIT_NOFILE", 4096, 2048)
	adj.AddRlimit("RLIMIT_CORE", 0, 0)
	adj.AddDevice(&api.LinuxDevice{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229, FileMode: api.FileMode(0o666)})
	adj.RemoveDevice("/dev/old")
	adj.SetLinuxOomScoreAdj(intp(500))
	adj.SetLinuxSysctl("net.ipv4.ip_forward", "1")
	adj.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "network", Path: "/run/netns/y"})
	adj.RemoveNamespace(&api.LinuxNamespace{Type: "mount"})
	adj.SetLinuxSeccompPolicy(&api.LinuxSeccomp{DefaultAction: "SCMP_ACT_ALLOW", DefaultErrno: api.UInt32(uint32(1))})

	s := bareSpec()
	res, err := applyAdjustment(adjustRequest{spec: s, adj: adj})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"keep": "1", "new": "v"}; !reflect.DeepEqual(s.Annotations, want) {
		t.Errorf("annotations %v", s.Annotations)
	}
	var dsts []string
	for _, m := range s.Mounts {
		dsts = append(dsts, m.Destination+"="+m.Source)
	}
	if got, want := strings.Join(dsts, " "), "/proc=proc /dev=tmpfs /data=/new /a=tmpfs"; got != want {
		t.Errorf("mounts %s, want %s", got, want)
	}
	if got, want := strings.Join(s.Process.Env, " "), "PATH=/bin OLD=2 NEW=3"; got != want {
		t.Errorf("env %s, want %s", got, want)
	}
	if got := strings.Join(s.Process.Args, " "); got != "/bin/sh -c true" {
		t.Errorf("args %s", got)
	}
	if s.Hooks == nil || len(s.Hooks.CreateRuntime) != 1 || s.Hooks.CreateRuntime[0].Path != "/bin/hook" {
		t.Errorf("hooks %+v", s.Hooks)
	}
	if want := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 2048}, {Type: "RLIMIT_CORE"}}; !reflect.DeepEqual(s.Process.Rlimits, want) {
		t.Errorf("rlimits %+v", s.Process.Rlimits)
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/fuse" || s.Linux.Devices[0].Major != 10 {
		t.Errorf("devices %+v", s.Linux.Devices)
	}
	rules := s.Linux.Resources.Devices
	if len(rules) != 2 || rules[0].Allow || !rules[1].Allow || *rules[1].Major != 10 || *rules[1].Minor != 229 || rules[1].Access != "rw" {
		t.Errorf("device rules %+v", rules)
	}
	if s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj != 500 || res.OomScoreAdj != 500 {
		t.Errorf("oom score adj %v / %d", s.Process.OOMScoreAdj, res.OomScoreAdj)
	}
	if s.Linux.Sysctl["net.ipv4.ip_forward"] != "1" {
		t.Errorf("sysctl %v", s.Linux.Sysctl)
	}
	if want := []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/run/netns/y"}}; !reflect.DeepEqual(s.Linux.Namespaces, want) {
		t.Errorf("namespaces %+v", s.Linux.Namespaces)
	}
	if sc := s.Linux.Seccomp; sc == nil || sc.DefaultAction != specs.ActAllow || sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != 1 {
		t.Errorf("seccomp %+v", s.Linux.Seccomp)
	}
}

func intp(v int) *int { return &v }

// Resources become the container's CRI resources, over what it had.
func TestApplyAdjustmentResources(t *testing.T) {
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxMemoryLimit(256 << 20)
	adj.SetLinuxMemorySwap(512 << 20)
	adj.SetLinuxCPUShares(1024)
	adj.SetLinuxCPUQuota(20000)
	adj.SetLinuxCPUPeriod(100000)
	adj.SetLinuxCPUSetCPUs("2-3")
	adj.SetLinuxCPUSetMems("0")
	adj.AddLinuxHugepageLimit("2MB", 1<<21)
	adj.AddLinuxUnified("memory.high", "100M")
	cur := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuShares: 2, OomScoreAdj: 10,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}, {PageSize: "1GB", Limit: 0}}}
	res, err := applyAdjustment(adjustRequest{spec: bareSpec(), res: cur, adj: adj})
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: 256 << 20, MemorySwapLimitInBytes: 512 << 20, CpuShares: 1024, CpuQuota: 20000, CpuPeriod: 100000,
		CpusetCpus: "2-3", CpusetMems: "0", OomScoreAdj: 10, Unified: map[string]string{"memory.high": "100M"},
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "1GB"}, {PageSize: "2MB", Limit: 1 << 21}},
	}
	if res.String() != want.String() {
		t.Errorf("resources\n got %v\nwant %v", res, want)
	}
	if cur.MemoryLimitInBytes != 64<<20 {
		t.Error("the current resources were changed in place")
	}
	if _, err := applyAdjustment(adjustRequest{spec: bareSpec(), adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
		Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: "0-x"}},
	}}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad cpuset: %v", err)
	}
}

// What podunit cannot apply fails the create, naming it.
func TestApplyAdjustmentUnsupported(t *testing.T) {
	tests := []struct {
		name string
		set  func(a *api.ContainerAdjustment)
		want string
	}{
		{"cgroups path", func(a *api.ContainerAdjustment) { a.SetLinuxCgroupsPath("/elsewhere") }, "cgroups path"},
		{"io priority", func(a *api.ContainerAdjustment) {
			a.SetLinuxIOPriority(&api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_BE})
		}, "I/O priority"},
		{"scheduler", func(a *api.ContainerAdjustment) { a.SetLinuxScheduler(&api.LinuxScheduler{}) }, "scheduler"},
		{"net device", func(a *api.ContainerAdjustment) { a.AddLinuxNetDevice("eth1", &api.LinuxNetDevice{Name: "net1"}) }, "network devices"},
		{"rdt", func(a *api.ContainerAdjustment) { a.SetLinuxRDTClosID("x") }, "RDT"},
		{"memory policy", func(a *api.ContainerAdjustment) {
			a.SetLinuxMemoryPolicy(api.MpolMode_MPOL_BIND, "0")
		}, "memory policy"},
		{"pids", func(a *api.ContainerAdjustment) { a.SetLinuxPidLimits(10) }, "pids limit"},
		{"blockio", func(a *api.ContainerAdjustment) { a.SetLinuxBlockIOClass("slow") }, "block I/O class"},
		{"rdt class", func(a *api.ContainerAdjustment) { a.SetLinuxRDTClass("gold") }, "RDT class"},
		{"realtime", func(a *api.ContainerAdjustment) { a.SetLinuxCPURealtimeRuntime(10) }, "realtime"},
		{"kernel memory", func(a *api.ContainerAdjustment) { a.SetLinuxMemoryKernel(10) }, "kernel memory"},
		{"reservation", func(a *api.ContainerAdjustment) { a.SetLinuxMemoryReservation(10) }, "memory reservation"},
		{"cdi without cdi", func(a *api.ContainerAdjustment) { a.AddCDIDevice(&api.CDIDevice{Name: "vendor.com/dev=x"}) }, "CDI is disabled"},
	}
	for _, tt := range tests {
		adj := &api.ContainerAdjustment{}
		tt.set(adj)
		_, err := applyAdjustment(adjustRequest{spec: bareSpec(), adj: adj})
		if !errors.Is(err, ErrUnsupported) || !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want unsupported %q", tt.name, err, tt.want)
		}
	}
}

func TestApplyAdjustmentInvalid(t *testing.T) {
	tests := []struct {
		name string
		adj  *api.ContainerAdjustment
	}{
		{"device outside /dev", &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{{Path: "/etc/passwd", Type: "c"}}}}},
		{"device type", &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{{Path: "/dev/x", Type: "z"}}}}},
		{"rlimit type", &api.ContainerAdjustment{Rlimits: []*api.POSIXRlimit{{Type: "NOFILE"}}}},
		{"rlimit soft above hard", &api.ContainerAdjustment{Rlimits: []*api.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 2, Hard: 1}}}},
		{"namespace", &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Namespaces: []*api.LinuxNamespace{{Type: "bogus"}}}}},
		{"empty args", &api.ContainerAdjustment{Args: []string{""}}},
	}
	for _, tt := range tests {
		if _, err := applyAdjustment(adjustRequest{spec: bareSpec(), adj: tt.adj}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", tt.name, err)
		}
	}
}

// A create without adjustment changes neither spec nor resources.
func TestApplyAdjustmentNone(t *testing.T) {
	s := bareSpec()
	res, err := applyAdjustment(adjustRequest{spec: s, res: &runtimeapi.LinuxContainerResources{CpuShares: 5}})
	if err != nil || res.CpuShares != 5 || !reflect.DeepEqual(s, bareSpec()) {
		t.Errorf("%v %v", res, err)
	}
	s = bareSpec()
	// what the adaptation sends when no plugin adjusted anything
	empty := &api.ContainerAdjustment{Annotations: map[string]string{}, Hooks: &api.Hooks{}, Linux: &api.LinuxContainerAdjustment{
		Rdt: &api.LinuxRdt{}, Resources: &api.LinuxResources{Memory: &api.LinuxMemory{}, Cpu: &api.LinuxCPU{}, Unified: map[string]string{}},
	}}
	if _, err := applyAdjustment(adjustRequest{spec: s, adj: empty}); err != nil || !reflect.DeepEqual(s, bareSpec()) {
		t.Errorf("empty adjustment changed the spec: %v %+v", err, s)
	}
}
