package nri

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	api "github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrUnsupported marks an adjustment or update podunit cannot apply. The
// create (or update) fails with it rather than run the container without
// what a plugin asked for.
var ErrUnsupported = fmt.Errorf("not supported by podunit: %w", errdefs.ErrPrecondition)

func unsupported(what string) error {
	return fmt.Errorf("NRI %s: %w", what, ErrUnsupported)
}

// adjustRequest is what applying one container's adjustment needs.
type adjustRequest struct {
	spec *specs.Spec
	// res are the container's CRI resources before the adjustment.
	res *runtimeapi.LinuxContainerResources
	adj *api.ContainerAdjustment
	// cdi resolves adjust.CDIDevices; nil when CDI is disabled.
	cdi oci.CDIInjector
}

// applyAdjustment applies the plugins' combined adjustment to a container
// being created: to its OCI spec in place, and to its CRI resources, which
// it returns (the unit's limits and ContainerStatus come from those). The
// spec's limits are rewritten from the returned resources by the caller.
// Whatever podunit cannot apply is an error naming it.
func applyAdjustment(r adjustRequest) (*runtimeapi.LinuxContainerResources, error) {
	adj, s := r.adj, r.spec
	res := cloneResources(r.res)
	if adj == nil {
		return res, nil
	}
	if s.Process == nil {
		s.Process = &specs.Process{}
	}
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	adjustAnnotations(s, adj.GetAnnotations())
	adjustMounts(s, adj.GetMounts())
	adjustEnv(s, adj.GetEnv())
	if args := adj.GetArgs(); len(args) > 0 {
		// A leading "" is UpdateArgs: replace without claiming ownership.
		if args[0] == "" {
			args = args[1:]
		}
		if len(args) == 0 {
			return nil, fmt.Errorf("NRI adjustment: empty command line: %w", errdefs.ErrInvalid)
		}
		s.Process.Args = slices.Clone(args)
	}
	adjustHooks(s, adj.GetHooks())
	if err := adjustRlimits(s, adj.GetRlimits()); err != nil {
		return nil, err
	}
	if cdi := adj.GetCDIDevices(); len(cdi) > 0 {
		if r.cdi == nil {
			return nil, fmt.Errorf("NRI CDI devices (%s): CDI is disabled (cdi.enabled = false): %w", cdiNames(cdi), ErrUnsupported)
		}
		if err := r.cdi.InjectDevices(s, cdiNames(cdi)...); err != nil {
			return nil, fmt.Errorf("NRI CDI devices: %w", err)
		}
	}
	l := adj.GetLinux()
	if l == nil {
		return res, nil
	}
	if err := adjustDevices(s, l.GetDevices()); err != nil {
		return nil, err
	}
	var err error
	if res, err = overlayResources(res, l.GetResources()); err != nil {
		return nil, err
	}
	if p := l.GetCgroupsPath(); p != "" && p != s.Linux.CgroupsPath {
		// The container's cgroup is its unit's (podunit-ctr-<id>.service).
		return nil, unsupported("cgroups path " + p + ": the container's cgroup is its systemd unit's")
	}
	if o := l.GetOomScoreAdj(); o != nil {
		v := int(o.GetValue())
		s.Process.OOMScoreAdj = &v
		res.OomScoreAdj = int64(v)
	}
	if l.GetIoPriority() != nil {
		return nil, unsupported("I/O priority")
	}
	if sc := l.GetSeccompPolicy(); sc != nil {
		s.Linux.Seccomp = seccompToOCI(sc)
	}
	if err := adjustNamespaces(s, l.GetNamespaces()); err != nil {
		return nil, err
	}
	adjustSysctls(s, l.GetSysctl())
	switch {
	case len(l.GetNetDevices()) > 0:
		return nil, unsupported("network devices")
	case l.GetScheduler() != nil:
		return nil, unsupported("scheduler")
	case rdtSet(l.GetRdt()):
		return nil, unsupported("RDT")
	case l.GetMemoryPolicy() != nil:
		return nil, unsupported("memory policy")
	}
	return res, nil
}

// rdtSet: the NRI library hands an empty RDT adjustment to every create
// a plugin adjusts; and removing RDT settings podunit never makes is moot.
func rdtSet(r *api.LinuxRdt) bool {
	return r.GetClosId() != nil || r.GetSchemata() != nil || r.GetEnableMonitoring() != nil
}

func cdiNames(ds []*api.CDIDevice) []string {
	names := make([]string, 0, len(ds))
	for _, d := range ds {
		names = append(names, d.GetName())
	}
	return names
}

func adjustAnnotations(s *specs.Spec, an map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(an)) {
		if key, ok := api.IsMarkedForRemoval(k); ok {
			delete(s.Annotations, key)
			continue
		}
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = an[k]
	}
}

// adjustMounts removes the mounts marked for removal and those an added
// one replaces (same destination), adds the new ones, and orders them so a
// mount never lands below one that would hide it.
func adjustMounts(s *specs.Spec, ms []*api.Mount) {
	if len(ms) == 0 {
		return
	}
	drop := map[string]bool{}
	var add []specs.Mount
	for _, m := range ms {
		if dst, ok := m.IsMarkedForRemoval(); ok {
			drop[filepath.Clean(dst)] = true
			continue
		}
		drop[filepath.Clean(m.GetDestination())] = true
		add = append(add, m.ToOCI(nil))
	}
	s.Mounts = slices.DeleteFunc(s.Mounts, func(m specs.Mount) bool { return drop[filepath.Clean(m.Destination)] })
	s.Mounts = append(s.Mounts, add...)
	sort.SliceStable(s.Mounts, func(i, j int) bool { return depth(s.Mounts[i].Destination) < depth(s.Mounts[j].Destination) })
}

func depth(p string) int {
	p = filepath.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

func adjustEnv(s *specs.Spec, env []*api.KeyValue) {
	for _, kv := range env {
		key, remove := kv.IsMarkedForRemoval()
		s.Process.Env = slices.DeleteFunc(s.Process.Env, func(e string) bool {
			k, _, _ := strings.Cut(e, "=")
			return k == key
		})
		if !remove {
			s.Process.Env = append(s.Process.Env, kv.ToOCI())
		}
	}
}

func adjustHooks(s *specs.Spec, h *api.Hooks) {
	if h == nil {
		return
	}
	add := func(dst *[]specs.Hook, src []*api.Hook) {
		for _, x := range src {
			*dst = append(*dst, x.ToOCI())
		}
	}
	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	add(&s.Hooks.Prestart, h.GetPrestart())
	add(&s.Hooks.CreateRuntime, h.GetCreateRuntime())
	add(&s.Hooks.CreateContainer, h.GetCreateContainer())
	add(&s.Hooks.StartContainer, h.GetStartContainer())
	add(&s.Hooks.Poststart, h.GetPoststart())
	add(&s.Hooks.Poststop, h.GetPoststop())
	hs := s.Hooks
	if len(hs.Prestart)+len(hs.CreateRuntime)+len(hs.CreateContainer)+len(hs.StartContainer)+len(hs.Poststart)+len(hs.Poststop) == 0 {
		s.Hooks = nil
	}
}

func adjustRlimits(s *specs.Spec, rl []*api.POSIXRlimit) error {
	for _, l := range rl {
		if !strings.HasPrefix(l.GetType(), "RLIMIT_") {
			return fmt.Errorf("NRI rlimit %q: not an RLIMIT_* type: %w", l.GetType(), errdefs.ErrInvalid)
		}
		if l.GetSoft() > l.GetHard() {
			return fmt.Errorf("NRI rlimit %s: soft limit %d above hard limit %d: %w", l.GetType(), l.GetSoft(), l.GetHard(), errdefs.ErrInvalid)
		}
		s.Process.Rlimits = slices.DeleteFunc(s.Process.Rlimits, func(x specs.POSIXRlimit) bool { return x.Type == l.GetType() })
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: l.GetType(), Hard: l.GetHard(), Soft: l.GetSoft()})
	}
	return nil
}

// adjustDevices adds device nodes, each with the cgroup rule that lets
// the container use it, and removes those marked for removal (node and
// rule).
func adjustDevices(s *specs.Spec, ds []*api.LinuxDevice) error {
	for _, d := range ds {
		path, remove := d.IsMarkedForRemoval()
		var old *specs.LinuxDevice
		if i := slices.IndexFunc(s.Linux.Devices, func(x specs.LinuxDevice) bool { return x.Path == path }); i >= 0 {
			o := s.Linux.Devices[i]
			old = &o
			s.Linux.Devices = slices.Delete(s.Linux.Devices, i, i+1)
		}
		if old != nil && s.Linux.Resources != nil {
			s.Linux.Resources.Devices = slices.DeleteFunc(s.Linux.Resources.Devices, func(r specs.LinuxDeviceCgroup) bool {
				return r.Allow && r.Type == old.Type && ptrIs(r.Major, old.Major) && ptrIs(r.Minor, old.Minor)
			})
		}
		if remove {
			continue
		}
		if !filepath.IsAbs(d.GetPath()) || !strings.HasPrefix(filepath.Clean(d.GetPath()), "/dev/") {
			return fmt.Errorf("NRI device %q: must be a path below /dev: %w", d.GetPath(), errdefs.ErrInvalid)
		}
		switch d.GetType() {
		case "c", "b", "u", "p":
		default:
			return fmt.Errorf("NRI device %s: type %q is not c, b, u or p: %w", d.GetPath(), d.GetType(), errdefs.ErrInvalid)
		}
		od := d.ToOCI()
		s.Linux.Devices = append(s.Linux.Devices, od)
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		major, minor := od.Major, od.Minor
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
			Allow: true, Type: od.Type, Major: &major, Minor: &minor, Access: d.AccessString(),
		})
	}
	return nil
}

func ptrIs(p *int64, v int64) bool { return p != nil && *p == v }

func adjustNamespaces(s *specs.Spec, ns []*api.LinuxNamespace) error {
	for _, n := range ns {
		typ, remove := n.IsMarkedForRemoval()
		t := specs.LinuxNamespaceType(typ)
		switch t {
		case specs.PIDNamespace, specs.NetworkNamespace, specs.MountNamespace, specs.IPCNamespace,
			specs.UTSNamespace, specs.UserNamespace, specs.CgroupNamespace, specs.TimeNamespace:
		default:
			return fmt.Errorf("NRI namespace type %q: %w", typ, errdefs.ErrInvalid)
		}
		s.Linux.Namespaces = slices.DeleteFunc(s.Linux.Namespaces, func(x specs.LinuxNamespace) bool { return x.Type == t })
		if !remove {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: t, Path: n.GetPath()})
		}
	}
	return nil
}

func adjustSysctls(s *specs.Spec, sc map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(sc)) {
		if key, ok := api.IsMarkedForRemoval(k); ok {
			delete(s.Linux.Sysctl, key)
			continue
		}
		if s.Linux.Sysctl == nil {
			s.Linux.Sysctl = map[string]string{}
		}
		s.Linux.Sysctl[k] = sc[k]
	}
}

func seccompToOCI(sc *api.LinuxSeccomp) *specs.LinuxSeccomp {
	o := &specs.LinuxSeccomp{
		DefaultAction:    specs.LinuxSeccompAction(sc.GetDefaultAction()),
		ListenerPath:     sc.GetListenerPath(),
		ListenerMetadata: sc.GetListenerMetadata(),
		Syscalls:         api.ToOCILinuxSyscalls(sc.GetSyscalls()),
	}
	if e := sc.GetDefaultErrno(); e != nil {
		v := uint(e.GetValue())
		o.DefaultErrnoRet = &v
	}
	for _, a := range sc.GetArchitectures() {
		o.Architectures = append(o.Architectures, specs.Arch(a))
	}
	for _, f := range sc.GetFlags() {
		o.Flags = append(o.Flags, specs.LinuxSeccompFlag(f))
	}
	return o
}

// overlayResources returns cur with the fields r sets replaced: the
// limits podunit carries as CRI resources (its unit properties, the
// runtime's cgroup, ContainerStatus). Any other limit is refused.
func overlayResources(cur *runtimeapi.LinuxContainerResources, r *api.LinuxResources) (*runtimeapi.LinuxContainerResources, error) {
	out := cloneResources(cur)
	if r == nil {
		return out, nil
	}
	var errs []error
	if m := r.GetMemory(); m != nil {
		if v := m.GetLimit(); v != nil {
			out.MemoryLimitInBytes = v.GetValue()
		}
		if v := m.GetSwap(); v != nil {
			out.MemorySwapLimitInBytes = v.GetValue()
		}
		for name, set := range map[string]bool{
			"memory reservation": m.GetReservation() != nil, "kernel memory limit": m.GetKernel() != nil,
			"kernel TCP memory limit": m.GetKernelTcp() != nil, "memory swappiness": m.GetSwappiness() != nil,
			"disabling the OOM killer": m.GetDisableOomKiller() != nil, "memory use_hierarchy": m.GetUseHierarchy() != nil,
		} {
			if set {
				errs = append(errs, unsupported(name))
			}
		}
	}
	if c := r.GetCpu(); c != nil {
		if v := c.GetShares(); v != nil {
			out.CpuShares = int64(v.GetValue())
		}
		if v := c.GetQuota(); v != nil {
			out.CpuQuota = v.GetValue()
		}
		if v := c.GetPeriod(); v != nil {
			out.CpuPeriod = int64(v.GetValue())
		}
		if c.GetCpus() != "" {
			out.CpusetCpus = c.GetCpus()
		}
		if c.GetMems() != "" {
			out.CpusetMems = c.GetMems()
		}
		if c.GetRealtimeRuntime() != nil || c.GetRealtimePeriod() != nil {
			errs = append(errs, unsupported("realtime CPU runtime/period"))
		}
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = slices.DeleteFunc(out.HugepageLimits, func(x *runtimeapi.HugepageLimit) bool { return x.GetPageSize() == h.GetPageSize() })
		out.HugepageLimits = append(out.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	for _, k := range slices.Sorted(maps.Keys(r.GetUnified())) {
		if out.Unified == nil {
			out.Unified = map[string]string{}
		}
		out.Unified[k] = r.GetUnified()[k]
	}
	if r.GetBlockioClass() != nil {
		errs = append(errs, unsupported("block I/O class"))
	}
	if r.GetRdtClass() != nil {
		errs = append(errs, unsupported("RDT class"))
	}
	if len(r.GetDevices()) > 0 {
		errs = append(errs, unsupported("device cgroup rules (add devices instead)"))
	}
	if r.GetPids() != nil {
		errs = append(errs, unsupported("pids limit"))
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, errors.Join(errs...)
	}
	if _, err := oci.LinuxResources(out); err != nil {
		return nil, fmt.Errorf("NRI resources: %w", err)
	}
	return out, nil
}

func cloneResources(r *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	if r == nil {
		return &runtimeapi.LinuxContainerResources{}
	}
	out := &runtimeapi.LinuxContainerResources{
		CpuPeriod: r.CpuPeriod, CpuQuota: r.CpuQuota, CpuShares: r.CpuShares,
		MemoryLimitInBytes: r.MemoryLimitInBytes, OomScoreAdj: r.OomScoreAdj,
		CpusetCpus: r.CpusetCpus, CpusetMems: r.CpusetMems,
		MemorySwapLimitInBytes: r.MemorySwapLimitInBytes, Unified: maps.Clone(r.Unified),
	}
	for _, h := range r.HugepageLimits {
		out.HugepageLimits = append(out.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.PageSize, Limit: h.Limit})
	}
	return out
}
