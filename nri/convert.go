package nri

import (
	"maps"

	api "github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/sandbox"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podSandbox is how plugins see a pod.
func podSandbox(sb *sandbox.Sandbox) *api.PodSandbox {
	md := sb.Config.GetMetadata()
	p := &api.PodSandbox{
		Id:             sb.ID,
		Name:           md.GetName(),
		Uid:            md.GetUid(),
		Namespace:      md.GetNamespace(),
		Labels:         maps.Clone(sb.Config.GetLabels()),
		Annotations:    maps.Clone(sb.Config.GetAnnotations()),
		RuntimeHandler: sb.RuntimeHandler,
		Ips:            append([]string(nil), sb.IPs...),
		Linux: &api.LinuxPodSandbox{
			CgroupParent: sb.CgroupParent,
			CgroupsPath:  sb.CgroupParent,
			PodOverhead:  criToNRI(sb.Config.GetLinux().GetOverhead()),
			PodResources: criToNRI(sb.Config.GetLinux().GetResources()),
			Resources:    criToNRI(sb.Config.GetLinux().GetResources()),
		},
	}
	for _, ns := range []struct {
		typ, path string
	}{{"network", sb.NetNSPath}, {"ipc", sb.IPCNSPath}, {"uts", sb.UTSNSPath}, {"pid", sb.PIDNSPath}} {
		if ns.path != "" {
			p.Linux.Namespaces = append(p.Linux.Namespaces, &api.LinuxNamespace{Type: ns.typ, Path: ns.path})
		}
	}
	return p
}

var nriState = map[container.State]api.ContainerState{
	container.StateCreated: api.ContainerState_CONTAINER_CREATED,
	container.StateRunning: api.ContainerState_CONTAINER_RUNNING,
	container.StateExited:  api.ContainerState_CONTAINER_STOPPED,
}

// nriContainer is how plugins see a container. spec, when there is one
// (at create), gives the full picture: command, environment, mounts,
// hooks, devices; otherwise they come from the CRI config.
func nriContainer(c *container.Info, spec *specs.Spec) *api.Container {
	cfg := c.Config
	out := &api.Container{
		Id:            c.ID,
		PodSandboxId:  c.PodID,
		Name:          c.Name,
		State:         nriState[c.State],
		Labels:        maps.Clone(cfg.GetLabels()),
		Annotations:   maps.Clone(cfg.GetAnnotations()),
		Pid:           c.Pid,
		CreatedAt:     c.CreatedAt,
		StartedAt:     c.StartedAt,
		FinishedAt:    c.FinishedAt,
		ExitCode:      c.ExitCode,
		StatusReason:  c.Reason,
		StatusMessage: c.Message,
		Linux: &api.LinuxContainer{
			Resources:   criToNRI(c.Resources),
			CgroupsPath: c.CgroupsPath,
		},
	}
	if v := c.Resources.GetOomScoreAdj(); v != 0 {
		out.Linux.OomScoreAdj = api.Int(v)
	}
	for _, d := range cfg.GetCDIDevices() {
		out.CDIDevices = append(out.CDIDevices, &api.CDIDevice{Name: d.GetName()})
	}
	if spec == nil {
		out.Args = append(append([]string(nil), cfg.GetCommand()...), cfg.GetArgs()...)
		for _, kv := range cfg.GetEnvs() {
			out.Env = append(out.Env, kv.GetKey()+"="+string(kv.GetValue()))
		}
		return out
	}
	if spec.Annotations != nil {
		out.Annotations = maps.Clone(spec.Annotations)
	}
	out.Mounts = api.FromOCIMounts(spec.Mounts)
	out.Hooks = api.FromOCIHooks(spec.Hooks)
	if p := spec.Process; p != nil {
		out.Args = append([]string(nil), p.Args...)
		out.Env = append([]string(nil), p.Env...)
		for _, l := range p.Rlimits {
			out.Rlimits = append(out.Rlimits, &api.POSIXRlimit{Type: l.Type, Hard: l.Hard, Soft: l.Soft})
		}
		if p.OOMScoreAdj != nil {
			out.Linux.OomScoreAdj = api.Int(*p.OOMScoreAdj)
		}
		out.User = &api.User{Uid: p.User.UID, Gid: p.User.GID, AdditionalGids: append([]uint32(nil), p.User.AdditionalGids...)}
	}
	if l := spec.Linux; l != nil {
		out.Linux.Namespaces = api.FromOCILinuxNamespaces(l.Namespaces)
		out.Linux.Devices = api.FromOCILinuxDevices(l.Devices)
		out.Linux.Sysctl = maps.Clone(l.Sysctl)
		out.Linux.CgroupsPath = l.CgroupsPath
		if l.Seccomp != nil {
			out.Linux.SeccompPolicy = api.FromOCILinuxSeccomp(l.Seccomp)
		}
	}
	return out
}

// criToNRI is CRI resources as NRI's (OCI-like) resources; nil for none.
func criToNRI(r *runtimeapi.LinuxContainerResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	out := &api.LinuxResources{
		Memory: &api.LinuxMemory{},
		Cpu:    &api.LinuxCPU{Cpus: r.GetCpusetCpus(), Mems: r.GetCpusetMems()},
	}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		out.Memory.Limit = api.Int64(v)
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		out.Memory.Swap = api.Int64(v)
	}
	if v := r.GetCpuShares(); v != 0 {
		out.Cpu.Shares = api.UInt64(uint64(v))
	}
	if v := r.GetCpuQuota(); v != 0 {
		out.Cpu.Quota = api.Int64(v)
	}
	if v := r.GetCpuPeriod(); v != 0 {
		out.Cpu.Period = api.UInt64(uint64(v))
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, &api.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	out.Unified = maps.Clone(r.GetUnified())
	return out
}
