// Package stats reads resource usage of podunit's units from their cgroups
// (v1 hybrid and v2 unified hierarchies) and of pods' network namespaces.
package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/podunit/podunit/errdefs"
	"golang.org/x/sys/unix"
)

// CgroupStats is one reading of a cgroup. A nil part means the controller
// is not available for that cgroup (e.g. no pids hierarchy).
type CgroupStats struct {
	Time   time.Time
	CPU    *CPUStats
	Memory *MemoryStats
	Swap   *SwapStats
	Pids   *PidsStats
	// Pressure is read on cgroup v2 only: v1 has no per-cgroup PSI, and
	// consumers must see "unknown" there, not "no pressure".
	Pressure Pressure
}

// Pressure is a cgroup's pressure stall information. Each part is nil when
// the kernel does not provide it for this cgroup.
type Pressure struct {
	CPU, Memory, IO *PSIStats
}

// CPUStats is cumulative CPU time plus the rate since the previous reading
// of the same key.
type CPUStats struct {
	UsageNanos uint64
	// NanoCores is the average usage in billionths of a core between the
	// previous Read of the same key and this one; nil on the first read.
	NanoCores *uint64
}

// MemoryStats follows cAdvisor's definitions so kubelet eviction sees the
// numbers it expects: the working set excludes inactive file pages.
type MemoryStats struct {
	Usage           uint64
	WorkingSet      uint64
	RSS             uint64
	PageFaults      uint64
	MajorPageFaults uint64
	// Limit is 0 when the cgroup has no memory limit.
	Limit uint64
	// Available is Limit - WorkingSet, nil when unlimited.
	Available *uint64
	// OOMKills counted for this cgroup (v2: subtree; v1: this cgroup only).
	OOMKills uint64
}

// SwapStats is swap used by the cgroup.
type SwapStats struct {
	Usage uint64
	// Limit is 0 when unlimited; Available is nil then.
	Limit     uint64
	Available *uint64
}

// PidsStats counts the cgroup's tasks.
type PidsStats struct {
	Current uint64
	Limit   uint64 // 0 when unlimited
}

// Reader reads cgroup statistics. It remembers the last CPU sample per key
// to compute NanoCores; call Forget when a container or pod goes away.
type Reader struct {
	v2Root   string            // unified mount; set only in v2 mode
	v1       map[string]string // controller -> mount point in v1/hybrid mode
	procRoot string
	now      func() time.Time

	mu   sync.Mutex
	last map[string]cpuSample
}

type cpuSample struct {
	t     time.Time
	usage uint64
}

// ReaderOptions describe the hierarchy layout; the zero value is not
// useful, use NewReader for the running host.
type ReaderOptions struct {
	// V2Root, when set, selects cgroup v2: the unified hierarchy's mount.
	V2Root string
	// V1Mounts maps v1 controllers (memory, cpuacct, cpu, pids, and
	// name=systemd) to their mount points.
	V1Mounts map[string]string
	// ProcRoot is /proc; used for the v1 CPU fallback.
	ProcRoot string
	Now      func() time.Time
}

// NewReaderWith builds a Reader for an explicit layout (tests, fixtures).
func NewReaderWith(o ReaderOptions) *Reader {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Reader{v2Root: o.V2Root, v1: o.V1Mounts, procRoot: o.ProcRoot, now: o.Now, last: map[string]cpuSample{}}
}

// cgroup2SuperMagic is CGROUP2_SUPER_MAGIC from linux/magic.h.
const cgroup2SuperMagic = 0x63677270

// NewReader detects the host's layout: /sys/fs/cgroup being a cgroup2 mount
// means v2; otherwise the v1 controllers are located through mountinfo
// (cpu and cpuacct may be separate hierarchies, as on the test hosts).
func NewReader() (*Reader, error) {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return nil, fmt.Errorf("statfs /sys/fs/cgroup: %v: %w", err, errdefs.ErrUnavailable)
	}
	if st.Type == cgroup2SuperMagic {
		return NewReaderWith(ReaderOptions{V2Root: "/sys/fs/cgroup"}), nil
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	v1, _, err := ParseCgroupMounts(string(mi))
	if err != nil {
		return nil, err
	}
	if v1["memory"] == "" {
		return nil, fmt.Errorf("no cgroup v1 memory hierarchy and /sys/fs/cgroup is not cgroup2: %w", errdefs.ErrUnavailable)
	}
	return NewReaderWith(ReaderOptions{V1Mounts: v1}), nil
}

// Version is 2 on a unified host, 1 on legacy/hybrid hosts.
func (r *Reader) Version() int {
	if r.v2Root != "" {
		return 2
	}
	return 1
}

// Forget drops the CPU sample of key.
func (r *Reader) Forget(key string) {
	r.mu.Lock()
	delete(r.last, key)
	r.mu.Unlock()
}

// Keep drops the CPU samples of every key for which keep returns false, so
// samples of containers removed behind podunit's back do not pile up.
func (r *Reader) Keep(keep func(key string) bool) {
	r.mu.Lock()
	for k := range r.last {
		if !keep(k) {
			delete(r.last, k)
		}
	}
	r.mu.Unlock()
}

// Read returns the statistics of the cgroup at path (as systemd names it,
// e.g. "/podunit.slice/podunit-pod-x.slice/podunit-c.service"). key
// identifies the sample for NanoCores; empty key skips rate tracking.
// ErrNotFound if the cgroup does not exist (unit stopped and collected).
func (r *Reader) Read(key, path string) (*CgroupStats, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	var (
		st  *CgroupStats
		err error
	)
	if r.v2Root != "" {
		st, err = r.readV2(path)
	} else {
		st, err = r.readV1(path)
	}
	if err != nil {
		return nil, err
	}
	if st.CPU != nil && key != "" {
		st.CPU.NanoCores = r.rate(key, st.Time, st.CPU.UsageNanos)
	}
	return st, nil
}

func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") || filepath.Clean(p) != p || strings.Contains(p, "/../") {
		return fmt.Errorf("cgroup path %q must be absolute and clean: %w", p, errdefs.ErrInvalid)
	}
	return nil
}

func (r *Reader) rate(key string, t time.Time, usage uint64) *uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, ok := r.last[key]
	r.last[key] = cpuSample{t: t, usage: usage}
	if !ok {
		return nil
	}
	return NanoCores(prev.t, prev.usage, t, usage)
}

// NanoCores is the average CPU rate between two cumulative samples, nil
// when the interval is empty or the counter went backwards (a new cgroup
// under the same key).
func NanoCores(t0 time.Time, u0 uint64, t1 time.Time, u1 uint64) *uint64 {
	dt := t1.Sub(t0)
	if dt <= 0 || u1 < u0 {
		return nil
	}
	v := uint64(float64(u1-u0) / float64(dt.Nanoseconds()) * 1e9)
	return &v
}

func readString(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func exists(p string) error {
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cgroup %s: %w", p, errdefs.ErrNotFound)
		}
		return fmt.Errorf("cgroup %s: %w", p, err)
	}
	return nil
}

// optional reads a file that a kernel or configuration may not provide.
func optional(p string, parse func(string) (uint64, error)) (uint64, bool, error) {
	s, err := readString(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	v, err := parse(s)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", p, err)
	}
	return v, true, nil
}

func optionalKeyed(p string) (map[string]uint64, error) {
	s, err := readString(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, err := ParseFlatKeyed(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}

func (r *Reader) readV2(path string) (*CgroupStats, error) {
	dir := filepath.Join(r.v2Root, path)
	if err := exists(dir); err != nil {
		return nil, err
	}
	st := &CgroupStats{Time: r.now()}
	cpu, err := optionalKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return nil, err
	}
	if u, ok := cpu["usage_usec"]; ok {
		st.CPU = &CPUStats{UsageNanos: u * 1000}
	}
	files, err := readV2MemoryFiles(dir)
	if err != nil {
		return nil, err
	}
	st.Memory, st.Swap = V2Memory(files)
	pids, err := readPids(dir)
	if err != nil {
		return nil, err
	}
	st.Pids = pids
	st.Pressure, err = readPressure(dir)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// readPressure reads a v2 cgroup's *.pressure files. They are core cgroup
// files, present whether or not a controller is enabled, except where PSI
// is off: a kernel without CONFIG_PSI, psi=0 or cgroup.pressure=0 (files
// not created or hidden since Linux 5.15/6.1), or psi=0 before 5.15 (reads
// fail with EOPNOTSUPP). Those leave the part nil. A malformed file is
// treated the same way, as V2Memory treats malformed memory files: a
// kernel format surprise must not cost the kubelet every other figure.
func readPressure(dir string) (Pressure, error) {
	var p Pressure
	for name, dst := range map[string]**PSIStats{"cpu.pressure": &p.CPU, "memory.pressure": &p.Memory, "io.pressure": &p.IO} {
		s, err := readString(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EOPNOTSUPP) {
			continue
		}
		if err != nil {
			return Pressure{}, fmt.Errorf("cgroup pressure: %w", err)
		}
		if ps, err := ParsePressure(s); err == nil {
			*dst = ps
		}
	}
	return p, nil
}

// V2MemoryFiles are the raw contents of a v2 cgroup's memory files; empty
// strings stand for files that are absent.
type V2MemoryFiles struct {
	Current, Max, Stat, Events, SwapCurrent, SwapMax string
}

func readV2MemoryFiles(dir string) (V2MemoryFiles, error) {
	var f V2MemoryFiles
	err := readFiles(dir, map[string]*string{
		"memory.current": &f.Current, "memory.max": &f.Max, "memory.stat": &f.Stat,
		"memory.events": &f.Events, "memory.swap.current": &f.SwapCurrent, "memory.swap.max": &f.SwapMax,
	})
	return f, err
}

// readFiles reads each named file of dir into its string; a missing file
// (a controller or option the kernel lacks) leaves it empty.
func readFiles(dir string, files map[string]*string) error {
	for name, dst := range files {
		s, err := readString(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		*dst = s
	}
	return nil
}

// V2Memory computes memory and swap statistics from v2 files. Malformed
// files leave the affected part nil rather than failing the whole reading.
func V2Memory(f V2MemoryFiles) (*MemoryStats, *SwapStats) {
	if f.Current == "" {
		return nil, nil
	}
	usage, err := ParseUint(f.Current)
	if err != nil {
		return nil, nil
	}
	m := &MemoryStats{Usage: usage}
	if f.Max != "" {
		m.Limit, _ = ParseLimit(f.Max)
	}
	if stat, err := ParseFlatKeyed(f.Stat); err == nil {
		m.WorkingSet = workingSet(usage, stat["inactive_file"])
		m.RSS = stat["anon"]
		m.PageFaults = stat["pgfault"]
		m.MajorPageFaults = stat["pgmajfault"]
	} else {
		m.WorkingSet = usage
	}
	if ev, err := ParseFlatKeyed(f.Events); err == nil {
		m.OOMKills = ev["oom_kill"]
	}
	m.Available = available(m.Limit, m.WorkingSet)
	var sw *SwapStats
	if f.SwapCurrent != "" {
		if u, err := ParseUint(f.SwapCurrent); err == nil {
			sw = &SwapStats{Usage: u}
			if f.SwapMax != "" {
				sw.Limit, _ = ParseLimit(f.SwapMax)
			}
			sw.Available = available(sw.Limit, u)
		}
	}
	return m, sw
}

func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile < usage {
		return usage - inactiveFile
	}
	return 0
}

func available(limit, used uint64) *uint64 {
	if limit == 0 {
		return nil
	}
	var v uint64
	if limit > used {
		v = limit - used
	}
	return &v
}

func readPids(dir string) (*PidsStats, error) {
	cur, ok, err := optional(filepath.Join(dir, "pids.current"), ParseUint)
	if err != nil || !ok {
		return nil, err
	}
	p := &PidsStats{Current: cur}
	if lim, ok, err := optional(filepath.Join(dir, "pids.max"), ParseLimit); err == nil && ok {
		p.Limit = lim
	}
	return p, nil
}
