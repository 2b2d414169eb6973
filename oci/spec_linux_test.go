package oci

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

func nsString(s *specs.Spec) map[specs.LinuxNamespaceType]string {
	out := map[specs.LinuxNamespaceType]string{}
	for _, n := range s.Linux.Namespaces {
		out[n.Type] = n.Path
	}
	return out
}

func TestNamespaces(t *testing.T) {
	pod := PodNamespaces{NetworkPath: "/run/ns/net", IPCPath: "/run/ns/ipc", UTSPath: "/run/ns/uts", PIDPath: "/run/ns/pid"}
	node, ctr, podm, target := runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_TARGET
	tests := []struct {
		name     string
		o        *runtimeapi.NamespaceOption
		p        PodNamespaces
		cgroupNS bool
		want     map[specs.LinuxNamespaceType]string
		err      error
	}{
		{name: "join pod, private pid", o: &runtimeapi.NamespaceOption{Pid: ctr}, p: pod,
			want: map[specs.LinuxNamespaceType]string{"mount": "", "network": "/run/ns/net", "uts": "/run/ns/uts", "ipc": "/run/ns/ipc", "pid": ""}},
		{name: "pod pid", o: &runtimeapi.NamespaceOption{Pid: podm}, p: pod,
			want: map[specs.LinuxNamespaceType]string{"mount": "", "network": "/run/ns/net", "uts": "/run/ns/uts", "ipc": "/run/ns/ipc", "pid": "/run/ns/pid"}},
		{name: "host everything", o: &runtimeapi.NamespaceOption{Network: node, Ipc: node, Pid: node}, p: pod,
			want: map[specs.LinuxNamespaceType]string{"mount": ""}},
		{name: "no pod files: private", o: nil, cgroupNS: true,
			want: map[specs.LinuxNamespaceType]string{"mount": "", "network": "", "uts": "", "ipc": "", "pid": "", "cgroup": ""}},
		{name: "target", o: &runtimeapi.NamespaceOption{Pid: target, TargetId: "c1"}, p: PodNamespaces{PIDPath: "/proc/42/ns/pid"},
			want: map[specs.LinuxNamespaceType]string{"mount": "", "network": "", "uts": "", "ipc": "", "pid": "/proc/42/ns/pid"}},
		{name: "target without path", o: &runtimeapi.NamespaceOption{Pid: target}, err: errdefs.ErrInvalid},
		{name: "hostile path", o: &runtimeapi.NamespaceOption{Pid: ctr}, p: PodNamespaces{NetworkPath: "/run/../proc/1/ns/net"}, err: errdefs.ErrInvalid},
		{name: "relative path", o: &runtimeapi.NamespaceOption{Pid: ctr}, p: PodNamespaces{IPCPath: "ns/ipc"}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withNamespaces(tt.o, tt.p, tt.cgroupNS))
			if wantErr(t, err, tt.err) {
				return
			}
			if got := nsString(s); !maps.Equal(got, tt.want) {
				t.Errorf("namespaces = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHostname(t *testing.T) {
	for _, tt := range []struct {
		ns   []specs.LinuxNamespace
		want string
	}{
		{ns: []specs.LinuxNamespace{{Type: specs.UTSNamespace}}, want: "pod"},
		{ns: []specs.LinuxNamespace{{Type: specs.UTSNamespace, Path: "/run/ns/uts"}}},
		{ns: nil},
	} {
		s := &specs.Spec{Linux: &specs.Linux{Namespaces: tt.ns}}
		if err := withHostname("pod")(s); err != nil || s.Hostname != tt.want {
			t.Errorf("%v: hostname %q, want %q (%v)", tt.ns, s.Hostname, tt.want, err)
		}
	}
}

func TestUserNamespace(t *testing.T) {
	m := func(c, h, l uint32) *runtimeapi.IDMapping {
		return &runtimeapi.IDMapping{ContainerId: c, HostId: h, Length: l}
	}
	one := []*runtimeapi.IDMapping{m(0, 1000, 100000)}
	tests := []struct {
		name string
		u    *runtimeapi.UserNamespace
		path string
		want bool
		err  error
	}{
		{name: "nil"},
		{name: "node", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}},
		{name: "pod", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: one, Gids: one}, want: true},
		{name: "pod joined", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: one, Gids: one}, path: "/run/ns/user", want: true},
		{name: "two mappings", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: []*runtimeapi.IDMapping{m(0, 1000, 10), m(0, 2000, 10)}, Gids: one}, err: errdefs.ErrInvalid},
		{name: "0 not mapped", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: one, Gids: []*runtimeapi.IDMapping{m(1, 1000, 10)}}, err: errdefs.ErrInvalid},
		{name: "no mappings", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}, err: errdefs.ErrInvalid},
		{name: "container mode", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}, err: errdefs.ErrInvalid},
		{name: "target mode", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}, err: errdefs.ErrInvalid},
		{name: "node with mappings", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE, Uids: one, Gids: one}, err: errdefs.ErrInvalid},
		{name: "empty range", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: one, Gids: []*runtimeapi.IDMapping{m(0, 1000, 0)}}, err: errdefs.ErrInvalid},
		{name: "past the ID space", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: []*runtimeapi.IDMapping{m(0, 4294901760, 65536)}, Gids: one}, err: errdefs.ErrInvalid},
		{name: "relative path", u: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: one, Gids: one}, path: "run/ns/user", err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withUserNamespace(tt.u, tt.path))
			if wantErr(t, err, tt.err) {
				return
			}
			if !tt.want {
				if s.Linux != nil {
					t.Errorf("linux = %+v, want untouched", s.Linux)
				}
				return
			}
			if got := nsString(s); got["user"] != tt.path || len(got) != 1 {
				t.Errorf("namespaces = %v", got)
			}
			want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1000, Size: 100000}}
			if !slices.Equal(s.Linux.UIDMappings, want) || !slices.Equal(s.Linux.GIDMappings, want) {
				t.Errorf("mappings = %v / %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
			}
		})
	}
}

// The highest host ID a mapping may reach is 2^32-2: (uid_t)-1 is "no ID".
func TestUserNamespaceMappingsBoundary(t *testing.T) {
	u := func(h, l uint32) *runtimeapi.UserNamespace {
		m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: h, Length: l}}
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
	}
	if uids, _, err := UserNamespaceMappings(u(4294901759, 65536)); err != nil || uids[0].HostID != 4294901759 {
		t.Errorf("up to 2^32-2: %v %v", uids, err)
	}
	if _, _, err := UserNamespaceMappings(u(4294901760, 65536)); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("up to 2^32-1: %v, want ErrInvalid", err)
	}
	if uids, gids, err := UserNamespaceMappings(nil); uids != nil || gids != nil || err != nil {
		t.Errorf("no options: %v %v %v", uids, gids, err)
	}
}

func TestSysctls(t *testing.T) {
	own := []specs.LinuxNamespace{{Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}}
	tests := []struct {
		name string
		ns   []specs.LinuxNamespace
		in   map[string]string
		err  error
	}{
		{name: "none", ns: own},
		{name: "namespaced", ns: own, in: map[string]string{"net.ipv4.ip_forward": "1", "kernel.shm_rmid_forced": "1", "fs.mqueue.msg_max": "20", "net/ipv4/ip_unprivileged_port_start": "0"}},
		{name: "host network", ns: own[1:], in: map[string]string{"net.ipv4.ip_forward": "1"}, err: errdefs.ErrInvalid},
		{name: "host ipc", ns: own[:1], in: map[string]string{"kernel.msgmax": "1"}, err: errdefs.ErrInvalid},
		{name: "not namespaced", ns: own, in: map[string]string{"vm.overcommit_memory": "1"}, err: errdefs.ErrInvalid},
		{name: "kernel.panic", ns: own, in: map[string]string{"kernel.panic": "1"}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &specs.Spec{Linux: &specs.Linux{Namespaces: tt.ns}}
			err := withSysctls(tt.in)(s)
			if wantErr(t, err, tt.err) {
				return
			}
			if !maps.Equal(s.Linux.Sysctl, tt.in) {
				t.Errorf("sysctl = %v", s.Linux.Sysctl)
			}
		})
	}
}

func TestResources(t *testing.T) {
	r := &runtimeapi.LinuxContainerResources{
		CpuShares: 512, MemoryLimitInBytes: 1 << 30, CpuQuota: 50000, CpuPeriod: 100000, CpusetCpus: "0", CpusetMems: "0",
		MemorySwapLimitInBytes: 2 << 30,
		HugepageLimits:         []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1 << 21}},
		Unified:                map[string]string{"memory.high": "1G"},
	}
	s, err := apply(t, withResources(r))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Linux.Resources
	// The container's own cgroup gets what the kubelet asked for, exactly.
	if got.Memory == nil || *got.Memory.Limit != 1<<30 || got.Memory.Swap != nil {
		t.Errorf("memory = %+v", got.Memory)
	}
	if c := got.CPU; c == nil || *c.Shares != 512 || *c.Quota != 50000 || *c.Period != 100000 || c.Cpus != "0" || c.Mems != "0" {
		t.Errorf("cpu = %+v", got.CPU)
	}
	if got.Pids != nil {
		t.Errorf("pids = %+v (CRI has no container pids limit)", got.Pids)
	}
	if len(got.HugepageLimits) != 1 || got.HugepageLimits[0].Pagesize != "2MB" || got.Unified["memory.high"] != "1G" {
		t.Errorf("resources = %+v", got)
	}
	// A cpuset alone still pins: on cgroup v1 systemd cannot.
	if lr, err := LinuxResources(&runtimeapi.LinuxContainerResources{CpusetCpus: "0-1,3"}); err != nil || lr == nil || lr.CPU.Cpus != "0-1,3" {
		t.Errorf("cpuset alone: %+v %v", lr, err)
	}
	for _, bad := range []string{"0-", "a", "3-1", "0,,1", "../x", "0\n1", "-1", "70000"} {
		if _, err := LinuxResources(&runtimeapi.LinuxContainerResources{CpusetMems: bad}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("cpuset_mems %q: %v, want invalid", bad, err)
		}
	}
	if s, _ := apply(t, withResources(&runtimeapi.LinuxContainerResources{OomScoreAdj: 5})); s.Linux != nil {
		t.Errorf("no limits created linux.resources: %+v", s.Linux)
	}
	for _, tt := range []struct {
		in                    *runtimeapi.LinuxContainerResources
		shares, quota, period string
	}{
		{in: &runtimeapi.LinuxContainerResources{CpuShares: 1}, shares: "2"},
		{in: &runtimeapi.LinuxContainerResources{CpuShares: 1 << 20}, shares: "262144"},
		{in: &runtimeapi.LinuxContainerResources{CpuQuota: -1}, quota: "-1"},
		{in: &runtimeapi.LinuxContainerResources{CpuPeriod: 50000}, period: "50000"},
	} {
		lr, err := LinuxResources(tt.in)
		if err != nil || lr.CPU == nil {
			t.Fatalf("%v: %+v %v", tt.in, lr, err)
		}
		str := func(p any) string {
			switch v := p.(type) {
			case *uint64:
				if v != nil {
					return fmt.Sprint(*v)
				}
			case *int64:
				if v != nil {
					return fmt.Sprint(*v)
				}
			}
			return ""
		}
		if str(lr.CPU.Shares) != tt.shares || str(lr.CPU.Quota) != tt.quota || str(lr.CPU.Period) != tt.period || lr.Memory != nil {
			t.Errorf("%v: cpu %s/%s/%s", tt.in, str(lr.CPU.Shares), str(lr.CPU.Quota), str(lr.CPU.Period))
		}
	}
	// SetLimits keeps the devices and replaces the limits.
	s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Access: "rwm"}}
	SetLimits(s, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: got.Memory.Limit}})
	if s.Linux.Resources.CPU != nil || s.Linux.Resources.HugepageLimits != nil || s.Linux.Resources.Memory == nil || len(s.Linux.Resources.Devices) != 1 {
		t.Errorf("after SetLimits: %+v", s.Linux.Resources)
	}
	for _, bad := range []*runtimeapi.LinuxContainerResources{
		{HugepageLimits: []*runtimeapi.HugepageLimit{{Limit: 1}}},
		{Unified: map[string]string{"../memory.max": "1"}},
		{MemoryLimitInBytes: -1},
		{CpuPeriod: -1},
	} {
		if _, err := apply(t, withResources(bad)); !wantErr(t, err, errdefs.ErrInvalid) {
			t.Errorf("%v accepted", bad)
		}
	}
}
