package unitprops

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Bounds of cgroup knobs, as the kernel and systemd define them.
const (
	minShares = 2
	maxShares = 262144
	minWeight = 1
	maxWeight = 10000
)

// DefaultCFSPeriod is the kernel's cpu.cfs_period_us default (µs): what a
// quota without a period is relative to.
const DefaultCFSPeriod = 100000

// SharesToWeight converts cgroup v1 cpu.shares to a v2 cpu.weight with the
// same formula runc and the kubelet use, so weights agree across runtimes.
func SharesToWeight(shares int64) uint64 {
	if shares <= 0 {
		return 0
	}
	if shares < minShares {
		shares = minShares
	}
	if shares > maxShares {
		shares = maxShares
	}
	return uint64(1 + ((shares-minShares)*(maxWeight-minWeight))/(maxShares-minShares))
}

// ResourceProperties maps CRI container resources onto unit properties.
// Zero values mean "not set" (CRI has no other way to say so) and produce
// no property; UpdateResources therefore cannot lift a limit by sending 0,
// exactly as with containerd. On cgroup v1 the v1 names are used where
// systemd's v2 translation would lose precision (CPUShares vs CPUWeight).
func ResourceProperties(r *runtimeapi.LinuxContainerResources, caps Caps) ([]systemd.Property, error) {
	if r == nil {
		return nil, nil
	}
	var props []systemd.Property
	if r.MemoryLimitInBytes < 0 || r.CpuShares < 0 || r.CpuPeriod < 0 {
		return nil, fmt.Errorf("negative resource value: %w", errdefs.ErrInvalid)
	}
	if r.MemoryLimitInBytes > 0 {
		props = append(props, prop("MemoryMax", uint64(r.MemoryLimitInBytes)))
		// Swap is only separately controllable on v2; CRI gives memory+swap.
		if caps.CgroupV2 && r.MemorySwapLimitInBytes > 0 {
			swap := uint64(0)
			if r.MemorySwapLimitInBytes > r.MemoryLimitInBytes {
				swap = uint64(r.MemorySwapLimitInBytes - r.MemoryLimitInBytes)
			}
			props = append(props, prop("MemorySwapMax", swap))
		}
	}
	if r.CpuShares > 0 {
		if caps.CgroupV2 {
			props = append(props, prop("CPUWeight", SharesToWeight(r.CpuShares)))
		} else {
			// systemd maps CPUWeight to shares as weight*1024/100, which
			// turns the kubelet's 1024 into 399; CPUShares is exact.
			s := r.CpuShares
			if s < minShares {
				s = minShares
			}
			if s > maxShares {
				s = maxShares
			}
			props = append(props, prop("CPUShares", uint64(s)))
		}
	}
	if r.CpuQuota != 0 || r.CpuPeriod != 0 {
		period := uint64(r.CpuPeriod)
		if period == 0 {
			period = DefaultCFSPeriod
		}
		if caps.SystemdVersion >= 242 && r.CpuPeriod != 0 {
			props = append(props, prop("CPUQuotaPeriodUSec", period))
		}
		if r.CpuQuota != 0 {
			props = append(props, prop("CPUQuotaPerSecUSec", quotaPerSec(r.CpuQuota, period)))
		}
	}
	if caps.CgroupV2 && caps.SystemdVersion >= 244 {
		// systemd ignores these on v1; setting them there only looks like
		// the limit was applied.
		if r.CpusetCpus != "" {
			b, err := RangeToBits(r.CpusetCpus)
			if err != nil {
				return nil, fmt.Errorf("cpuset_cpus: %w", err)
			}
			props = append(props, prop("AllowedCPUs", b))
		}
		if r.CpusetMems != "" {
			b, err := RangeToBits(r.CpusetMems)
			if err != nil {
				return nil, fmt.Errorf("cpuset_mems: %w", err)
			}
			props = append(props, prop("AllowedMemoryNodes", b))
		}
	}
	if caps.CgroupV2 {
		up, err := unifiedProperties(r.Unified)
		if err != nil {
			return nil, err
		}
		props = append(props, up...)
	}
	return props, nil
}

// unifiedKeys are the cgroup v2 files of CRI's `unified` that a unit
// property sets; systemd writes them to the unit's cgroup. The kubelet
// sends memory.swap.max (swap behaviour) and, with MemoryQoS,
// memory.min/memory.high here.
var unifiedKeys = map[string]string{
	"memory.min":      "MemoryMin",
	"memory.low":      "MemoryLow",
	"memory.high":     "MemoryHigh",
	"memory.max":      "MemoryMax",
	"memory.swap.max": "MemorySwapMax",
	"pids.max":        "TasksMax",
	"cpu.weight":      "CPUWeight",
}

// UnifiedUnitKey reports whether a unit property carries the unified key.
func UnifiedUnitKey(key string) bool { _, ok := unifiedKeys[key]; return ok }

// OOMGroupKey is the unified key the kubelet sets on cgroup v2 unless
// singleProcessOOMKill: an OOM kill takes the whole container. systemd has
// no cgroup property for it but writes it for OOMPolicy=kill, which can
// only be given when the unit is created (OOMPolicy).
const OOMGroupKey = "memory.oom.group"

// OOMPolicy maps a unified memory.oom.group value onto systemd's
// OOMPolicy=: "1" is kill (memory.oom.group=1, and systemd stops the unit
// with result oom-kill), "0" continue (the unit default with Delegate=).
func OOMPolicy(value string) (string, error) {
	switch strings.TrimSpace(value) {
	case "1":
		return "kill", nil
	case "0":
		return "continue", nil
	}
	return "", fmt.Errorf("unified %s: %q is not 0 or 1: %w", OOMGroupKey, value, errdefs.ErrInvalid)
}

// unifiedProperties maps the unified keys systemd has a property for;
// the others are left to the runtime that writes the container's cgroup.
func unifiedProperties(unified map[string]string) ([]systemd.Property, error) {
	keys := make([]string, 0, len(unified))
	for k := range unified {
		if _, ok := unifiedKeys[k]; ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // a stable property order
	var props []systemd.Property
	for _, k := range keys {
		v := strings.TrimSpace(unified[k])
		var n uint64
		switch {
		case v == "max" && k != "cpu.weight":
			n = math.MaxUint64
		default:
			var err error
			if strings.HasPrefix(k, "memory.") {
				n, err = memparse(v)
			} else {
				n, err = strconv.ParseUint(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("unified %s: %q is not a number or \"max\": %w", k, unified[k], errdefs.ErrInvalid)
			}
			if k == "cpu.weight" && (n < minWeight || n > maxWeight) {
				return nil, fmt.Errorf("unified cpu.weight: %d is outside %d-%d: %w", n, minWeight, maxWeight, errdefs.ErrInvalid)
			}
		}
		props = append(props, prop(unifiedKeys[k], n))
	}
	return props, nil
}

// memparse reads a byte count as the kernel's memory.* files do: a number
// with an optional binary suffix K, M, G, T (either case).
func memparse(v string) (uint64, error) {
	shift := 0
	if v != "" {
		switch v[len(v)-1] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		case 't', 'T':
			shift = 40
		}
	}
	if shift > 0 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > math.MaxUint64>>shift {
		return 0, fmt.Errorf("%s: too large", v)
	}
	return n << shift, nil
}

// PidsProperty limits the number of tasks; CRI carries it per pod, the
// kubelet's podPidsLimit, but a container may get one from annotations.
func PidsProperty(limit int64) systemd.Property {
	if limit <= 0 {
		return prop("TasksMax", uint64(math.MaxUint64))
	}
	return prop("TasksMax", uint64(limit))
}

// quotaPerSec converts a CFS quota per period into systemd's per-second
// quota. systemd stores it as a whole percentage (10 ms per second), so a
// fraction is rounded up, never down: the container must get at least what
// it asked for. A negative quota means unlimited.
func quotaPerSec(quota int64, period uint64) uint64 {
	if quota < 0 {
		return math.MaxUint64
	}
	us := uint64(quota) * 1000000 / period
	if us%10000 != 0 {
		us = (us/10000 + 1) * 10000
	}
	return us
}

// RangeToBits turns a cpuset list ("0-3,7") into the little-endian byte
// mask systemd's AllowedCPUs= expects over D-Bus.
func RangeToBits(s string) ([]byte, error) {
	var bits big.Int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		start, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("cpuset %q: %w", s, errdefs.ErrInvalid)
		}
		end := start
		if isRange {
			if end, err = strconv.ParseUint(hi, 10, 16); err != nil || end < start {
				return nil, fmt.Errorf("cpuset %q: %w", s, errdefs.ErrInvalid)
			}
		}
		for i := start; i <= end; i++ {
			bits.SetBit(&bits, int(i), 1)
		}
	}
	be := bits.Bytes()
	if len(be) == 0 {
		return nil, fmt.Errorf("empty cpuset %q: %w", s, errdefs.ErrInvalid)
	}
	le := make([]byte, len(be))
	for i, b := range be {
		le[len(be)-1-i] = b
	}
	return le, nil
}

// SplitStartLimits takes the CPU quota and the memory limit out of a
// unit's start properties, to be set once the start job is done, for a
// runtime that limits the container's own cgroup from its spec at create
// (so the workload is limited from its first instruction either way).
// Everything that runs in the unit before the container's init execs (the
// ExecStart wrapper, the OCI runtime's create and start) is charged to the
// unit's cgroup: under a 100m quota it ran at a tenth of a CPU, which on a
// slow node made the start job outlast its timeout, and a container that
// allocates past its memory limit at once had the OOM killer pick
// `runc start` (then the start failed instead of the container ending
// OOMKilled).
func SplitStartLimits(props []systemd.Property) (start, after []systemd.Property) {
	for _, p := range props {
		switch p.Name {
		case "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec", "MemoryMax":
			after = append(after, p)
		default:
			start = append(start, p)
		}
	}
	return start, after
}
