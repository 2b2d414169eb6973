package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The limits every scale container asks for: a daemon-reload must leave them
// as they are, in the unit and in the kernel.
const (
	scaleMemoryLimit = 64 << 20 // bytes
	scaleCPUQuota    = 20000    // µs per scaleCPUPeriod
	scaleCPUPeriod   = 100000
)

// ScaleResult is one run of `cribench scale`: N running containers, a hold
// with daemon-reloads, removal, then a churn series (see cmdScale).
type ScaleResult struct {
	Pods, PerPod, Wanted, Started int
	StoppedBy                     string  `json:",omitempty"` // why fewer than Wanted started ("memory")
	StartSeconds                  float64 // wall time of all starts
	Phases                        map[string]ScalePhase
	// PID 1 RSS (KiB) at the baseline, with every container running, after
	// the removal; mountinfo lines of PID 1 at the same three points
	PID1RSS, PID1Mounts [3]int64
	// the runtime's own mount namespace when it differs from PID 1's (podunit
	// with private_mount_namespace), lines at the same three points
	DaemonMounts [3]int64
	DaemonRSS    int64 // KiB, every container running
	// the hold: daemon-reloads made, their durations (ms), containers checked
	Reloads       int
	ReloadMS      []float64 `json:",omitempty"`
	Checked       int       // containers whose limits and state were read before and after
	LimitsAsAsked int       // of Checked, with the asked memory and CPU limits before the hold
	Changed       []string  `json:",omitempty"` // what the hold changed, one line per difference
	RunningAfter  int       // containers CONTAINER_RUNNING after the hold (CRI)
	Leaks         Leaks     // after the removal, over the baseline
	Timeouts      int       // D-Bus timeouts / deadline errors in the runtime's log, whole run
	TimeoutLines  []string  `json:",omitempty"` // the first few
	Churn         *ChurnResult
	// D-Bus calls to systemd over the whole run, from the runtime's own
	// histogram (podunit only: -metrics)
	DBus []DBusLatency `json:",omitempty"`
}

// ScalePhase is the CPU seconds of PID 1, journald, dbus-daemon and the
// runtime's own processes during one phase.
type ScalePhase struct {
	Seconds                      float64
	PID1, Journald, DBus, Daemon float64
}

// Leaks are what is left over the baseline taken before any container.
type Leaks struct {
	Units, Mounts, Cgroups, Netns int
}

func (l Leaks) Total() int { return l.Units + l.Mounts + l.Cgroups + l.Netns }

// ChurnResult is C create/start/stop/remove cycles of a pod with one container.
type ChurnResult struct {
	Cycles        int
	Seconds       float64
	PID1RSSBefore int64 // KiB
	PID1RSSAfter  int64
	PID1RSSMax    int64
	Leaks         Leaks
}

// Growth is PID 1's RSS growth over the churn, in percent.
func (c *ChurnResult) Growth() float64 {
	if c == nil || c.PID1RSSBefore == 0 {
		return 0
	}
	return float64(c.PID1RSSAfter-c.PID1RSSBefore) * 100 / float64(c.PID1RSSBefore)
}

// scaleEnv reads the harness from the host: its PID 1, the runtime's daemon
// and the systemd inside it.
type scaleEnv struct {
	harness string
	pid1    int
	daemon  daemonSpec
}

// inHarness runs a command in the harness' namespaces, as
// podunit-harness.sh exec does.
func (e scaleEnv) inHarness(args ...string) ([]byte, error) {
	p := strconv.Itoa(e.pid1)
	full := append([]string{"-t", p, "-m", "-u", "-p", "-C", "-r", "-w", "--", "env", "-i",
		"PATH=" + os.Getenv("PATH"), "SYSTEMD_PAGER=", "LANG=C.UTF-8"}, args...)
	cmd := exec.Command("nsenter", full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// daemonPID is the runtime daemon's host PID (not podunit's log relay).
func (e scaleEnv) daemonPID() (int, error) {
	snap, err := snapshot(e.harness)
	if err != nil {
		return 0, err
	}
	for _, p := range snap {
		if p.Comm == e.daemon.Comm && e.daemon.ownProcess(p) {
			return p.PID, nil
		}
	}
	return 0, fmt.Errorf("no %s process in the harness", e.daemon.Comm)
}

// cpuByRole sums utime+stime (s) of PID 1, journald, dbus-daemon and the
// runtime's own processes.
type cpuSample map[procKey]struct {
	role  string
	ticks uint64
}

func (e scaleEnv) cpu() cpuSample {
	out := cpuSample{}
	snap, _ := snapshot(e.harness)
	ticks := cpuTicks(e.harness)
	for k, t := range ticks {
		role := ""
		switch {
		case k.pid == e.pid1:
			role = "pid1"
		case t.comm == "systemd-journal":
			role = "journald"
		case t.comm == "dbus-daemon":
			role = "dbus"
		default:
			if p, ok := snap[k]; ok && e.daemon.ownProcess(p) {
				role = "daemon"
			}
		}
		if role != "" {
			out[k] = struct {
				role  string
				ticks uint64
			}{role, t.ticks}
		}
	}
	return out
}

// phase is the CPU used between two samples by processes alive at both
// (PID 1, journald, dbus and the daemon live through every phase).
func phase(a, b cpuSample, secs float64) ScalePhase {
	p := ScalePhase{Seconds: secs}
	for k, v := range b {
		old, ok := a[k]
		if !ok {
			continue
		}
		s := float64(v.ticks-old.ticks) / 100
		switch v.role {
		case "pid1":
			p.PID1 += s
		case "journald":
			p.Journald += s
		case "dbus":
			p.DBus += s
		case "daemon":
			p.Daemon += s
		}
	}
	return p
}

func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return kibField(b, "VmRSS:")
}

// mountStats counts a mount table's lines and its network namespace pins
// (nsfs mounts of a net namespace: CNI's and podunit's netns pins).
func mountStats(mountinfo []byte) (lines, netns int) {
	for _, l := range strings.Split(string(mountinfo), "\n") {
		if l == "" {
			continue
		}
		lines++
		f := strings.Fields(l)
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		if len(f) < 5 || !strings.HasPrefix(f[3], "net:[") {
			continue
		}
		i := 6
		for i < len(f) && f[i] != "-" {
			i++
		}
		if i+1 < len(f) && f[i+1] == "nsfs" {
			netns++
		}
	}
	return lines, netns
}

// mountCounts reads the mount tables of PID 1 and, when it has its own
// namespace, the daemon: lines and netns pins in both together, and the
// daemon's lines alone (0 when it shares PID 1's namespace).
func (e scaleEnv) mountCounts() (pid1Lines, daemonLines, total, netns int) {
	read := func(pid int) ([]byte, string) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		return b, ns
	}
	b1, ns1 := read(e.pid1)
	pid1Lines, netns = mountStats(b1)
	total = pid1Lines
	if dp, err := e.daemonPID(); err == nil {
		if b, ns := read(dp); ns != "" && ns != ns1 {
			var n int
			daemonLines, n = mountStats(b)
			total += daemonLines
			netns += n
		}
	}
	return pid1Lines, daemonLines, total, netns
}

// cgroupMounts maps each host cgroup hierarchy to its mount point: a v1
// controller (and "name=systemd") to its mount, "" to the cgroup2 mount.
func cgroupMounts(mountinfo []byte) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(string(mountinfo), "\n") {
		f := strings.Fields(l)
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		i := 6
		for i < len(f) && f[i] != "-" {
			i++
		}
		if len(f) < 6 || i+3 >= len(f) {
			continue
		}
		switch f[i+1] {
		case "cgroup2":
			if _, ok := out[""]; !ok {
				out[""] = f[4]
			}
		case "cgroup":
			for _, o := range strings.Split(f[i+3], ",") {
				if _, ok := out[o]; !ok && o != "rw" && o != "ro" {
					out[o] = f[4]
				}
			}
		}
	}
	return out
}

// procCgroups parses /proc/PID/cgroup: hierarchy (controllers joined by
// ",", "" for cgroup2) -> path.
func procCgroups(b []byte) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 {
			out[f[1]] = f[2]
		}
	}
	return out
}

// unitPath cuts a cgroup path after its deepest unit (a .service or .scope
// component): the unit's own cgroup, where systemd writes its limits, and
// the unit's name.
func unitPath(p string) (string, string) {
	parts := strings.Split(p, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if strings.HasSuffix(parts[i], ".service") || strings.HasSuffix(parts[i], ".scope") {
			return strings.Join(parts[:i+1], "/"), parts[i]
		}
	}
	return "", ""
}

// ctrState is what a daemon-reload must not change for one container.
type ctrState struct {
	Unit     string
	Proc     procKey
	MemLimit string // the kernel's memory limit of the unit's cgroup
	CPUQuota string // the kernel's CFS quota (v1) or cpu.max (v2)
	// the same in the process' own cgroup when it lies below the unit's
	// (podunit: <unit>/container, runc's); equal to the above otherwise
	LeafMem, LeafCPU string
	UnitProps        map[string]string
}

var unitProps = []string{"ActiveState", "SubState", "MemoryMax", "MemoryLimit", "CPUQuotaPerSecUSec", "MainPID"}

// containerStates reads every benchmark container's unit and limits.
func (e scaleEnv) containerStates() (map[string]ctrState, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	mounts := cgroupMounts(mi)
	snap, err := snapshot(e.harness)
	if err != nil {
		return nil, err
	}
	out := map[string]ctrState{}
	for k, p := range snap {
		if !p.Container {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PID))
		if err != nil {
			continue
		}
		st := ctrState{Proc: k}
		pc := procCgroups(cg)
		st.MemLimit, st.CPUQuota, st.Unit = readLimits(pc, mounts, true)
		st.LeafMem, st.LeafCPU, _ = readLimits(pc, mounts, false)
		if st.Unit == "" {
			return nil, fmt.Errorf("container process %d: no unit in its cgroup paths %q", p.PID, cg)
		}
		out[st.Unit] = st
	}
	units := sortedKeys(out)
	for i := 0; i < len(units); i += 200 {
		batch := units[i:min(i+200, len(units))]
		b, err := e.inHarness(append([]string{"systemctl", "show", "-p", "Id," + strings.Join(unitProps, ","), "--"}, batch...)...)
		if err != nil {
			return nil, err
		}
		for id, props := range parseShow(b) {
			if st, ok := out[id]; ok {
				st.UnitProps = props
				out[id] = st
			}
		}
	}
	return out, nil
}

// readLimits reads the memory limit and CPU quota of the cgroup of the unit
// a process runs in (atUnit) or of the process' own cgroup (cgroup v1 memory
// and cpu hierarchies, else cgroup2).
func readLimits(cg map[string]string, mounts map[string]string, atUnit bool) (mem, cpu, unit string) {
	read := func(hier, ctrl, file string) string {
		base, unitName := unitPath(cg[hier])
		if unitName == "" {
			return ""
		}
		unit = unitName
		if !atUnit {
			base = cg[hier]
		}
		b, err := os.ReadFile(filepath.Join(mounts[ctrl], base, file))
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	for hier := range cg {
		for _, c := range strings.Split(hier, ",") {
			switch c {
			case "memory":
				mem = read(hier, c, "memory.limit_in_bytes")
			case "cpu":
				cpu = read(hier, c, "cpu.cfs_quota_us")
			}
		}
	}
	if mem == "" {
		mem = read("", "", "memory.max")
	}
	if cpu == "" {
		cpu = read("", "", "cpu.max")
	}
	if unit == "" { // the unit from the systemd hierarchy
		if _, u := unitPath(cg["name=systemd"]); u != "" {
			unit = u
		}
	}
	return mem, cpu, unit
}

// parseShow parses `systemctl show -p Id,... UNIT...`: blocks of KEY=VALUE
// lines separated by blank lines, keyed by Id.
func parseShow(b []byte) map[string]map[string]string {
	out := map[string]map[string]string{}
	cur := map[string]string{}
	flush := func() {
		if id := cur["Id"]; id != "" {
			delete(cur, "Id")
			out[id] = cur
		}
		cur = map[string]string{}
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok {
			cur[k] = v
		}
	}
	flush()
	return out
}

// asAsked reports whether a container's kernel limits are the ones every
// scale container asks for (v1 or v2 notation).
func asAsked(s ctrState) bool {
	memOK := s.MemLimit == strconv.Itoa(scaleMemoryLimit)
	cpuOK := s.CPUQuota == strconv.Itoa(scaleCPUQuota) || s.CPUQuota == fmt.Sprintf("%d %d", scaleCPUQuota, scaleCPUPeriod)
	return memOK && cpuOK
}

// diffStates lists what changed between two readings of the containers:
// a container gone or new, its process, its kernel limits, its unit's
// state and limit properties. MainPID is compared only when it was set.
func diffStates(before, after map[string]ctrState) []string {
	var out []string
	for _, u := range sortedKeys(before) {
		b := before[u]
		a, ok := after[u]
		if !ok {
			out = append(out, u+": gone")
			continue
		}
		if a.Proc != b.Proc {
			out = append(out, fmt.Sprintf("%s: process %d became %d", u, b.Proc.pid, a.Proc.pid))
		}
		if a.MemLimit != b.MemLimit {
			out = append(out, fmt.Sprintf("%s: memory limit %s -> %s", u, b.MemLimit, a.MemLimit))
		}
		if a.CPUQuota != b.CPUQuota {
			out = append(out, fmt.Sprintf("%s: CPU quota %s -> %s", u, b.CPUQuota, a.CPUQuota))
		}
		if a.LeafMem != b.LeafMem || a.LeafCPU != b.LeafCPU {
			out = append(out, fmt.Sprintf("%s: the process' own cgroup's limits %s, %s -> %s, %s", u, b.LeafMem, b.LeafCPU, a.LeafMem, a.LeafCPU))
		}
		for _, k := range unitProps {
			if a.UnitProps[k] != b.UnitProps[k] {
				out = append(out, fmt.Sprintf("%s: %s %s -> %s", u, k, b.UnitProps[k], a.UnitProps[k]))
			}
		}
	}
	for _, u := range sortedKeys(after) {
		if _, ok := before[u]; !ok {
			out = append(out, u+": new")
		}
	}
	return out
}

// benchUnits counts the harness' loaded units in /benchmark.slice and its
// sub-slices (the slice itself not counted): pod slices and container units
// that outlive their pods are leaks.
func (e scaleEnv) benchUnits() (int, error) {
	b, err := e.inHarness("systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager")
	if err != nil {
		return 0, err
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "●" || f[0] == "*") { // a failed or not-found unit's marker
			f = f[1:]
		}
		if len(f) > 0 && f[0] != "benchmark.slice" {
			names = append(names, f[0])
		}
	}
	n := 0
	for i := 0; i < len(names); i += 300 {
		out, err := e.inHarness(append([]string{"systemctl", "show", "-p", "Id,Slice", "--"}, names[i:min(i+300, len(names))]...)...)
		if err != nil {
			return 0, err
		}
		n += countBenchUnits(parseShow(out))
	}
	return n, nil
}

// countBenchUnits counts units whose slice is benchmark.slice or below it.
func countBenchUnits(show map[string]map[string]string) int {
	n := 0
	for id, p := range show {
		s := p["Slice"]
		if id != "benchmark.slice" && (s == "benchmark.slice" || strings.HasPrefix(s, "benchmark-")) {
			n++
		}
	}
	return n
}

// benchCgroups counts the cgroup directories below the harness'
// benchmark.slice in every hierarchy.
func (e scaleEnv) benchCgroups() (int, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	mounts := cgroupMounts(mi)
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", e.pid1))
	if err != nil {
		return 0, err
	}
	n := 0
	for hier, p := range procCgroups(cg) {
		ctrl := strings.Split(hier, ",")[0]
		mp, ok := mounts[ctrl]
		if !ok {
			continue
		}
		// PID 1 of the harness sits in <harness>/init.scope or at its root
		root := strings.TrimSuffix(p, "/init.scope")
		dir := filepath.Join(mp, root, "benchmark.slice")
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && path != dir {
				n++
			}
			return nil
		})
	}
	return n, nil
}

// leakBase is what leak counts are taken against.
type leakBase struct{ units, mounts, cgroups, netns int }

func (e scaleEnv) leakState() (leakBase, error) {
	u, err := e.benchUnits()
	if err != nil {
		return leakBase{}, err
	}
	c, err := e.benchCgroups()
	if err != nil {
		return leakBase{}, err
	}
	_, _, m, n := e.mountCounts()
	return leakBase{u, m, c, n}, nil
}

func leaksOver(base, now leakBase) Leaks {
	pos := func(x int) int { return max(0, x) }
	return Leaks{pos(now.units - base.units), pos(now.mounts - base.mounts), pos(now.cgroups - base.cgroups), pos(now.netns - base.netns)}
}

// timeoutRE matches what a D-Bus call or job wait that ran out of time
// leaves in a runtime's log: Go's context error, a gRPC DeadlineExceeded,
// sd-bus's and godbus' timeouts, a systemd job that timed out.
var timeoutRE = regexp.MustCompile(`(?i)deadline exceeded|DeadlineExceeded|Timeout was reached|org\.freedesktop\.DBus\.Error\.(NoReply|Timeout)|timed out|result "?timeout`)

// countTimeouts counts the log lines that report a timeout and keeps the
// first few.
func countTimeouts(log []byte, keep int) (int, []string) {
	n := 0
	var first []string
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if l := sc.Text(); timeoutRE.MatchString(l) {
			n++
			if len(first) < keep {
				first = append(first, l[:min(len(l), 300)])
			}
		}
	}
	return n, first
}

// scaleConfig is a container of a scale pod: busybox sleep with the limits a
// reload must keep.
func (t *target) scaleConfig(i int) *runtimeapi.ContainerConfig {
	c := t.sleepConfig(i)
	c.Linux.Resources = &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: scaleMemoryLimit, CpuQuota: scaleCPUQuota, CpuPeriod: scaleCPUPeriod}
	return c
}

// memAvailableKiB reads MemAvailable from /proc/meminfo.
func memAvailableKiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	return kibField(b, "MemAvailable:")
}

// cmdScale: N running containers (pods × per-pod), W pod starts in flight;
// then a hold during which `systemctl daemon-reload` runs every second, with
// every container's limits and state read before and after; then removal
// and the leaks over the baseline; then C churn cycles (a pod with one
// container: run, create, start, stop, remove) with PID 1's RSS before and
// after and the leaks again. D-Bus timeouts are counted in the runtime's
// journal over the whole run.
//
//	cribench scale -endpoint E -name podunit -pods 500 -per-pod 2 -harness H -pid1 P -daemon podunit -unit podunit.service -out FILE
func cmdScale(args []string) (retErr error) {
	var t target
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	t.flags(fs)
	pods := fs.Int("pods", 500, "pods")
	perPod := fs.Int("per-pod", 2, "containers per pod")
	inflight := fs.Int("parallel", 4, "pod starts (and removals, churn cycles) in flight")
	hold := fs.Duration("hold", 60*time.Second, "hold with every container running; a daemon-reload every second")
	churn := fs.Int("churn", 10000, "create/start/stop/remove cycles after the removal (0: none)")
	harness := fs.String("harness", "", "the harness' cgroup name")
	pid1 := fs.Int("pid1", 0, "host PID of the harness' systemd")
	daemonFlag := fs.String("daemon", "", "the runtime daemon, COMM[@ARG]")
	unit := fs.String("unit", "", "the runtime's unit in the harness, whose journal is searched for timeouts")
	metricsURL := fs.String("metrics", "", "the runtime's Prometheus endpoint with podunit_dbus_call_duration_seconds (podunit); empty: no D-Bus latency")
	memFloor := fs.Int64("mem-floor", 2<<20, "stop starting pods when the host's MemAvailable falls below this (KiB)")
	fs.Parse(args)
	if *harness == "" || *pid1 == 0 || *unit == "" || *pods < 1 || *perPod < 1 || *inflight < 1 {
		return errors.New("-harness, -pid1, -daemon, -unit are required; -pods, -per-pod, -parallel ≥ 1")
	}
	d, err := parseDaemon(*daemonFlag)
	if err != nil {
		return err
	}
	e := scaleEnv{*harness, *pid1, d}
	ctx := context.Background()
	if err := t.connect(ctx); err != nil {
		return err
	}
	defer func() {
		if err := t.cleanup(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	since := time.Now().Add(-time.Second)
	var dbus0 dbusHistogram
	if *metricsURL != "" {
		if dbus0, err = scrapeDBus(*metricsURL); err != nil {
			return err
		}
	}
	res := ScaleResult{Pods: *pods, PerPod: *perPod, Wanted: *pods * *perPod, Phases: map[string]ScalePhase{}}
	base, err := e.leakState()
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	p1, dm, _, _ := e.mountCounts()
	res.PID1RSS[0], res.PID1Mounts[0], res.DaemonMounts[0] = rssKiB(*pid1), int64(p1), int64(dm)
	fmt.Printf("%-11s scale: baseline PID 1 RSS %d KiB, mountinfo %d (+%d in the runtime's namespace), leaks base %+v\n",
		t.Name, res.PID1RSS[0], p1, dm, base)

	// ---- start
	o := &opTimes{m: map[string][]float64{}}
	var (
		next    atomic.Int64
		started atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
	)
	c0, t0 := e.cpu(), time.Now()
	for range *inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*pods) {
				if stopped.Load() {
					return
				}
				if memAvailableKiB() < *memFloor {
					stopped.Store(true)
					return
				}
				ids, err := t.startPod(ctx, "scale", *perPod, t.scaleConfig, o)
				started.Add(int64(len(ids)))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					stopped.Store(true)
					return
				}
				if n := started.Load(); n%100 == 0 {
					fmt.Printf("%-11s scale: %d running, %.0f s\n", t.Name, n, time.Since(t0).Seconds())
				}
			}
		}()
	}
	wg.Wait()
	res.StartSeconds = time.Since(t0).Seconds()
	res.Phases["start"] = phase(c0, e.cpu(), res.StartSeconds)
	res.Started = int(started.Load())
	if len(errs) > 0 {
		return fmt.Errorf("%d pod starts failed after %d containers, first: %w", len(errs), res.Started, errs[0])
	}
	if res.Started < res.Wanted {
		res.StoppedBy = fmt.Sprintf("host MemAvailable below %d MiB", *memFloor>>10)
	}
	time.Sleep(5 * time.Second)
	p1, dm, _, _ = e.mountCounts()
	res.PID1RSS[1], res.PID1Mounts[1], res.DaemonMounts[1] = rssKiB(*pid1), int64(p1), int64(dm)
	if dp, err := e.daemonPID(); err == nil {
		res.DaemonRSS = rssKiB(dp)
	}
	fmt.Printf("%-11s scale: %d running in %.1f s (%.2f/s); PID 1 CPU %.2f s, RSS %d KiB, mountinfo %d\n", t.Name,
		res.Started, res.StartSeconds, float64(res.Started)/res.StartSeconds, res.Phases["start"].PID1, res.PID1RSS[1], p1)

	// ---- hold: daemon-reload every second
	before, err := e.containerStates()
	if err != nil {
		return fmt.Errorf("container states before the hold: %w", err)
	}
	res.Checked = len(before)
	for _, s := range before {
		if asAsked(s) {
			res.LimitsAsAsked++
		}
	}
	c0, t0 = e.cpu(), time.Now()
	for time.Since(t0) < *hold {
		r0 := time.Now()
		if _, err := e.inHarness("systemctl", "daemon-reload"); err != nil {
			return err
		}
		res.Reloads++
		res.ReloadMS = append(res.ReloadMS, ms(time.Since(r0)))
		if w := time.Second - time.Since(r0); w > 0 {
			time.Sleep(w)
		}
	}
	res.Phases["hold"] = phase(c0, e.cpu(), time.Since(t0).Seconds())
	time.Sleep(2 * time.Second) // the last reload's effects settle
	after, err := e.containerStates()
	if err != nil {
		return fmt.Errorf("container states after the hold: %w", err)
	}
	res.Changed = diffStates(before, after)
	lr, err := t.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil {
		return fmt.Errorf("ListContainers: %w", err)
	}
	res.RunningAfter = len(lr.Containers)
	fmt.Printf("%-11s scale: %d daemon-reloads (p50 %.0f ms, max %.0f ms); %d containers checked, %d with the asked limits, %d differences, %d running\n",
		t.Name, res.Reloads, percentile(res.ReloadMS, 50), percentile(res.ReloadMS, 100), res.Checked, res.LimitsAsAsked, len(res.Changed), res.RunningAfter)

	// ---- removal
	c0, t0 = e.cpu(), time.Now()
	if err := t.cleanup(); err != nil {
		return err
	}
	res.Phases["remove"] = phase(c0, e.cpu(), time.Since(t0).Seconds())
	time.Sleep(5 * time.Second)
	now, err := e.leakState()
	if err != nil {
		return err
	}
	res.Leaks = leaksOver(base, now)
	p1, dm, _, _ = e.mountCounts()
	res.PID1RSS[2], res.PID1Mounts[2], res.DaemonMounts[2] = rssKiB(*pid1), int64(p1), int64(dm)
	fmt.Printf("%-11s scale: removed in %.1f s, PID 1 CPU %.2f s; leaks %+v\n", t.Name, res.Phases["remove"].Seconds, res.Phases["remove"].PID1, res.Leaks)

	// ---- churn
	if *churn > 0 {
		c, err := t.churn(ctx, e, *churn, *inflight, o, base)
		if err != nil {
			return err
		}
		res.Churn = c
	}

	// ---- the runtime's log
	logb, err := e.inHarness("journalctl", "--no-pager", "-o", "cat", "-u", *unit, "--since", fmt.Sprintf("@%d", since.Unix()))
	if err != nil {
		return err
	}
	res.Timeouts, res.TimeoutLines = countTimeouts(logb, 5)
	fmt.Printf("%-11s scale: %d timeout lines in %s's journal\n", t.Name, res.Timeouts, *unit)
	if *metricsURL != "" {
		dbus1, err := scrapeDBus(*metricsURL)
		if err != nil {
			return err
		}
		res.DBus = dbusLatencies(dbus0, dbus1)
		for _, l := range res.DBus {
			fmt.Printf("%-11s scale: D-Bus %s: %d calls, p50 ≤ %g ms, p99 ≤ %g ms\n", t.Name, l.Op, l.Calls, l.P50, l.P99)
		}
	}
	return appendResult(t.Out, Result{Kind: "scale", Runtime: t.Name, Samples: o.m, Scale: &res,
		Params: map[string]string{"pods": strconv.Itoa(*pods), "per_pod": strconv.Itoa(*perPod),
			"parallel": strconv.Itoa(*inflight), "hold": hold.String(), "churn": strconv.Itoa(*churn)}})
}

// churn runs n cycles of a pod with one container, w in flight.
func (t *target) churn(ctx context.Context, e scaleEnv, n, w int, o *opTimes, base leakBase) (*ChurnResult, error) {
	c := &ChurnResult{Cycles: n, PID1RSSBefore: rssKiB(e.pid1)}
	c.PID1RSSMax = c.PID1RSSBefore
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	t0 := time.Now()
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := t.cycle(ctx, o); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if i%100 == 0 {
					r := rssKiB(e.pid1)
					mu.Lock()
					c.PID1RSSMax = max(c.PID1RSSMax, r)
					mu.Unlock()
					if i%1000 == 0 {
						fmt.Printf("%-11s churn: %d cycles, %.0f s, PID 1 RSS %d KiB\n", t.Name, i, time.Since(t0).Seconds(), r)
					}
				}
			}
		}()
	}
	wg.Wait()
	c.Seconds = time.Since(t0).Seconds()
	if len(errs) > 0 {
		return nil, fmt.Errorf("churn: %d cycles failed, first: %w", len(errs), errs[0])
	}
	time.Sleep(5 * time.Second)
	c.PID1RSSAfter = rssKiB(e.pid1)
	c.PID1RSSMax = max(c.PID1RSSMax, c.PID1RSSAfter)
	now, err := e.leakState()
	if err != nil {
		return nil, err
	}
	c.Leaks = leaksOver(base, now)
	fmt.Printf("%-11s churn: %d cycles in %.1f s; PID 1 RSS %d -> %d KiB (%+.1f%%); leaks %+v\n", t.Name, n, c.Seconds,
		c.PID1RSSBefore, c.PID1RSSAfter, c.Growth(), c.Leaks)
	return c, nil
}

// cycle: a pod with one container, started, stopped and removed.
func (t *target) cycle(ctx context.Context, o *opTimes) error {
	t0 := time.Now()
	pcfg := t.podConfig("churn")
	r, err := t.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfg})
	if err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	pod := r.PodSandboxId
	cr, err := t.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: t.scaleConfig(0), SandboxConfig: pcfg})
	if err == nil {
		_, err = t.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId})
		if err == nil {
			err = t.waitRunning(ctx, cr.ContainerId)
		}
		if err == nil {
			_, err = t.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cr.ContainerId, Timeout: 0})
		}
		if err == nil {
			_, err = t.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cr.ContainerId})
		}
	}
	if _, serr := t.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); serr != nil && err == nil {
		err = serr
	}
	if _, rerr := t.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); rerr != nil {
		if err == nil {
			err = rerr
		}
		t.track(pod) // cleanup() tries again
	}
	if err != nil {
		return fmt.Errorf("churn cycle: %w", err)
	}
	o.mu.Lock()
	o.m["churn cycle"] = append(o.m["churn cycle"], ms(time.Since(t0)))
	o.mu.Unlock()
	return nil
}

// scale returns a runtime's scale result in a run, or nil.
func (r *run) scale(rt string) *ScaleResult {
	for _, res := range r.results {
		if res.Kind == "scale" && res.Runtime == rt && res.Scale != nil {
			return res.Scale
		}
	}
	return nil
}
