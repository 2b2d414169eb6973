package stats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Extended is what the cAdvisor-style CRI metrics need beyond CgroupStats.
// Zero values mean "not available" as much as "zero": the metrics layer
// reports them either way so label sets stay stable.
type Extended struct {
	CgroupStats

	CPUUserNanos, CPUSystemNanos    uint64
	CFSPeriods, CFSThrottledPeriods uint64
	CFSThrottledNanos               uint64
	// Spec values: CPU period (µs), shares (v2 weight converted), and
	// swap limit (0 = unlimited).
	CPUPeriodUsec uint64
	CPUShares     uint64
	SwapLimit     uint64

	MemoryCache, MemoryMappedFile, MemoryKernel uint64
	MemoryMaxUsage, MemoryFailcnt               uint64
	// MemoryFailures are pgfault/pgmajfault counts of this cgroup's
	// subtree ("hierarchy") and of the cgroup alone ("container").
	PgFaultHierarchy, PgMajFaultHierarchy uint64
	PgFaultContainer, PgMajFaultContainer uint64

	Processes, Threads, FileDescriptors, Sockets uint64
	ThreadsMax                                   uint64
}

// ReadExtended is Read plus the counters that only metrics need. It costs
// a walk over the cgroup's processes in /proc, so it is meant for the
// kubelet's metrics scrape, not for every stats call.
func (r *Reader) ReadExtended(key, path string) (*Extended, error) {
	base, err := r.Read(key, path)
	if err != nil {
		return nil, err
	}
	x := &Extended{CgroupStats: *base}
	if x.Pids != nil {
		x.ThreadsMax = x.Pids.Limit
	}
	if x.Swap != nil {
		x.SwapLimit = x.Swap.Limit
	}
	var procDir string
	if r.v2Root != "" {
		dir := filepath.Join(r.v2Root, path)
		procDir = dir
		r.extendedV2(dir, x)
	} else {
		r.extendedV1(path, x)
		for _, c := range trackingControllers {
			if d := r.v1Dir(c, path); d != "" {
				if _, err := os.Stat(d); err == nil {
					procDir = d
					break
				}
			}
		}
	}
	if procDir != "" {
		r.countProcesses(procDir, x)
	}
	return x, nil
}

func keyed(p string) map[string]uint64 {
	m, _ := optionalKeyed(p)
	return m
}

func single(p string, parse func(string) (uint64, error)) uint64 {
	v, _, _ := optional(p, parse)
	return v
}

func (r *Reader) extendedV2(dir string, x *Extended) {
	cpu := keyed(filepath.Join(dir, "cpu.stat"))
	x.CPUUserNanos = cpu["user_usec"] * 1000
	x.CPUSystemNanos = cpu["system_usec"] * 1000
	x.CFSPeriods = cpu["nr_periods"]
	x.CFSThrottledPeriods = cpu["nr_throttled"]
	x.CFSThrottledNanos = cpu["throttled_usec"] * 1000
	if s, err := readString(filepath.Join(dir, "cpu.max")); err == nil {
		if _, p, err := ParseCPUMax(s); err == nil {
			x.CPUPeriodUsec = p
		}
	}
	x.CPUShares = WeightToShares(single(filepath.Join(dir, "cpu.weight"), ParseUint))
	mem := keyed(filepath.Join(dir, "memory.stat"))
	x.MemoryCache = mem["file"]
	x.MemoryMappedFile = mem["file_mapped"]
	x.MemoryKernel = mem["kernel"]
	if x.MemoryKernel == 0 {
		// Kernels before 5.18 have no "kernel" key; these are its parts.
		x.MemoryKernel = mem["kernel_stack"] + mem["pagetables"] + mem["slab"] + mem["sock"] + mem["vmalloc"] + mem["percpu"]
	}
	x.MemoryMaxUsage = single(filepath.Join(dir, "memory.peak"), ParseUint)
	x.MemoryFailcnt = keyed(filepath.Join(dir, "memory.events"))["max"]
	x.PgFaultHierarchy, x.PgMajFaultHierarchy = mem["pgfault"], mem["pgmajfault"]
	// v2 has no per-cgroup-only fault counters; a unit's processes live in
	// its own cgroup or runc's child, so the subtree is the container.
	x.PgFaultContainer, x.PgMajFaultContainer = mem["pgfault"], mem["pgmajfault"]
}

func (r *Reader) extendedV1(path string, x *Extended) {
	if d := r.v1Dir("cpuacct", path); d != "" {
		if s, err := readString(filepath.Join(d, "cpuacct.stat")); err == nil {
			x.CPUUserNanos, x.CPUSystemNanos, _ = ParseCPUAcctStat(s)
		}
	}
	if d := r.v1Dir("cpu", path); d != "" {
		cpu := keyed(filepath.Join(d, "cpu.stat"))
		x.CFSPeriods = cpu["nr_periods"]
		x.CFSThrottledPeriods = cpu["nr_throttled"]
		x.CFSThrottledNanos = cpu["throttled_time"]
		x.CPUPeriodUsec = single(filepath.Join(d, "cpu.cfs_period_us"), ParseUint)
		x.CPUShares = single(filepath.Join(d, "cpu.shares"), ParseUint)
	}
	if d := r.v1Dir("memory", path); d != "" {
		mem := keyed(filepath.Join(d, "memory.stat"))
		x.MemoryCache = mem["total_cache"]
		x.MemoryMappedFile = mem["total_mapped_file"]
		x.MemoryKernel = single(filepath.Join(d, "memory.kmem.usage_in_bytes"), ParseUint)
		x.MemoryMaxUsage = single(filepath.Join(d, "memory.max_usage_in_bytes"), ParseUint)
		x.MemoryFailcnt = single(filepath.Join(d, "memory.failcnt"), ParseUint)
		x.PgFaultHierarchy, x.PgMajFaultHierarchy = mem["total_pgfault"], mem["total_pgmajfault"]
		x.PgFaultContainer, x.PgMajFaultContainer = mem["pgfault"], mem["pgmajfault"]
		if tl := single(filepath.Join(d, "memory.memsw.limit_in_bytes"), ParseLimit); tl > 0 && x.Memory != nil && tl > x.Memory.Limit {
			x.SwapLimit = tl - x.Memory.Limit
		}
		if k, _, err := r.OOMCount(path); err == nil && x.Memory != nil {
			x.Memory.OOMKills = k // v1 counts in the victim's (child) cgroup
		}
	}
}

// countProcesses walks dir's subtree and counts processes, threads, open
// files and sockets through /proc. Processes that exit meanwhile are
// skipped.
func (r *Reader) countProcesses(dir string, x *Extended) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != dir {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		procs, err := readString(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, pid := range strings.Fields(procs) {
			tasks, err := os.ReadDir(filepath.Join(r.procRoot, pid, "task"))
			if err != nil {
				continue
			}
			x.Processes++
			x.Threads += uint64(len(tasks))
			fdDir := filepath.Join(r.procRoot, pid, "fd")
			fds, err := os.ReadDir(fdDir)
			if err != nil {
				continue
			}
			x.FileDescriptors += uint64(len(fds))
			for _, fd := range fds {
				if l, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
					x.Sockets++
				}
			}
		}
		return nil
	})
}
