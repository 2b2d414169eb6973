package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podunit/podunit/procstat"
)

// proc is one process of the harness, read from the host's /proc.
type proc struct {
	PID       int
	Start     uint64 // starttime in clock ticks: (PID, Start) names a process
	Comm      string
	Cmdline   []byte
	RSS, PSS  int64 // KiB
	Container bool  // a benchmark container's own process (sleep 86399)
}

type procKey struct {
	pid   int
	start uint64
}

// harnessProcs calls fn with the PID and /proc directory of every process
// whose cgroup path names the harness (the harness puts itself in a
// "podunit-harness-<hash>" cgroup in every hierarchy).
func harnessProcs(harness string, fn func(pid int, dir string)) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		cg, err := os.ReadFile(dir + "/cgroup")
		if err != nil || !bytes.Contains(cg, []byte("/"+harness)) {
			continue
		}
		fn(pid, dir)
	}
	return nil
}

// snapshot reads every process of the harness.
func snapshot(harness string) (map[procKey]proc, error) {
	out := map[procKey]proc{}
	err := harnessProcs(harness, func(pid int, dir string) {
		if p, ok := readProc(pid, dir); ok {
			out[procKey{p.PID, p.Start}] = p
		}
	})
	return out, err
}

func readProc(pid int, dir string) (proc, bool) {
	p := proc{PID: pid}
	st, err := procstat.Read(filepath.Dir(dir), pid)
	if err != nil || st.State == 'Z' {
		return p, false
	}
	p.Comm, p.Start = st.Comm, st.Start
	p.Cmdline, _ = os.ReadFile(dir + "/cmdline")
	if len(p.Cmdline) == 0 { // kernel thread or exiting
		return p, false
	}
	p.Container = string(p.Cmdline) == "sleep\x00"+SleepArg+"\x00"
	if st, err := os.ReadFile(dir + "/status"); err == nil {
		p.RSS = kibField(st, "VmRSS:")
	}
	if sm, err := os.ReadFile(dir + "/smaps_rollup"); err == nil {
		p.PSS = kibField(sm, "Pss:")
	}
	return p, true
}

func kibField(b []byte, name string) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name) {
			f := strings.Fields(line[len(name):])
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// DensityPoint is the harness with Count running benchmark pods, each of the
// result's per_pod containers (params; 1 when absent, as in results from
// before the parameter).
type DensityPoint struct {
	Count          int            `json:"count"`
	ContainerProcs int            `json:"container_procs"`
	HarnessProcs   int            `json:"harness_procs"`
	OverheadProcs  int            `json:"overhead_procs"`
	OverheadRSS    int64          `json:"overhead_rss_kib"`
	OverheadPSS    int64          `json:"overhead_pss_kib"`
	OverheadComms  map[string]int `json:"overhead_comms,omitempty"`
	PID1RSS        int64          `json:"pid1_rss_kib"`
	PID1PSS        int64          `json:"pid1_pss_kib"`
	DaemonRSS      int64          `json:"daemon_rss_kib"`
	DaemonPSS      int64          `json:"daemon_pss_kib"`
	JournaldRSS    int64          `json:"journald_rss_kib"`
	DBusRSS        int64          `json:"dbus_rss_kib"`
	// DaemonRSSBy splits DaemonRSS by process (procLabel): podunit's
	// daemon, log relay and session server are separate processes whose
	// memory moves for different reasons.
	DaemonRSSBy map[string]int64 `json:"daemon_rss_by_kib,omitempty"`
}

// stableSnapshot keeps the processes seen in two snapshots a second apart:
// a runc or CNI plugin that happens to run during one read is not overhead
// that lives as long as the container.
func stableSnapshot(harness string) (map[procKey]proc, error) {
	a, err := snapshot(harness)
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	b, err := snapshot(harness)
	if err != nil {
		return nil, err
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			delete(b, k)
		}
	}
	return b, nil
}

// daemonSpec names a runtime's daemon among the harness' processes: the
// processes named Comm, and when Arg is set only those with Arg among their
// arguments (two containerds run in the harness, each with its own config
// file). Written COMM[@ARG] on the command line.
type daemonSpec struct{ Comm, Arg string }

func parseDaemon(s string) (daemonSpec, error) {
	comm, arg, _ := strings.Cut(s, "@")
	if comm == "" {
		return daemonSpec{}, fmt.Errorf("daemon %q: want COMM[@ARG]", s)
	}
	return daemonSpec{comm, arg}, nil
}

// ownProcess reports whether a process belongs to the runtime itself: its
// daemon, and for podunit the node-wide log relay (comm is cut to 15 bytes:
// "podunit-logrela"). containerd's shims are per-container overhead, not the
// daemon.
func (d daemonSpec) ownProcess(p proc) bool {
	if d.Comm == "podunit" && p.Comm == "podunit-logrela" {
		return true
	}
	if p.Comm != d.Comm {
		return false
	}
	if d.Arg == "" {
		return true
	}
	args := strings.Split(strings.TrimSuffix(string(p.Cmdline), "\x00"), "\x00")
	for _, a := range args[1:] {
		if a == d.Arg {
			return true
		}
	}
	return false
}

// procLabel names a process by its comm and first argument ("podunit
// serve", "podunit _stream", "podunit-logrela _logrelay"): the runtime's own
// processes share a binary and differ by their subcommand.
func procLabel(p proc) string {
	args := strings.Split(strings.TrimSuffix(string(p.Cmdline), "\x00"), "\x00")
	if len(args) > 1 && args[1] != "" {
		return p.Comm + " " + args[1]
	}
	return p.Comm
}

func densityPoint(count int, base, now map[procKey]proc, pid1 int, daemon daemonSpec) DensityPoint {
	d := DensityPoint{Count: count, HarnessProcs: len(now), OverheadComms: map[string]int{}}
	for k, p := range now {
		switch {
		case p.Container:
			d.ContainerProcs++
		case p.PID == pid1:
			d.PID1RSS, d.PID1PSS = p.RSS, p.PSS
		case daemon.ownProcess(p):
			d.DaemonRSS += p.RSS
			d.DaemonPSS += p.PSS
			if d.DaemonRSSBy == nil {
				d.DaemonRSSBy = map[string]int64{}
			}
			d.DaemonRSSBy[procLabel(p)] += p.RSS
		case p.Comm == "systemd-journal":
			d.JournaldRSS += p.RSS
		case p.Comm == "dbus-daemon":
			d.DBusRSS += p.RSS
		}
		if _, old := base[k]; old || p.Container {
			continue
		}
		d.OverheadProcs++
		d.OverheadRSS += p.RSS
		d.OverheadPSS += p.PSS
		d.OverheadComms[p.Comm]++
	}
	return d
}

// checkContainers compares the container processes found at a point with
// the containers started: pods × perPod.
func checkContainers(p DensityPoint, perPod int) error {
	if want := p.Count * perPod; p.ContainerProcs != want {
		return fmt.Errorf("%d containers started (%d pods × %d), %d container processes found in the harness",
			want, p.Count, perPod, p.ContainerProcs)
	}
	return nil
}

// daemonAge is how long the runtime's daemon (not podunit's log relay) had
// run at a snapshot, in seconds, from its start time and the host's uptime.
// The youngest process of the daemon's name and arguments: podunit's
// session server runs the same binary and outlives a restart of podunit.
func daemonAge(snap map[procKey]proc, d daemonSpec) (float64, bool) {
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(up))
	if len(f) == 0 {
		return 0, false
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, false
	}
	var start uint64
	found := false
	for _, p := range snap {
		if p.Comm == d.Comm && d.ownProcess(p) && (!found || p.Start > start) {
			start, found = p.Start, true
		}
	}
	return secs - float64(start)/100, found // USER_HZ
}

// cmdDensity measures the host overhead of running pods of -per-pod
// containers each (busybox sleep), at each of -counts pods: the baseline
// with none, then pods started two at a time up to each count.
func cmdDensity(args []string) (retErr error) {
	var t target
	fs := flag.NewFlagSet("density", flag.ExitOnError)
	t.flags(fs)
	countsFlag := fs.String("counts", "1,50,100", "running pod counts to measure at")
	perPod := fs.Int("per-pod", 1, "containers per pod (the pod shape): a count of pods runs pods × per-pod containers")
	harness := fs.String("harness", "", "the harness' cgroup name (podunit-harness.sh name DIR)")
	pid1 := fs.Int("pid1", 0, "host PID of the harness' systemd")
	daemonFlag := fs.String("daemon", "", "the runtime daemon, COMM[@ARG] (podunit, containerd@/path/config.toml)")
	settle := fs.Duration("settle", 5*time.Second, "wait after the last start before measuring")
	heap := fs.String("heap", "", "PREFIX: at the baseline and each count, save the daemon's heap profile (after a GC) from its pprof URL to PREFIX-<count>.pprof; URL in -heap-url")
	heapURL := fs.String("heap-url", "", "the daemon's /debug/pprof/heap URL (with -heap)")
	fs.Parse(args)
	if (*heap == "") != (*heapURL == "") {
		return fmt.Errorf("-heap and -heap-url go together")
	}
	saveHeap := func(count int) error {
		if *heap == "" {
			return nil
		}
		return fetchTo(*heapURL+"?gc=1", fmt.Sprintf("%s-%d.pprof", *heap, count))
	}
	counts, err := parseCounts(*countsFlag)
	if err != nil {
		return err
	}
	if *harness == "" || *pid1 == 0 {
		return fmt.Errorf("-harness, -pid1 and -daemon are required")
	}
	if *perPod < 1 {
		return fmt.Errorf("-per-pod must be ≥ 1")
	}
	daemon, err := parseDaemon(*daemonFlag)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := t.connect(ctx); err != nil {
		return err
	}
	defer func() {
		if err := t.cleanup(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	time.Sleep(*settle)
	base, err := stableSnapshot(*harness)
	if err != nil {
		return err
	}
	params := map[string]string{"counts": *countsFlag, "per_pod": strconv.Itoa(*perPod)}
	// bench.sh restarts the daemon before each density run: its age at the
	// baseline shows that it did
	if age, ok := daemonAge(base, daemon); ok {
		params["daemon_age_s"] = strconv.FormatFloat(age, 'f', 0, 64)
	}
	points := []DensityPoint{densityPoint(0, base, base, *pid1, daemon)}
	if err := saveHeap(0); err != nil {
		return err
	}
	running := 0
	for _, c := range counts {
		// two at a time: the figure is the steady state, not start-up speed
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
			sem  = make(chan struct{}, 2)
		)
		for ; running < c; running++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if _, err := t.startPod(ctx, "density", *perPod, t.sleepConfig, nil); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			return fmt.Errorf("%d of the starts failed, first: %w", len(errs), errs[0])
		}
		time.Sleep(*settle)
		now, err := stableSnapshot(*harness)
		if err != nil {
			return err
		}
		p := densityPoint(c, base, now, *pid1, daemon)
		if err := checkContainers(p, *perPod); err != nil {
			return err
		}
		points = append(points, p)
		if err := saveHeap(c); err != nil {
			return err
		}
		fmt.Printf("%-11s density %3d pods × %d: overhead procs %d (%s) RSS %d KiB; PID 1 RSS %d KiB (base %d); daemon RSS %d KiB (base %d)\n",
			t.Name, c, *perPod, p.OverheadProcs, comms(p.OverheadComms), p.OverheadRSS, p.PID1RSS, points[0].PID1RSS, p.DaemonRSS, points[0].DaemonRSS)
	}
	return appendResult(t.Out, Result{Kind: "density", Runtime: t.Name, Params: params, Density: points})
}

// fetchTo saves the body of a GET of url to path.
func fetchTo(url, path string) error {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return f.Close()
}

func comms(m map[string]int) string {
	var s []string
	for k, v := range m {
		s = append(s, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// cmdIdle records each daemon's memory and PID 1's before any benchmark ran.
func cmdIdle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	harness := fs.String("harness", "", "the harness' cgroup name")
	pid1 := fs.Int("pid1", 0, "host PID of the harness' systemd")
	out := fs.String("out", "", "result file (JSON); appended to")
	var names []string
	daemons := map[string]daemonSpec{}
	fs.Func("daemon", "NAME=COMM[@ARG]: a runtime and its daemon process (repeated)", func(s string) error {
		name, spec, ok := strings.Cut(s, "=")
		d, err := parseDaemon(spec)
		if !ok || name == "" || err != nil {
			return fmt.Errorf("want NAME=COMM[@ARG], got %q", s)
		}
		names = append(names, name)
		daemons[name] = d
		return nil
	})
	fs.Parse(args)
	if *harness == "" || *pid1 == 0 || *out == "" || len(names) == 0 {
		return fmt.Errorf("-harness, -pid1, -out and -daemon are required")
	}
	snap, err := stableSnapshot(*harness)
	if err != nil {
		return err
	}
	params := map[string]string{}
	for _, p := range snap {
		if p.PID == *pid1 {
			params["pid1_rss_kib"] = strconv.FormatInt(p.RSS, 10)
		}
		for name, d := range daemons {
			// the daemon itself (not podunit's log relay), as before any container
			if p.Comm == d.Comm && d.ownProcess(p) {
				params[name+"_rss_kib"] = strconv.FormatInt(p.RSS, 10)
				params[name+"_pss_kib"] = strconv.FormatInt(p.PSS, 10)
			}
		}
	}
	var line []string
	for _, name := range names {
		k := name + "_rss_kib"
		if params[k] == "" {
			return fmt.Errorf("idle: no %s process in the harness", name)
		}
		line = append(line, fmt.Sprintf("%s RSS %s KiB", name, params[k]))
	}
	fmt.Printf("idle: %s\n", strings.Join(line, ", "))
	return appendResult(*out, Result{Kind: "idle", Params: params})
}
