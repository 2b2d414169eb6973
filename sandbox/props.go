package sandbox

import (
	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Kernel and systemd limits used in the conversions below (runc's systemd
// driver uses the same ones).
const (
	minShares       = 2
	maxShares       = 262144
	quotaRoundUSec  = 10000 // systemd rounds CPUQuotaPerSecUSec to 10 ms
	defaultShmBytes = 64 << 20
)

// sharesToWeight maps cgroup v1 cpu.shares to systemd's CPUWeight the way
// the kubelet and runc do, so both sides agree on the slice's weight.
func sharesToWeight(shares int64) uint64 {
	if shares < minShares {
		shares = minShares
	}
	if shares > maxShares {
		shares = maxShares
	}
	return uint64(1 + ((shares-2)*9999)/262142)
}

// resourceProperties converts pod-level resources into slice properties.
// Pure: nil or empty resources give no properties.
func resourceProperties(r *runtimeapi.LinuxContainerResources) []systemd.Property {
	if r == nil {
		return nil
	}
	var props []systemd.Property
	if r.CpuShares > 0 {
		props = append(props, prop("CPUWeight", sharesToWeight(r.CpuShares)))
	}
	if r.CpuQuota > 0 {
		period := r.CpuPeriod
		if period <= 0 {
			period = 100000
		}
		perSec := uint64(r.CpuQuota) * 1000000 / uint64(period)
		if rem := perSec % quotaRoundUSec; rem != 0 {
			perSec += quotaRoundUSec - rem
		}
		props = append(props, prop("CPUQuotaPerSecUSec", perSec))
		if r.CpuPeriod > 0 {
			props = append(props, prop("CPUQuotaPeriodUSec", uint64(r.CpuPeriod)))
		}
	}
	if r.MemoryLimitInBytes > 0 {
		props = append(props, prop("MemoryMax", uint64(r.MemoryLimitInBytes)))
	}
	return props
}

// sliceProperties are the properties of a slice podunit creates.
func sliceProperties(desc string, r *runtimeapi.LinuxContainerResources) []systemd.Property {
	return append([]systemd.Property{sd.PropDescription(desc)}, resourceProperties(r)...)
}

// podLimits are the limits of a slice podunit owns: the sum of the
// containers' resources (CRI "resources") plus the RuntimeClass's pod
// overhead, as the kubelet sizes the pod cgroups it owns. A limit the
// containers do not set stays unset: overhead alone limits nothing. Pure;
// the inputs are not changed.
func podLimits(r, overhead *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	if r == nil {
		return nil
	}
	out := &runtimeapi.LinuxContainerResources{
		CpuShares:          r.CpuShares,
		CpuQuota:           r.CpuQuota,
		CpuPeriod:          r.CpuPeriod,
		MemoryLimitInBytes: r.MemoryLimitInBytes,
	}
	if overhead == nil {
		return out
	}
	if out.CpuShares > 0 {
		out.CpuShares += overhead.CpuShares
	}
	if out.CpuQuota > 0 && overhead.CpuQuota > 0 {
		// the overhead's quota in the containers' period
		op := overhead.CpuPeriod
		if op <= 0 {
			op = 100000
		}
		p := out.CpuPeriod
		if p <= 0 {
			p = 100000
		}
		out.CpuQuota += overhead.CpuQuota * p / op
	}
	if out.MemoryLimitInBytes > 0 {
		out.MemoryLimitInBytes += overhead.MemoryLimitInBytes
	}
	return out
}

// initProperties describe the unit holding a pod's shared PID namespace.
// systemd 252 cannot give a service its own PID namespace (PrivatePIDs=
// came in 257), so the command itself must create it (unshare --pid
// --fork) and the init runs as PID 1 inside.
func initProperties(desc, slice string, argv []string) []systemd.Property {
	return []systemd.Property{
		sd.PropDescription(desc),
		sd.PropSlice(slice),
		sd.PropExecStart(argv, false),
		sd.PropType("simple"),
		// A dead init must not linger as a failed unit (unit leaks
		// broke other systemd-based runtimes at scale).
		prop("CollectMode", "inactive-or-failed"),
		prop("KillMode", "control-group"),
		// The init holds nothing worth a graceful stop, and a SIGTERM that
		// arrives before catatonit has installed its handlers is dropped
		// (a namespace init ignores unhandled signals from outside), which
		// cost a full stop timeout. Containers are stopped before it.
		prop("KillSignal", int32(9)),
	}
}

// nsenter joins the pod's user namespace for the init of a shared PID
// namespace: a PID namespace belongs to the user namespace of its
// creator, and a container in the pod's user namespace can mount /proc
// only for a PID namespace its user namespace owns.
const nsenter = "/usr/bin/nsenter"

// initCommand is the pod init's command line: podInit, inside the pod's
// user namespace when it has one (userNS, a pinned namespace file).
func initCommand(podInit []string, userNS string) []string {
	if userNS == "" {
		return podInit
	}
	return append([]string{nsenter, "--user=" + userNS, "--"}, podInit...)
}

func prop(name string, v any) systemd.Property {
	return systemd.Property{Name: name, Value: godbus.MakeVariant(v)}
}
