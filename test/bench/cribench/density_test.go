package main

import (
	"fmt"
	"strings"
	"testing"
)

// densityRes is a density result at the baseline and at pods pods: procs
// processes besides the containers', other KiB of them (RSS and PSS alike)
// and PID 1 grown by pid1 KiB. params nil: a result from before per_pod.
func densityRes(rt string, params map[string]string, pods, procs int, other, pid1 int64) Result {
	return Result{Kind: "density", Runtime: rt, Params: params, Density: []DensityPoint{
		{PID1RSS: 1000, DaemonRSS: 50000},
		{Count: pods, OverheadProcs: procs, OverheadRSS: other, OverheadPSS: other, PID1RSS: 1000 + pid1, DaemonRSS: 50000},
	}}
}

// goalOf finds the target row whose figure starts with prefix.
func goalOf(t *testing.T, gs []goal, prefix string) goal {
	t.Helper()
	for _, g := range gs {
		if strings.HasPrefix(g.figure, prefix) {
			return g
		}
	}
	t.Fatalf("no target %q among %d", prefix, len(gs))
	return goal{}
}

const (
	procs1 = "processes besides the containers' own, 1 container per pod"
	mem1   = "host memory per running container at 100, 1 container per pod"
	procs3 = "processes besides the containers' own, 3 containers per pod"
	mem3   = "host memory per running container at 102 (34 pods × 3), 3 containers per pod"
)

// Each shape's target rows are judged from that shape's results only; a
// result without per_pod is the 1-per-pod shape; memory per container
// divides by the running containers, pods × 3 for the 3-per-pod shape.
func TestDensityTargetsByShape(t *testing.T) {
	r := testRun()
	r.failures["density-3/containerd2"] = "cribench: boom"
	r.results = []Result{
		// 1 per pod, written before per_pod existed: 0 extra processes,
		// PID 1 +5000 KiB over 100 containers = 50 KiB each
		densityRes("podunit", map[string]string{"counts": "1,50,100"}, 100, 0, 0, 5000),
		// 3 per pod: one extra process; 10200 KiB over 102 containers =
		// 100 KiB each (over 34 pods it would be 300, behind)
		densityRes("podunit", map[string]string{"counts": "1,17,34", "per_pod": "3"}, 34, 1, 10200, 0),
		densityRes("containerd", map[string]string{"per_pod": "3"}, 34, 68, 306000, 0),
	}
	gs := r.targets()

	g := goalOf(t, gs, procs1)
	if g.verdict != "met" || g.podunit != "0 at 100" {
		t.Errorf("1-per-pod processes = %+v; want 0 at 100, met (the 3-per-pod result's process must not count)", g)
	}
	if g.refs[0] != "not measured: not run" {
		t.Errorf("1-per-pod processes, containerd 1.6 = %q; its only result is the 3-per-pod one", g.refs[0])
	}
	g = goalOf(t, gs, mem1)
	if g.verdict != "met" || g.podunit != "50 KiB (50 KiB by RSS)" {
		t.Errorf("1-per-pod memory = %+v; want 50 KiB, met", g)
	}

	g = goalOf(t, gs, procs3)
	if g.verdict != "**behind**" || g.podunit != "1 at 102 (34 pods × 3)" {
		t.Errorf("3-per-pod processes = %+v; want 1 at 102 (34 pods × 3), behind", g)
	}
	if g.refs[0] != "68 at 102 (34 pods × 3)" || g.refs[1] != "not measured: boom" {
		t.Errorf("3-per-pod processes, references = %q; want containerd 1.6's 68 and containerd 2's failure under density-3", g.refs)
	}
	g = goalOf(t, gs, mem3)
	if g.verdict != "met" || g.podunit != "100 KiB (100 KiB by RSS)" {
		t.Errorf("3-per-pod memory = %+v; want 100 KiB (10200 KiB over 34 pods × 3), met", g)
	}
	if g.refs[0] != "3000 KiB (3000 KiB by RSS)" {
		t.Errorf("3-per-pod memory, containerd 1.6 = %q; want 3000 KiB (306000 over 102)", g.refs[0])
	}
}

// A run of the 1-per-pod shape only (every run before per_pod) still judges
// it, and says the 3-per-pod shape was not measured.
func TestDensityTargetsOlderRun(t *testing.T) {
	r := testRun()
	r.results = []Result{densityRes("podunit", map[string]string{"counts": "1,50,100"}, 100, 0, 30000, 0)}
	gs := r.targets()
	if g := goalOf(t, gs, mem1); g.verdict != "**behind**" || g.podunit != "300 KiB (300 KiB by RSS)" {
		t.Errorf("1-per-pod memory = %+v; want 300 KiB, behind", g)
	}
	for _, fig := range []string{procs3, "host memory per running container, 3 containers per pod"} {
		if g := goalOf(t, gs, fig); g.verdict != "not measured" || g.podunit != "not measured: not run" {
			t.Errorf("%s = %+v; want not measured", fig, g)
		}
	}
	// an unreadable per_pod is no shape: not counted as one per pod
	r.results[0].Params["per_pod"] = "x"
	if g := goalOf(t, r.targets(), procs1); g.verdict != "not measured" {
		t.Errorf("per_pod=x judged as 1 per pod: %+v", g)
	}
}

func TestPerContainerKiB(t *testing.T) {
	d := densityRes("podunit", nil, 34, 0, 9180, 1020).Density
	if got := perContainerPSSKiB(d, 3); got != 100 {
		t.Errorf("perContainerPSSKiB(34 pods × 3) = %v; want (9180 + 1020) / 102 = 100", got)
	}
	if got := perContainerKiB(d, 1); got != 300 {
		t.Errorf("perContainerKiB(34 pods × 1) = %v; want 300", got)
	}
	if got := perContainerKiB(d[:1], 3); got != 0 {
		t.Errorf("baseline only: %v", got)
	}
}

func TestCheckContainers(t *testing.T) {
	if err := checkContainers(DensityPoint{Count: 34, ContainerProcs: 102}, 3); err != nil {
		t.Errorf("34 pods × 3 with 102 container processes: %v", err)
	}
	if err := checkContainers(DensityPoint{Count: 34, ContainerProcs: 34}, 3); err == nil {
		t.Error("34 pods × 3 with 34 container processes passed")
	}
	if err := checkContainers(DensityPoint{Count: 100, ContainerProcs: 100}, 1); err != nil {
		t.Errorf("100 pods × 1: %v", err)
	}
}

// The overhead section has a table per shape, containers = pods × shape, and
// the daemons' ages at the baseline where recorded.
func TestRenderDensityShapes(t *testing.T) {
	r := testRun()
	r.results = []Result{
		densityRes("podunit", nil, 100, 0, 0, 5000),
		densityRes("podunit", map[string]string{"per_pod": "3", "daemon_age_s": "7"}, 34, 0, 10200, 0),
	}
	var b strings.Builder
	r.renderDensity(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	doc := b.String()
	one, three, ok := strings.Cut(doc, "### 3 containers per pod")
	if !ok || !strings.Contains(one, "### 1 container per pod") {
		t.Fatalf("no table per shape:\n%s", doc)
	}
	for _, want := range []string{
		"| podunit | 100 | 100 | 0  | 0 KiB | 0 KiB | +5000 KiB | +0 KiB | +0 KiB | +0 KiB | 50 / 50 KiB | 50000 KiB |",
		"The daemon's age at the 0-pod baseline: podunit not recorded.",
		"| containerd 1.6.20~ds1 | | | not measured: not run |",
	} {
		if !strings.Contains(one, want) {
			t.Errorf("1-per-pod table lacks %q:\n%s", want, one)
		}
	}
	for _, want := range []string{
		"| podunit | 34 | 102 | 0  | 10200 KiB | 10200 KiB | +0 KiB | +0 KiB | +0 KiB | +0 KiB | 100 / 100 KiB | 50000 KiB |",
		"The daemon's age at the 0-pod baseline: podunit 7 s.",
	} {
		if !strings.Contains(three, want) {
			t.Errorf("3-per-pod table lacks %q:\n%s", want, three)
		}
	}
	if !strings.Contains(doc, "restarts the runtime's daemon") {
		t.Error("the method does not say the daemon is restarted")
	}
}

// The daemon's age is its youngest process's: podunit's session server runs
// the same binary and outlives the restart before each density run.
func TestDaemonAgeYoungest(t *testing.T) {
	snap := map[procKey]proc{}
	for i, start := range []uint64{100, 900, 500} {
		p := proc{PID: 10 + i, Comm: "podunit", Start: start}
		snap[procKey{p.PID, p.Start}] = p
	}
	relay := proc{PID: 20, Comm: "podunit-logrela", Start: 1000}
	snap[procKey{relay.PID, relay.Start}] = relay
	for range 20 { // map order varies
		age, ok := daemonAge(snap, daemonSpec{Comm: "podunit"})
		oldest, _ := daemonAge(map[procKey]proc{{10, 100}: snap[procKey{10, 100}]}, daemonSpec{Comm: "podunit"})
		if !ok || oldest-age < 7.9 || oldest-age > 8.1 {
			t.Fatalf("age %.1f s, the oldest's %.1f s; want the youngest podunit's (start 900: 8 s younger), not the relay's", age, oldest)
		}
	}
}

// podunit's own processes are told apart by subcommand, and the table says
// how each one's RSS moved: the relay's and session server's memory does not
// follow podunit's.
func TestDaemonRSSSplit(t *testing.T) {
	mk := func(pid int, comm, cmdline string, rss int64) proc {
		return proc{PID: pid, Start: 1, Comm: comm, Cmdline: []byte(cmdline), RSS: rss}
	}
	snap := func(procs ...proc) map[procKey]proc {
		m := map[procKey]proc{}
		for _, p := range procs {
			m[procKey{p.PID, p.Start}] = p
		}
		return m
	}
	spec := daemonSpec{Comm: "podunit"}
	base := densityPoint(0, nil, snap(
		mk(10, "podunit", "podunit\x00serve\x00--config\x00x\x00", 60000),
		mk(11, "podunit", "podunit\x00_stream\x00", 20000),
		mk(12, "podunit-logrela", "podunit-logrelay\x00_logrelay\x00", 30000),
	), 1, spec)
	last := densityPoint(100, nil, snap(
		mk(10, "podunit", "podunit\x00serve\x00--config\x00x\x00", 70000),
		mk(11, "podunit", "podunit\x00_stream\x00", 20000),
		mk(12, "podunit-logrela", "podunit-logrelay\x00_logrelay\x00", 45000),
	), 1, spec)
	if base.DaemonRSS != 110000 || base.DaemonRSSBy["podunit serve"] != 60000 || base.DaemonRSSBy["podunit _stream"] != 20000 {
		t.Fatalf("baseline split %v (sum %d)", base.DaemonRSSBy, base.DaemonRSS)
	}
	got := rssSplit([]DensityPoint{base, last})
	want := "`podunit _stream` 20000 → 20000 KiB (+0), `podunit serve` 60000 → 70000 KiB (+10000), `podunit-logrela _logrelay` 30000 → 45000 KiB (+15000)"
	if got != want {
		t.Errorf("split:\n got %s\nwant %s", got, want)
	}
	if s := rssSplit([]DensityPoint{{DaemonRSSBy: map[string]int64{"containerd --config": 1}}, {DaemonRSSBy: map[string]int64{"containerd --config": 2}}}); s != "" {
		t.Errorf("one process needs no split, got %q", s)
	}
}
