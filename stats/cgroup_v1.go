package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/podunit/podunit/errdefs"
)

// trackingControllers are the v1 hierarchies systemd itself creates a
// unit's cgroup in; the first one that exists tells whether the unit's
// cgroup exists at all.
var trackingControllers = []string{"name=systemd", "memory", "pids"}

func (r *Reader) v1Dir(ctrl, path string) string {
	mp := r.v1[ctrl]
	if mp == "" {
		return ""
	}
	return filepath.Join(mp, path)
}

func (r *Reader) readV1(path string) (*CgroupStats, error) {
	found := false
	for _, c := range trackingControllers {
		if d := r.v1Dir(c, path); d != "" {
			if _, err := os.Stat(d); err == nil {
				found = true
				break
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("cgroup %s: %w", path, errdefs.ErrNotFound)
	}
	st := &CgroupStats{Time: r.now()}
	cpu, err := r.v1CPU(path)
	if err != nil {
		return nil, err
	}
	st.CPU = cpu
	if d := r.v1Dir("memory", path); d != "" {
		files, err := readV1MemoryFiles(d)
		if err != nil {
			return nil, err
		}
		st.Memory, st.Swap = V1Memory(files)
	}
	if d := r.v1Dir("pids", path); d != "" {
		p, err := readPids(d)
		if err != nil {
			return nil, err
		}
		st.Pids = p
	}
	return st, nil
}

// v1CPU reads cpuacct.usage. systemd only creates unit cgroups in a
// "cpu,cpuacct" hierarchy; where cpu and cpuacct are mounted separately
// (these test hosts) the cpuacct directory exists only because runc put the
// container's own cgroup below the unit's. Without it, CPU time is summed
// from the schedstat of the unit's current tasks: exact for live tasks,
// blind to exited ones.
func (r *Reader) v1CPU(path string) (*CPUStats, error) {
	if d := r.v1Dir("cpuacct", path); d != "" {
		u, ok, err := optional(filepath.Join(d, "cpuacct.usage"), ParseUint)
		if err != nil {
			return nil, err
		}
		if ok {
			return &CPUStats{UsageNanos: u}, nil
		}
	}
	for _, c := range trackingControllers {
		d := r.v1Dir(c, path)
		if d == "" {
			continue
		}
		u, err := r.schedstatSum(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &CPUStats{UsageNanos: u}, nil
	}
	return nil, nil
}

func (r *Reader) schedstatSum(dir string) (uint64, error) {
	var sum uint64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // child cgroup removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		procs, err := readString(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, pid := range strings.Fields(procs) {
			sum += r.processCPU(pid)
		}
		return nil
	})
	return sum, err
}

// processCPU sums the CPU time of all threads of pid; a process that exits
// meanwhile counts as zero.
func (r *Reader) processCPU(pid string) uint64 {
	tasks, err := os.ReadDir(filepath.Join(r.procRoot, pid, "task"))
	if err != nil {
		return 0
	}
	var sum uint64
	for _, t := range tasks {
		s, err := readString(filepath.Join(r.procRoot, pid, "task", t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if n, err := ParseSchedstat(s); err == nil {
			sum += n
		}
	}
	return sum
}

// V1MemoryFiles are the raw contents of a v1 memory cgroup's files; empty
// strings stand for absent files.
type V1MemoryFiles struct {
	Usage, Limit, Stat, MemswUsage, MemswLimit, OOMControl string
}

func readV1MemoryFiles(dir string) (V1MemoryFiles, error) {
	var f V1MemoryFiles
	err := readFiles(dir, map[string]*string{
		"memory.usage_in_bytes": &f.Usage, "memory.limit_in_bytes": &f.Limit, "memory.stat": &f.Stat,
		"memory.memsw.usage_in_bytes": &f.MemswUsage, "memory.memsw.limit_in_bytes": &f.MemswLimit,
		"memory.oom_control": &f.OOMControl,
	})
	return f, err
}

// V1Memory computes memory and swap statistics from v1 files. The total_*
// counters of memory.stat include child cgroups (runc's container cgroup
// sits below the unit's), so they are preferred over the local ones.
func V1Memory(f V1MemoryFiles) (*MemoryStats, *SwapStats) {
	if f.Usage == "" {
		return nil, nil
	}
	usage, err := ParseUint(f.Usage)
	if err != nil {
		return nil, nil
	}
	m := &MemoryStats{Usage: usage}
	if f.Limit != "" {
		m.Limit, _ = ParseLimit(f.Limit)
	}
	m.WorkingSet = usage
	if stat, err := ParseFlatKeyed(f.Stat); err == nil {
		get := func(k string) uint64 {
			if v, ok := stat["total_"+k]; ok {
				return v
			}
			return stat[k]
		}
		m.WorkingSet = workingSet(usage, get("inactive_file"))
		m.RSS = get("rss")
		m.PageFaults = get("pgfault")
		m.MajorPageFaults = get("pgmajfault")
	}
	if oc, err := ParseFlatKeyed(f.OOMControl); err == nil {
		m.OOMKills = oc["oom_kill"]
	}
	m.Available = available(m.Limit, m.WorkingSet)
	var sw *SwapStats
	if f.MemswUsage != "" {
		if total, err := ParseUint(f.MemswUsage); err == nil {
			sw = &SwapStats{}
			if total > usage {
				sw.Usage = total - usage
			}
			if f.MemswLimit != "" {
				if tl, err := ParseLimit(f.MemswLimit); err == nil && tl > 0 {
					// memsw limits memory+swap together; what is left of
					// it is what swap could still take.
					sw.Available = available(tl, total)
					if tl > m.Limit && m.Limit > 0 {
						sw.Limit = tl - m.Limit
					}
				}
			}
		}
	}
	return m, sw
}
