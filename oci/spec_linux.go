package oci

import (
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// withNamespaces joins the pod's pinned namespaces or the host's. UTS follows
// the network: the kubelet gives a host-network pod the node's hostname.
func withNamespaces(o *runtimeapi.NamespaceOption, p PodNamespaces, cgroupNS bool) SpecOpt {
	return func(s *specs.Spec) error {
		ns := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
		join := func(t specs.LinuxNamespaceType, p string) error {
			if p != "" && (!path.IsAbs(p) || hasDotDot(p)) {
				return invalid("namespaces", "%s namespace path %q must be absolute without ..", t, p)
			}
			ns = append(ns, specs.LinuxNamespace{Type: t, Path: p})
			return nil
		}
		hostNet := o.GetNetwork() == runtimeapi.NamespaceMode_NODE
		if !hostNet {
			if err := join(specs.NetworkNamespace, p.NetworkPath); err != nil {
				return err
			}
			if err := join(specs.UTSNamespace, p.UTSPath); err != nil {
				return err
			}
		}
		if o.GetIpc() != runtimeapi.NamespaceMode_NODE {
			if err := join(specs.IPCNamespace, p.IPCPath); err != nil {
				return err
			}
		}
		switch o.GetPid() {
		case runtimeapi.NamespaceMode_NODE:
		case runtimeapi.NamespaceMode_CONTAINER:
			ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace})
		case runtimeapi.NamespaceMode_TARGET:
			if p.PIDPath == "" {
				return invalid("namespace_options.pid", "TARGET %q needs the target's PID namespace path", o.GetTargetId())
			}
			if err := join(specs.PIDNamespace, p.PIDPath); err != nil {
				return err
			}
		default:
			if err := join(specs.PIDNamespace, p.PIDPath); err != nil {
				return err
			}
		}
		if cgroupNS {
			ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
		}
		linux(s).Namespaces = ns
		return nil
	}
}

// withHostname sets the hostname only in a UTS namespace of the container's
// own; a joined pod namespace already has it, the host's must not change.
func withHostname(h string) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Linux == nil {
			return nil
		}
		for _, n := range s.Linux.Namespaces {
			if n.Type == specs.UTSNamespace && n.Path == "" {
				s.Hostname = h
			}
		}
		return nil
	}
}

// withUserNamespace: userns mode POD joins the pod's user namespace at
// joinPath (podunit pins one per pod, created with the pod's mappings) or,
// with no path, has the runtime create one with those mappings. The
// mappings go into the spec either way: the runtime idmaps mounts with
// them.
func withUserNamespace(u *runtimeapi.UserNamespace, joinPath string) SpecOpt {
	return func(s *specs.Spec) error {
		uids, gids, err := UserNamespaceMappings(u)
		if err != nil || uids == nil {
			return err
		}
		if joinPath != "" && (!path.IsAbs(joinPath) || hasDotDot(joinPath)) {
			return invalid("namespaces", "user namespace path %q must be absolute without ..", joinPath)
		}
		l := linux(s)
		l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: joinPath})
		l.UIDMappings, l.GIDMappings = uids, gids
		return nil
	}
}

// UserNamespaceMappings validates a pod's userns_options and returns its
// ID mappings; nil ones for the host's user namespace (no options, or mode
// NODE). Like containerd and CRI-O, podunit takes one contiguous mapping
// per kind that maps container ID 0: the kubelet allocates exactly that,
// and an idmapped mount takes the same single range. The CRI's CONTAINER
// and TARGET modes have no defined semantics for user namespaces.
func UserNamespaceMappings(u *runtimeapi.UserNamespace) (uids, gids []specs.LinuxIDMapping, err error) {
	if u == nil {
		return nil, nil, nil
	}
	switch u.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.GetUids()) > 0 || len(u.GetGids()) > 0 {
			return nil, nil, invalid("userns_options", "mode NODE takes no ID mappings")
		}
		return nil, nil, nil
	case runtimeapi.NamespaceMode_POD:
	default:
		return nil, nil, invalid("userns_options.mode", "%v is not supported (POD or NODE)", u.GetMode())
	}
	if uids, err = userNSMappings("uids", u.GetUids()); err != nil {
		return nil, nil, err
	}
	if gids, err = userNSMappings("gids", u.GetGids()); err != nil {
		return nil, nil, err
	}
	return uids, gids, nil
}

func userNSMappings(field string, m []*runtimeapi.IDMapping) ([]specs.LinuxIDMapping, error) {
	if len(m) != 1 {
		return nil, invalid("userns_options."+field, "want exactly one mapping, got %d", len(m))
	}
	if m[0].GetContainerId() != 0 || m[0].GetLength() == 0 {
		return nil, invalid("userns_options."+field, "the mapping must start at container ID 0 and be non-empty")
	}
	// The kernel refuses a range past the 32-bit ID space; (uid_t)-1 is
	// "no ID" and cannot be mapped either.
	if uint64(m[0].GetHostId())+uint64(m[0].GetLength()) > math.MaxUint32 {
		return nil, invalid("userns_options."+field, "host IDs %d+%d run past %d", m[0].GetHostId(), m[0].GetLength(), uint32(math.MaxUint32-1))
	}
	return []specs.LinuxIDMapping{idMap(m[0])}, nil
}

// withSysctls applies the pod's sysctls, allowing only namespaced ones and
// only when that namespace is not the host's.
func withSysctls(sysctls map[string]string) SpecOpt {
	return func(s *specs.Spec) error {
		if len(sysctls) == 0 {
			return nil
		}
		own := map[string]bool{}
		if s.Linux != nil {
			for _, n := range s.Linux.Namespaces {
				own[string(n.Type)] = true
			}
		}
		for _, k := range slices.Sorted(maps.Keys(sysctls)) {
			dotted := strings.ReplaceAll(k, "/", ".")
			ns := ""
			for _, p := range namespacedSysctlPrefixes {
				if strings.HasPrefix(dotted, p.prefix) {
					ns = p.ns
					break
				}
			}
			if ns == "" {
				return invalid("sysctls", "%q is not namespaced", k)
			}
			if !own[ns] {
				return invalid("sysctls", "%q would change the host: the pod uses the host %s namespace", k, ns)
			}
		}
		linux(s).Sysctl = maps.Clone(sysctls)
		return nil
	}
}

// withResources writes the container's limits into linux.resources, which
// the runtime applies to the container's own cgroup (<unit>/container) at
// create: the container reads its limits from its own /sys/fs/cgroup. The
// unit above carries the same limits as systemd properties; the subtree
// below a Delegate=yes unit is the runtime's to write (docs/containers.md
// "Resources").
func withResources(r *runtimeapi.LinuxContainerResources) SpecOpt {
	return func(s *specs.Spec) error {
		lr, err := LinuxResources(r)
		if err != nil {
			return err
		}
		if lr == nil {
			return nil
		}
		SetLimits(s, lr)
		return nil
	}
}

// Bounds of cpu.shares (the kernel clamps, and runc fails when the value
// it reads back differs from the one it wrote).
const (
	minCPUShares = 2
	maxCPUShares = 262144
)

// LinuxResources maps CRI container resources onto the OCI spec's as the
// kubelet sent them (runc converts shares to cpu.weight and quota/period to
// cpu.max on cgroup v2 itself). Zero means "not set" in CRI and sets
// nothing; nil when nothing is set. Swap stays with the unit (MemorySwapMax
// on v2; v1 hosts usually have no swap accounting, where runc would fail on
// memory.memsw.*). Cpusets go to the container's cgroup too: on cgroup v1
// systemd has no cpuset property, so the runtime's write is the only pin.
func LinuxResources(r *runtimeapi.LinuxContainerResources) (*specs.LinuxResources, error) {
	if r.GetMemoryLimitInBytes() < 0 || r.GetCpuShares() < 0 || r.GetCpuPeriod() < 0 {
		return nil, invalid("resources", "negative memory limit, cpu shares or cpu period")
	}
	var lr specs.LinuxResources
	set := false
	if m := r.GetMemoryLimitInBytes(); m > 0 {
		lr.Memory = &specs.LinuxMemory{Limit: &m}
		set = true
	}
	var cpu specs.LinuxCPU
	if sh := r.GetCpuShares(); sh > 0 {
		v := uint64(min(max(sh, minCPUShares), maxCPUShares))
		cpu.Shares = &v
	}
	if q := r.GetCpuQuota(); q != 0 {
		cpu.Quota = &q
	}
	if p := r.GetCpuPeriod(); p > 0 {
		v := uint64(p)
		cpu.Period = &v
	}
	for _, cs := range []struct{ field, v string }{{"cpuset_cpus", r.GetCpusetCpus()}, {"cpuset_mems", r.GetCpusetMems()}} {
		if cs.v != "" && !validCPUList(cs.v) {
			return nil, invalid("resources."+cs.field, "%q is not a list like 0-3,7", cs.v)
		}
	}
	cpu.Cpus, cpu.Mems = r.GetCpusetCpus(), r.GetCpusetMems()
	if cpu.Shares != nil || cpu.Quota != nil || cpu.Period != nil || cpu.Cpus != "" || cpu.Mems != "" {
		lr.CPU = &cpu
		set = true
	}
	for _, h := range r.GetHugepageLimits() {
		if h.GetPageSize() == "" {
			return nil, invalid("resources.hugepage_limits", "empty page size")
		}
		lr.HugepageLimits = append(lr.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: h.GetPageSize(), Limit: h.GetLimit()})
		set = true
	}
	for k := range r.GetUnified() {
		if k == "" || strings.Contains(k, "/") || hasDotDot(k) {
			return nil, invalid("resources.unified", "invalid cgroup file name %q", k)
		}
	}
	if len(r.GetUnified()) > 0 {
		lr.Unified = maps.Clone(r.GetUnified())
		set = true
	}
	if !set {
		return nil, nil
	}
	return &lr, nil
}

// validCPUList reports whether s is a kernel cpu/node list ("0-3,7"):
// the runtime writes it to cpuset files as is.
func validCPUList(s string) bool {
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return false
		}
		if isRange {
			b, err := strconv.ParseUint(hi, 10, 16)
			if err != nil || b < a {
				return false
			}
		}
	}
	return true
}

// SetLimits replaces the spec's memory, CPU, hugetlb and unified limits
// with lr's (devices and the rest of linux.resources stay): at create, and
// when a created container's limits change before it starts.
func SetLimits(s *specs.Spec, lr *specs.LinuxResources) {
	if lr == nil {
		lr = &specs.LinuxResources{}
	}
	res := resources(s)
	res.Memory, res.CPU, res.HugepageLimits, res.Unified = lr.Memory, lr.CPU, lr.HugepageLimits, lr.Unified
}
