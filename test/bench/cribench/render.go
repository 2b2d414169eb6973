package main

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// goal is one of the targets, judged on this run's numbers: podunit's
// figure, each reference's (in the order of refs), the ratio to the better
// reference and the verdict.
type goal struct {
	figure, goal, podunit string
	refs                  []string
	ratio, verdict        string
}

func (r *run) render(b *strings.Builder, command string) {
	m := r.machine
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	var names []string
	for _, rt := range refs {
		if m[rt] != "" {
			names = append(names, m[rt])
		}
	}
	w("# Benchmarks: podunit beside containerd %s\n\n", strings.Join(names, " and "))
	w("Written by `%s` (test/bench/bench.sh) on %s. Every number below was measured in that run; ", command, m["date"])
	w("raw results, logs and profiles are in `%s` of the machine that ran it. Ratios are podunit / the better "+
		"(lower latency, higher throughput) of the two containerds in this run, for each figure and percentile on its own; "+
		"the version in parentheses says which containerd that was.\n\n", r.dir)

	w("## Machine and setup\n\n")
	w("| | |\n|---|---|\n")
	for _, k := range []struct{ key, label string }{
		{"cpu", "CPU cores"}, {"memory", "memory"}, {"kernel", "kernel"}, {"cgroup", "cgroup mode"},
		{"os", "OS"}, {"harness_systemd", "systemd (harness PID 1)"}, {"podunit", "podunit commit"},
		{"containerd", "containerd (Debian)"}, {"containerd2", "containerd (module proxy, test/bench/build-containerd2.sh)"},
		{"runc", "runc (every runtime)"}, {"critest", "critest"},
		{"load_start", "load average at start"}, {"load_end", "load average at end"},
	} {
		w("| %s | %s |\n", k.label, mdEscape(m[k.key]))
	}
	w("\nCommand: `%s` — boots one systemd harness (test/harness/podunit-harness.sh, host network, "+
		"its /run a tmpfs as on a node: podunit's storage run root and the containerds' state live there) "+
		"running podunit.service and the two reference containerds (see References) as transient services; "+
		"all use the same CNI conflist (test/cni's bridge + host-local + portmap, bridge "+
		"renamed pu-bench0 on 10.215.0.0/16 so a concurrent critest run cannot collide) and pull from the same local "+
		"registry 127.0.0.1:5000 (podunit through test/critest/registries.conf, the containerds through equivalent certs.d). "+
		"Within a round each figure runs on one runtime after the other; the order reverses each round. "+
		"Percentiles are nearest-rank over every sample of every round. Pods use cgroup parent `/benchmark.slice`, "+
		"the namespaces a kubelet asks for without shareProcessNamespace (pod network and IPC, PID namespace per container) "+
		"and one busybox container running `sleep` (more per pod where a figure says so).\n\n", command)
	if l := m["load_start"]; l != "" {
		w("The machine was shared with other work during the run (load average above); both runtimes saw the same " +
			"conditions because runs alternate, but absolute numbers are noisier than on an idle machine.\n\n")
	}

	renderReferences(w)

	targets := r.targets()
	w("## Targets\n\n| figure | target | podunit | %s | ratio | verdict |\n|---|---|---|%s---|---|\n",
		r.refHeads(""), strings.Repeat("---|", len(refs)))
	for _, t := range targets {
		w("| %s | %s | %s | %s | %s | %s |\n", t.figure, t.goal, t.podunit, strings.Join(t.refs, " | "), t.ratio, t.verdict)
	}

	r.renderStart(w)
	r.renderRunp(w)
	r.renderCritest(w)
	r.renderDensity(w)
	r.renderScale(w)
	r.renderPleg(w)
	r.renderLogs(w)
	r.renderPull(w)
	r.renderDaemon(w)
	r.renderProfile(w)
}

// refHeads is the references' column headers, each followed by suffix.
func (r *run) refHeads(suffix string) string {
	var h []string
	for _, rt := range refs {
		h = append(h, r.label(rt)+suffix)
	}
	return strings.Join(h, " | ")
}

// renderReferences says how the two reference runtimes are built and run.
func renderReferences(w writer) {
	w("## References\n\n" +
		"- **containerd 1.6** (`containerd` in the raw results): Debian 12's package (`apt-get install containerd`), " +
		"`/usr/bin/containerd` with Debian's `containerd-shim-runc-v2`; config version 2 written by bench.sh " +
		"(results directory: containerd.toml): CRI plugin, pause image registry.k8s.io/pause:3.6, overlayfs, runc with " +
		"`SystemdCgroup = true`, root /var/lib/bench-containerd, socket /run/bench-containerd/containerd.sock.\n" +
		"- **containerd 2.x** (`containerd2`): built by test/bench/build-containerd2.sh from the Go module proxy " +
		"(`github.com/containerd/containerd/v2`, default v2.4.2) inside a copy of the module, so that its own go.mod " +
		"pins every dependency; `containerd` with cgo and tag no_btrfs, `containerd-shim-runc-v2` static " +
		"(`CGO_ENABLED=0`, tag no_grpc), as containerd's Makefile builds them; cached in /var/cache/podunit-containerd " +
		"by version. Config version 3 written by bench.sh (containerd2.toml): the same settings in the 2.x plugins " +
		"(io.containerd.cri.v1.images, io.containerd.cri.v1.runtime, io.containerd.grpc.v1.cri), its own shim " +
		"(`runtime_path`), images pulled client-side (`use_local_image_pull = true`, as 2.0; with 2.1's default transfer " +
		"service critest's parallel pull-and-remove of one image fails, see bench.sh), root /var/lib/bench-containerd2, " +
		"socket /run/bench-containerd2/containerd.sock.\n" +
		"- Both: the same runc binary (/usr/sbin/runc), CNI conflist and plugins (/usr/lib/cni), registry hosts " +
		"(certs.d), `restrict_oom_score_adj = true`; each runs as a transient service with Delegate=yes, KillMode=process " +
		"and no task or file limits, as their packaged containerd.service does, and the bench stops both at the end.\n\n")
}

func (r *run) targets() []goal {
	var out []goal
	// issue 20: pod + container start at half the better containerd's, and
	// every call a kubelet makes at or below it, at the median and the tail
	for _, s := range []struct {
		parallel, label, fig string
	}{{"1", "50 sequential", "startlat-seq"}, {"20", "bursts of 20 concurrent", "startlat-conc"}} {
		params := map[string]string{"parallel": s.parallel, "phased": ""}
		series := func(rt, name string) []float64 { return r.samples("startlat", rt, name, params) }
		out = append(out, r.latencyGoal("pod + container start to RUNNING ("+s.label+")", 0.5, false,
			series("podunit", "total"), r.each(func(rt string) []float64 { return series(rt, "total") }), s.fig))
		if s.parallel != "1" {
			continue
		}
		for _, call := range []string{"CreateContainer", "StartContainer"} {
			out = append(out, r.latencyGoal(call+" in the pod + container start ("+s.label+")", 1.0, true,
				series("podunit", call), r.each(func(rt string) []float64 { return series(rt, call) }), s.fig))
		}
	}
	// The calls under concurrency are judged in phased bursts, where each
	// runtime's calls meet the same number of their own kind in flight. In
	// the pod + container bursts they do not: how many of a burst's creates
	// and starts overlap depends on how long the runtime's RunPodSandbox
	// took, so the runtime with the faster pod start met more of its own
	// calls at once (test/bench/analysis.md, 2026-12-07).
	phased := func(rt, name string) []float64 {
		return r.samples("startlat", rt, name, map[string]string{"parallel": "20", "phased": "1"})
	}
	for _, call := range []string{"CreateContainer", "StartContainer"} {
		out = append(out, r.latencyGoal(call+", 20 at once (phased bursts)", 1.0, true,
			phased("podunit", call), r.each(func(rt string) []float64 { return phased(rt, call) }), "startlat-phased"))
	}
	keys := map[string]bool{}
	for _, rt := range runtimes {
		for k := range r.critest[rt] {
			keys[k] = true
		}
	}
	for _, k := range sortedKeys(keys) {
		fig := "critest-pods"
		if strings.HasPrefix(k, "container_") {
			fig = "critest-containers"
		}
		out = append(out, r.latencyGoal("critest -benchmark "+k, 1.0, true,
			r.critest["podunit"][k], r.each(func(rt string) []float64 { return r.critest[rt][k] }), fig))
	}
	var c []float64
	for _, n := range densityShapes {
		out = append(out, r.densityTargets(n)...)
	}
	lines := func(rt string) float64 {
		var l []float64
		for _, x := range r.logs[rt] {
			l = append(l, x.linesPerSec)
		}
		return median(l)
	}
	c = nil
	for _, rt := range refs {
		c = append(c, lines(rt))
	}
	out = append(out, r.judge("log throughput, lines/s (median), journald on", "ratio ≥ 1.2", lines("podunit"), c, "lines/s", false,
		func(x float64) bool { return x >= 1.2 }, "logs"))
	c = nil
	for _, rt := range refs {
		c = append(c, median(r.pull[rt]))
	}
	out = append(out, r.judge("pull + unpack 50 MB, 5 layers (median)", "ratio ≤ 1.0", median(r.pull["podunit"]), c, "s", true,
		func(x float64) bool { return x <= 1.0 }, "pull"))
	return append(out, r.scaleTargets()...)
}

// each is f of every reference, in the order of refs.
func (r *run) each(f func(rt string) []float64) [][]float64 {
	out := make([][]float64, len(refs))
	for i, rt := range refs {
		out[i] = f(rt)
	}
	return out
}

// latencyGoal judges podunit's latency samples p against the references'
// samples c (in the order of refs): podunit's p50, and with tail its p99
// too, each over the better reference's at the same percentile (as the
// tables below compare them); met when every such ratio is ≤ limit.
func (r *run) latencyGoal(fig string, limit float64, tail bool, p []float64, c [][]float64, missingFig string) goal {
	pcs := []float64{50}
	name := "p50"
	if tail {
		pcs, name = []float64{50, 99}, "p50 / p99"
	}
	t := goal{figure: fig + ", " + name, goal: fmt.Sprintf("ratio ≤ %.1f", limit), ratio: "–", verdict: "not measured",
		podunit: r.missing(missingFig, "podunit")}
	at := func(v []float64) string {
		var s []string
		for _, q := range pcs {
			s = append(s, f1(percentile(v, q)))
		}
		return strings.Join(s, " / ") + " ms"
	}
	if len(p) > 0 {
		t.podunit = at(p)
	}
	for i, rt := range refs {
		cell := r.missing(missingFig, rt)
		if len(c[i]) > 0 {
			cell = at(c[i])
		}
		t.refs = append(t.refs, cell)
	}
	if len(p) == 0 {
		return t
	}
	var ratios []string
	met := true
	for _, q := range pcs {
		v := make([]float64, len(refs))
		for i := range refs {
			if len(c[i]) > 0 {
				v[i] = percentile(c[i], q)
			}
		}
		best, _ := better(v, true)
		if best <= 0 {
			return t
		}
		ratios = append(ratios, r.ratioBest(percentile(p, q), v, true))
		met = met && percentile(p, q)/best <= limit
	}
	t.ratio, t.verdict = strings.Join(ratios, " / "), "met"
	if !met {
		t.verdict = "**behind**"
	}
	return t
}

// judge compares podunit's figure p with the better of the references'
// figures c (in the order of refs; 0: not measured) and applies the target ok
// to the ratio.
func (r *run) judge(fig, want string, p float64, c []float64, unit string, lowerWins bool, ok func(float64) bool, missingFig string) goal {
	t := goal{figure: fig, goal: want, ratio: "–", verdict: "not measured", podunit: r.missing(missingFig, "podunit")}
	num := f1
	switch unit {
	case "s":
		num = func(x float64) string { return fmt.Sprintf("%.3f", x) }
	case "lines/s":
		num = func(x float64) string { return fmt.Sprintf("%.0f", x) }
	}
	if p > 0 {
		t.podunit = fmt.Sprintf("%s %s", num(p), unit)
	}
	for i, rt := range refs {
		cell := r.missing(missingFig, rt)
		if c[i] > 0 {
			cell = fmt.Sprintf("%s %s", num(c[i]), unit)
		}
		t.refs = append(t.refs, cell)
	}
	if best, _ := better(c, lowerWins); p > 0 && best > 0 {
		t.ratio = r.ratioBest(p, c, lowerWins)
		t.verdict = "met"
		if !ok(p / best) {
			t.verdict = "**behind**"
		}
	}
	return t
}

// densityTargets judges podunit's density result of a pod shape (n
// containers per pod) at its largest count: no processes besides the
// containers' own, at most 200 KiB of host memory per running container.
func (r *run) densityTargets(n int) []goal {
	fig, shape := densityFig(n), shapeLabel(n)
	var procs, mem []string
	for _, rt := range refs {
		cs, ck := r.missing(fig, rt), r.missing(fig, rt)
		if cd := r.density(rt, n); len(cd) > 1 {
			cl := cd[len(cd)-1]
			cs = fmt.Sprintf("%d at %s", cl.OverheadProcs, containersAt(cl, n))
			ck = fmt.Sprintf("%.0f KiB (%.0f KiB by RSS)", perContainerPSSKiB(cd, n), perContainerKiB(cd, n))
		}
		procs, mem = append(procs, cs), append(mem, ck)
	}
	procFig := "processes besides the containers' own, " + shape
	pd := r.density("podunit", n)
	if len(pd) < 2 {
		m := r.missing(fig, "podunit")
		return []goal{
			{procFig, "= 0", m, procs, "–", "not measured"},
			{"host memory per running container, " + shape, "≤ 200 KiB", m, mem, "–", "not measured"},
		}
	}
	last := pd[len(pd)-1]
	v := "met"
	if last.OverheadProcs != 0 {
		v = "**behind**"
	}
	out := []goal{{procFig, "= 0", fmt.Sprintf("%d at %s", last.OverheadProcs, containersAt(last, n)), procs, "–", v}}
	pk := perContainerPSSKiB(pd, n)
	v = "met"
	if pk > 200 {
		v = "**behind**"
	}
	return append(out, goal{fmt.Sprintf("host memory per running container at %s, %s, new processes by PSS + growth of PID 1, "+
		"journald, dbus and the runtime (see overhead table)", containersAt(last, n), shape), "≤ 200 KiB",
		fmt.Sprintf("%.0f KiB (%.0f KiB by RSS)", pk, perContainerKiB(pd, n)), mem, "–", v})
}

// shapeLabel names a pod shape: "1 container per pod", "3 containers per pod".
func shapeLabel(n int) string {
	if n == 1 {
		return "1 container per pod"
	}
	return fmt.Sprintf("%d containers per pod", n)
}

// containersAt is the running containers of a density point of n containers
// per pod: "100", or "102 (34 pods × 3)".
func containersAt(p DensityPoint, n int) string {
	if n == 1 {
		return strconv.Itoa(p.Count)
	}
	return fmt.Sprintf("%d (%d pods × %d)", p.Count*n, p.Count, n)
}

// perContainerKiB is the host memory that running containers cost besides
// their own processes, per container, at the largest count of pods of n
// containers each: RSS of the processes that appeared (shims, pause,
// helpers) plus the growth of systemd (PID 1), journald, dbus-daemon and the
// runtime's own processes (the daemon, and for podunit its node-wide log
// relay, which holds every container's pipes), over the running containers
// (pods × n).
func perContainerKiB(d []DensityPoint, n int) float64 {
	return perContainer(d, n, func(p DensityPoint) int64 { return p.OverheadRSS })
}

// perContainerPSSKiB is perContainerKiB with the other processes counted by
// PSS: pages they share (libc, the binary's text) are split among them
// instead of counted once per process.
func perContainerPSSKiB(d []DensityPoint, n int) float64 {
	return perContainer(d, n, func(p DensityPoint) int64 { return p.OverheadPSS })
}

func perContainer(d []DensityPoint, n int, other func(DensityPoint) int64) float64 {
	if len(d) < 2 || n < 1 {
		return 0
	}
	b, l := d[0], d[len(d)-1]
	if l.Count < 1 {
		return 0
	}
	total := other(l) + (l.PID1RSS - b.PID1RSS) + (l.JournaldRSS - b.JournaldRSS) + (l.DBusRSS - b.DBusRSS) + (l.DaemonRSS - b.DaemonRSS)
	return float64(total) / float64(l.Count*n)
}

type writer func(format string, a ...any)

func (r *run) renderStart(w writer) {
	w("\n## Pod + container start to RUNNING (test/bench/cribench startlat)\n\n")
	w("RunPodSandbox, CreateContainer, StartContainer, then ContainerStatus every 1 ms until CONTAINER_RUNNING; " +
		"two untimed warm-up pods first. Sequential: 50 pods one after the other, kept running until the end. " +
		"Concurrent: bursts of 20 pods started at once (two bursts per round, removed between bursts). " +
		"Phased: bursts of 20 by call (two per round, removed between bursts): the burst's pods run one after the " +
		"other, then its 20 CreateContainer calls at once, then its 20 StartContainer calls at once; the total is " +
		"from StartContainer to RUNNING (ContainerStatus every 5 ms). In the concurrent bursts a runtime's creates and " +
		"starts overlap more the faster its RunPodSandbox returns; in the phased ones every runtime's calls meet 20 of " +
		"their kind in flight.\n\n")
	r.rowHead(w, "series")
	for _, s := range []struct{ par, phased, fig, label string }{
		{"1", "", "startlat-seq", "50 sequential"},
		{"20", "", "startlat-conc", "20 concurrent"},
		{"20", "1", "startlat-phased", "20 at once, phased"},
	} {
		params := map[string]string{"parallel": s.par, "phased": s.phased}
		for _, series := range []string{"total", "RunPodSandbox", "CreateContainer", "StartContainer"} {
			p := r.samples("startlat", "podunit", series, params)
			var c [][]float64
			for _, rt := range refs {
				c = append(c, r.samples("startlat", rt, series, params))
			}
			label := s.label + ", " + series
			if s.phased != "" && series == "total" {
				label = s.label + ", StartContainer to RUNNING"
			}
			if s.phased != "" && series == "RunPodSandbox" {
				label = s.label + ", RunPodSandbox (one after the other)"
			}
			r.row(w, label, p, c, "ms", s.fig)
		}
	}
}

// rowHead writes the header of a table of row()s.
func (r *run) rowHead(w writer, first string) {
	w("| %s | podunit p50 / p95 / p99 | %s | p50 ratio | p99 ratio |\n|---|---|%s---|---|\n",
		first, r.refHeads(" p50 / p95 / p99"), strings.Repeat("---|", len(refs)))
}

// row writes one p50/p95/p99 comparison row: podunit's samples p, each
// reference's samples c (in the order of refs), and podunit's p50 and p99
// over the better reference's p50 and p99.
func (r *run) row(w writer, label string, p []float64, c [][]float64, unit, fig string) {
	ps := r.missing(fig, "podunit")
	if len(p) > 0 {
		ps = pcts(p, unit)
	}
	cells := make([]string, len(refs))
	c50, c99 := make([]float64, len(refs)), make([]float64, len(refs))
	for i, rt := range refs {
		cells[i] = r.missing(fig, rt)
		if len(c[i]) > 0 {
			cells[i] = pcts(c[i], unit)
			c50[i], c99[i] = percentile(c[i], 50), percentile(c[i], 99)
		}
	}
	r50, r99 := "–", "–"
	if len(p) > 0 {
		r50, r99 = r.ratioBest(percentile(p, 50), c50, true), r.ratioBest(percentile(p, 99), c99, true)
	}
	w("| %s | %s | %s | %s | %s |\n", label, ps, strings.Join(cells, " | "), r50, r99)
}

func (r *run) renderRunp(w writer) {
	w("\n## RunPodSandbox, 50 pods sequential (test/bench/cribench runp)\n\n")
	w("One untimed warm-up pod, then 50 RunPodSandbox calls one after the other (CNI bridge network), pods kept until the end.\n\n")
	r.rowHead(w, "series")
	var c [][]float64
	for _, rt := range refs {
		c = append(c, r.samples("runp", rt, "RunPodSandbox", nil))
	}
	r.row(w, "RunPodSandbox", r.samples("runp", "podunit", "RunPodSandbox", nil), c, "ms", "runp")
}

func (r *run) renderCritest(w writer) {
	w("\n## critest -benchmark (test/critest/benchmark.yaml: 100 container and 100 pod lifecycles, 50 image cycles, 2 in parallel)\n\n")
	keys := map[string]bool{}
	for _, rt := range runtimes {
		for k := range r.critest[rt] {
			keys[k] = true
		}
	}
	r.rowHead(w, "operation")
	for _, k := range sortedKeys(keys) {
		fig := "critest-pods"
		if strings.HasPrefix(k, "container_") {
			fig = "critest-containers"
		}
		var c [][]float64
		for _, rt := range refs {
			c = append(c, r.critest[rt][k])
		}
		r.row(w, k, r.critest["podunit"][k], c, "ms", fig)
	}
	var c [][]float64
	for _, rt := range refs {
		c = append(c, r.scratch[rt])
	}
	r.row(w, "start a container from scratch (one timing per round)", r.scratch["podunit"], c, "ms", "critest-containers")
}

func (r *run) renderDensity(w writer) {
	w("\n## Host overhead per running container (test/bench/cribench density)\n\n")
	w("Two pod shapes, each measured in a run of its own: pods of one `sleep` container, and pods of three (fair to " +
		"containerd, whose shim serves every container of its pod). Before each run bench.sh restarts the runtime's " +
		"daemon (podunit's with its log relay and session server), so that the baseline is a freshly started daemon's and not one grown by the figures before (its age at " +
		"the baseline is given under each table when the run recorded it). Pods are started two at a time up to each " +
		"count of pods in the table; 5 s settle, then the processes of the harness are read twice 1 s apart (only " +
		"processes present both times count). " +
		"*Other processes*: processes that appeared since the 0-pod baseline and are not a container's own " +
		"`sleep` (shims, pause, helpers). RSS is VmRSS (shared pages counted in each process); PSS splits shared pages. " +
		"Memory per container = (RSS, or PSS, of other processes + growth of systemd PID 1, journald, dbus-daemon and the " +
		"runtime's own long-lived processes' RSS) / running containers (pods × containers per pod); the targets use the " +
		"PSS figure. The runtime's own processes are those " +
		"running the daemon's binary at the baseline: the containerd under test (the one started with its own config file; " +
		"the other containerd is idle in the harness meanwhile); podunit, its node-wide log relay (`podunit-logrelay`) " +
		"and its session server (`podunit _stream`), whose RSS is summed in the last column and split by process " +
		"under each table.\n")
	for _, n := range densityShapes {
		r.renderDensityShape(w, n)
	}
}

// renderDensityShape writes the overhead table of one pod shape (n
// containers per pod) and the daemons' ages at its baselines.
func (r *run) renderDensityShape(w writer, n int) {
	w("\n### %s\n\n", shapeLabel(n))
	w("| runtime | pods | containers | other processes | their RSS | their PSS | PID 1 RSS Δ | journald RSS Δ | dbus RSS Δ | runtime RSS Δ | memory per container (RSS / PSS) | runtime RSS |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var ages, split []string
	for _, rt := range runtimes {
		res := r.densityResult(rt, n)
		if res == nil || len(res.Density) == 0 {
			w("| %s | | | %s | | | | | | | | |\n", r.label(rt), r.missing(densityFig(n), rt))
			continue
		}
		if s := rssSplit(res.Density); s != "" {
			split = append(split, fmt.Sprintf("%s: %s", r.label(rt), s))
		}
		age := "not recorded"
		if a := res.Params["daemon_age_s"]; a != "" {
			age = a + " s"
		}
		ages = append(ages, fmt.Sprintf("%s %s", r.label(rt), age))
		d := res.Density
		b := d[0]
		for _, p := range d {
			per := "–"
			if p.Count > 0 {
				per = fmt.Sprintf("%.0f / %.0f KiB", perContainerKiB([]DensityPoint{b, p}, n), perContainerPSSKiB([]DensityPoint{b, p}, n))
			}
			w("| %s | %d | %d | %d %s | %d KiB | %d KiB | %+d KiB | %+d KiB | %+d KiB | %+d KiB | %s | %d KiB |\n", r.label(rt), p.Count, p.Count*n,
				p.OverheadProcs, parenComms(p.OverheadComms), p.OverheadRSS, p.OverheadPSS,
				p.PID1RSS-b.PID1RSS, p.JournaldRSS-b.JournaldRSS, p.DBusRSS-b.DBusRSS, p.DaemonRSS-b.DaemonRSS, per, p.DaemonRSS)
		}
	}
	if len(ages) > 0 {
		w("\nThe daemon's age at the 0-pod baseline: %s.\n", strings.Join(ages, ", "))
	}
	if len(split) > 0 {
		w("\nThe runtime's RSS by process, at the 0-pod baseline → the largest count: %s.\n", strings.Join(split, "; "))
	}
}

// rssSplit describes each of the runtime's own processes' RSS at the first
// and last point, for results that recorded the split and have more than one
// such process.
func rssSplit(d []DensityPoint) string {
	b, l := d[0], d[len(d)-1]
	if len(l.DaemonRSSBy) < 2 && len(b.DaemonRSSBy) < 2 {
		return ""
	}
	var names []string
	for k := range b.DaemonRSSBy {
		names = append(names, k)
	}
	for k := range l.DaemonRSSBy {
		if _, ok := b.DaemonRSSBy[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("`%s` %d → %d KiB (%+d)", k, b.DaemonRSSBy[k], l.DaemonRSSBy[k], l.DaemonRSSBy[k]-b.DaemonRSSBy[k]))
	}
	return strings.Join(parts, ", ")
}

func parenComms(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	return "(" + comms(m) + ")"
}

func (r *run) renderLogs(w writer) {
	w("\n## Log throughput (test/bench/logs.sh)\n\n")
	w("A container prints 1 000 000 numbered lines of 100 bytes as fast as it can (host-network pod); the clock runs " +
		"until the CRI log file holds all of them, checked in order with none lost or repeated. Median over rounds.\n\n")
	w("The runtime's CPU is every process of the harness but the container's own (`seq`, `sed`, `cat`, `sh`): " +
		"the runtime, its log path and journald. With a million lines per run it is also CPU seconds per million lines.\n\n")
	w("| runtime | runs | lines/s | MB/s | journald CPU s | host CPU s | runtime CPU s per 10⁶ lines |\n|---|---|---|---|---|---|---|\n")
	meds := map[string]float64{}
	for _, rt := range logSeries {
		l := r.logs[rt]
		if len(l) == 0 {
			if rt != noJournal || r.failures["logs/"+rt] != "" {
				w("| %s | %s | | | | | |\n", r.label(rt), r.missing("logs", rt))
			}
			continue
		}
		var lps, mbs, jc, hc []float64
		for _, x := range l {
			lps, mbs, jc, hc = append(lps, x.linesPerSec), append(mbs, x.mbPerSec), append(jc, x.journaldCPU), append(hc, x.hostCPU)
		}
		meds[rt] = median(lps)
		w("| %s | %d | %.0f | %.2f | %.2f | %.2f | %s |\n", r.label(rt), len(l), median(lps), median(mbs), median(jc), median(hc),
			r.runtimeLogCPU(rt))
	}
	var c []float64
	for _, rt := range refs {
		c = append(c, meds[rt])
	}
	if ratio := r.ratioBest(meds["podunit"], c, false); ratio != "–" {
		w("\nRatio (lines/s, to the faster containerd): %s with journald on", ratio)
		if meds[noJournal] > 0 {
			w(", %s with it off", r.ratioBest(meds[noJournal], c, false))
		}
		w(".\n")
	}
	w("\nCPU seconds per log run (mean over runs) by process name in the harness, sampled every 100 ms " +
		"while logs.sh ran (`cribench cpuwatch`; includes the container's own `seq`/`sed`/`cat`; `containerd` is both " +
		"containerd daemons, the one not under test idle):\n\n")
	w("| runtime | CPU by process |\n|---|---|\n")
	for _, rt := range logSeries {
		m, n := r.logCPU[rt], len(r.logs[rt])
		if len(m) == 0 || n == 0 {
			if rt != noJournal {
				w("| %s | not measured |\n", r.label(rt))
			}
			continue
		}
		names := sortedKeys(m)
		sort.Slice(names, func(i, j int) bool { return m[names[i]] > m[names[j]] })
		var parts []string
		for _, name := range names[:min(len(names), 8)] {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, m[name]/float64(n)))
		}
		w("| %s | %s |\n", r.label(rt), strings.Join(parts, ", "))
	}
}

func (r *run) renderPull(w writer) {
	w("\n## Image pull + unpack (test/bench/pull.sh)\n\n")
	w("`docker.io/podunit-bench/multilayer:50m`: 5 layers of 10 MB random data (incompressible), built and pushed " +
		"to the local registry by pull.sh when missing; removed before every pull, so each pull downloads and unpacks everything.\n\n")
	w("| runtime | pulls | median s | mean s |\n|---|---|---|---|\n")
	for _, rt := range runtimes {
		v := r.pull[rt]
		if len(v) == 0 {
			w("| %s | %s | | |\n", r.label(rt), r.missing("pull", rt))
			continue
		}
		w("| %s | %d | %.3f | %.3f |\n", r.label(rt), len(v), median(v), mean(v))
	}
	var c []float64
	for _, rt := range refs {
		c = append(c, median(r.pull[rt]))
	}
	if ratio := r.ratioBest(median(r.pull["podunit"]), c, true); ratio != "–" {
		w("\nRatio (median, to the faster containerd): %s.\n", ratio)
	}
}

func (r *run) renderDaemon(w writer) {
	w("\n## Daemon memory\n\n| runtime | RSS idle (after start, before any benchmark) | RSS at the density figure's largest count (1 container per pod) |\n|---|---|---|\n")
	for _, rt := range runtimes {
		idle := "not measured"
		if v, ok := r.idle(rt + "_rss_kib"); ok {
			idle = fmt.Sprintf("%.1f MiB", v/1024)
		}
		full := r.missing(densityFig(1), rt)
		if d := r.density(rt, 1); len(d) > 0 {
			l := d[len(d)-1]
			full = fmt.Sprintf("%.1f MiB (at %d)", float64(l.DaemonRSS)/1024, l.Count)
		}
		w("| %s | %s | %s |\n", r.label(rt), idle, full)
	}
}

func (r *run) renderProfile(w writer) {
	w("\n## Profile of podunit\n\n")
	top, err := os.ReadFile(r.dir + "/pprof-top.txt")
	if err != nil {
		w("No profile was taken in this run.\n")
		return
	}
	w("Taken after the measured rounds (those used the plain binary): podunit restarted from a build that only adds a "+
		"net/http/pprof listener (test/bench/overlay, `go build -overlay`), 40 s CPU profile while cribench %s ran 50 pods. "+
		"`go tool pprof -top`, flat:\n\n```\n", r.machine["profile_workload"])
	w("%s\n```\n", head(string(top), 28))
	if cum, err := os.ReadFile(r.dir + "/pprof-cum.txt"); err == nil {
		w("\nCumulative (`-top -cum`):\n\n```\n%s\n```\n", head(string(cum), 45))
	}
	if pull, err := os.ReadFile(r.dir + "/pprof-pull-cum.txt"); err == nil {
		w("\nCPU during 6 pulls of the 50 MB image (pull.sh, 15 s profile; layers are unpacked in the daemon's process, so all of a pull is in it), `-top -cum`:\n\n```\n%s\n```\n", head(string(pull), 45))
	}
	if blk, err := os.ReadFile(r.dir + "/pprof-block.txt"); err == nil {
		w("\nBlocking (`/debug/pprof/block`, events ≥ 100 µs, since the profiled daemon started; `-top -cum`) — where request goroutines wait:\n\n```\n%s\n```\n", head(string(blk), 45))
	}
}

func head(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(len(lines), n)], "\n")
}

// containerProcs are the log container's own processes (logs.sh's writer);
// everything else cpuwatch saw worked for the runtime's log path.
var containerProcs = map[string]bool{"seq": true, "sed": true, "cat": true, "sh": true}

// runtimeLogCPU is the mean CPU seconds per log run of every process but
// the container's own, or "–" when cpuwatch recorded nothing.
func (r *run) runtimeLogCPU(rt string) string {
	m, n := r.logCPU[rt], len(r.logs[rt])
	if len(m) == 0 || n == 0 {
		return "–"
	}
	var sum float64
	for name, s := range m {
		if !containerProcs[name] {
			sum += s
		}
	}
	return fmt.Sprintf("%.2f", sum/float64(n))
}
