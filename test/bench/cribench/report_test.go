package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBetter(t *testing.T) {
	for _, c := range []struct {
		name      string
		vals      []float64
		lowerWins bool
		want      float64
		at        int
	}{
		{"lower latency wins, first", []float64{10, 12}, true, 10, 0},
		{"lower latency wins, second", []float64{12, 10}, true, 10, 1},
		{"higher throughput wins, first", []float64{500, 400}, false, 500, 0},
		{"higher throughput wins, second", []float64{400, 500}, false, 500, 1},
		{"tie keeps the first", []float64{7, 7}, true, 7, 0},
		{"first not measured", []float64{0, 12}, true, 12, 1},
		{"second not measured", []float64{12, 0}, true, 12, 0},
		{"a missing one is not the lowest", []float64{0, 12}, true, 12, 1},
		{"a missing one is not the highest either", []float64{300, 0}, false, 300, 0},
		{"none measured", []float64{0, 0}, true, 0, -1},
		{"no references", nil, false, 0, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, at := better(c.vals, c.lowerWins)
			if got != c.want || at != c.at {
				t.Errorf("better(%v, %v) = %v, %d; want %v, %d", c.vals, c.lowerWins, got, at, c.want, c.at)
			}
		})
	}
}

func testRun() *run {
	return &run{machine: map[string]string{"containerd": "1.6.20~ds1", "containerd2": "2.4.2"}, failures: map[string]string{}}
}

func TestRatioBest(t *testing.T) {
	r := testRun()
	for _, c := range []struct {
		p         float64
		vals      []float64
		lowerWins bool
		want      string
	}{
		{8, []float64{10, 16}, true, "0.80 (1.6)"},
		{8, []float64{16, 10}, true, "0.80 (2.4)"},
		{100, []float64{400, 500}, false, "0.20 (2.4)"},
		{8, []float64{0, 16}, true, "0.50 (2.4)"},
		{8, []float64{0, 0}, true, "–"},
		{0, []float64{10, 16}, true, "–"},
	} {
		if got := r.ratioBest(c.p, c.vals, c.lowerWins); got != c.want {
			t.Errorf("ratioBest(%v, %v, %v) = %q; want %q", c.p, c.vals, c.lowerWins, got, c.want)
		}
	}
	// a run that recorded no version (older results) names the runtime
	if got := (&run{machine: map[string]string{}}).ratioBest(1, []float64{2, 0}, true); got != "0.50 (containerd)" {
		t.Errorf("without versions: %q", got)
	}
}

// Each percentile of a row is compared with the better reference for that
// percentile, which need not be the same containerd.
func TestRowBetterPerPercentile(t *testing.T) {
	r := testRun()
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p := []float64{5, 5, 5, 5, 30}
	c16 := []float64{10, 10, 10, 10, 20} // better p99
	c24 := []float64{8, 8, 8, 8, 60}     // better p50
	r.row(w, "op", p, [][]float64{c16, c24}, "ms", "critest-pods")
	got := b.String()
	if !strings.HasSuffix(got, "| 0.62 (2.4) | 1.50 (1.6) |\n") {
		t.Errorf("row = %q; want p50 ratio against 2.4, p99 against 1.6", got)
	}
	if n := strings.Count(got, "|"); n != 7 {
		t.Errorf("row has %d bars, want 7 (label, podunit, two references, two ratios): %q", n, got)
	}
	b.Reset()
	r.failures["critest-pods/containerd2"] = "cribench: rpc error: code = Unknown desc = boom"
	r.row(w, "op", p, [][]float64{c16, nil}, "ms", "critest-pods")
	if got := b.String(); !strings.Contains(got, "not measured: Unknown: boom") || !strings.HasSuffix(got, "| 0.50 (1.6) | 1.50 (1.6) |\n") {
		t.Errorf("row with one reference missing = %q", got)
	}
}

func TestJudgeAgainstBetter(t *testing.T) {
	r := testRun()
	ok := func(x float64) bool { return x <= 0.7 }
	g := r.judge("start", "ratio ≤ 0.7", 65, []float64{100, 90}, "ms", true, ok, "startlat-seq")
	if g.ratio != "0.72 (2.4)" || g.verdict != "**behind**" || strings.Join(g.refs, ",") != "100.0 ms,90.0 ms" {
		t.Errorf("judge = %+v; want ratio 0.72 against 2.4, behind", g)
	}
	g = r.judge("logs", "ratio ≥ 1.0", 450, []float64{400, 500}, "lines/s", false, func(x float64) bool { return x >= 1 }, "logs")
	if g.ratio != "0.90 (2.4)" || g.verdict != "**behind**" {
		t.Errorf("judge (throughput) = %+v; want 0.90 against 2.4, behind", g)
	}
	g = r.judge("start", "ratio ≤ 0.7", 65, []float64{100, 0}, "ms", true, ok, "startlat-seq")
	if g.ratio != "0.65 (1.6)" || g.verdict != "met" || g.refs[1] != "not measured: not run" {
		t.Errorf("judge with one reference = %+v", g)
	}
	g = r.judge("start", "ratio ≤ 0.7", 65, []float64{0, 0}, "ms", true, ok, "startlat-seq")
	if g.verdict != "not measured" || g.ratio != "–" {
		t.Errorf("judge without references = %+v", g)
	}
}

func TestDaemonSpec(t *testing.T) {
	c16 := proc{Comm: "containerd", Cmdline: []byte("/usr/bin/containerd\x00--config\x00/var/lib/bench-containerd/config.toml\x00")}
	c24 := proc{Comm: "containerd", Cmdline: []byte("/var/cache/x/containerd\x00--config\x00/var/lib/bench-containerd2/config.toml\x00")}
	shim := proc{Comm: "containerd-shim", Cmdline: []byte("/usr/bin/containerd-shim-runc-v2\x00-id\x00x\x00")}
	relay := proc{Comm: "podunit-logrela", Cmdline: []byte("podunit\x00_logrelay\x00")}
	pu := proc{Comm: "podunit", Cmdline: []byte("podunit\x00serve\x00")}
	d2, err := parseDaemon("containerd@/var/lib/bench-containerd2/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	if d2.ownProcess(c16) || !d2.ownProcess(c24) || d2.ownProcess(shim) {
		t.Errorf("containerd 2 spec: 1.6 %v, 2.4 %v, shim %v; want false true false", d2.ownProcess(c16), d2.ownProcess(c24), d2.ownProcess(shim))
	}
	byName, _ := parseDaemon("containerd")
	if !byName.ownProcess(c16) || !byName.ownProcess(c24) {
		t.Error("a spec without @ARG matches every process of that name")
	}
	podunit, _ := parseDaemon("podunit")
	if !podunit.ownProcess(pu) || !podunit.ownProcess(relay) || podunit.ownProcess(c16) {
		t.Error("podunit's own processes are the daemon and its log relay")
	}
	// the argument must be a whole argument, not a prefix of one
	d1, _ := parseDaemon("containerd@/var/lib/bench-containerd")
	if d1.ownProcess(c16) {
		t.Error("a prefix of an argument matched")
	}
	if _, err := parseDaemon("@x"); err == nil {
		t.Error("a spec without a name parsed")
	}
}

// A results directory of an older run (one containerd, no containerd2)
// still renders, with containerd 2 as not run.
func TestReportOlderRun(t *testing.T) {
	dir := t.TempDir()
	must := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must("machine.env", "date=2026-01-01T00:00:00Z\ncontainerd=1.6.20~ds1\n")
	must("results.jsonl", `{"kind":"runp","runtime":"podunit","samples":{"RunPodSandbox":[5,6]}}`+"\n"+
		`{"kind":"runp","runtime":"containerd","samples":{"RunPodSandbox":[10,12]}}`+"\n")
	out := filepath.Join(dir, "out.md")
	if err := cmdReport([]string{"-results", dir, "-out", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{
		"# Benchmarks: podunit beside containerd 1.6.20~ds1\n",
		"| RunPodSandbox | 5.0 / 6.0 / 6.0 ms (n=2) | 10.0 / 12.0 / 12.0 ms (n=2) | not measured: not run | 0.50 (1.6) | 0.50 (1.6) |",
		"## References",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// The journald-off series is read from its own log files (not counted as
// podunit's), gets its own row and ratio, and its runtime CPU leaves out the
// container's own processes.
func TestReportLogsJournaldOff(t *testing.T) {
	dir := t.TempDir()
	must := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, lps float64) string {
		return fmt.Sprintf("%s run 1  1.00 s  %.0f lines/s  100.00 MB/s  host CPU 1.50 s  journald CPU 0.50 s\n", name, lps)
	}
	must("machine.env", "date=2026-01-01T00:00:00Z\ncontainerd=1.6.20~ds1\ncontainerd2=2.4.2\n")
	must("logs-podunit-1.log", run("podunit", 2000)+"cpu podunit systemd-journal 0.60\ncpu podunit sed 0.80\ncpu podunit podunit-logrela 0.30\n")
	must("logs-podunit-nojournal-1.log", run("podunit-nojournal", 3000)+"cpu podunit-nojournal podunit-logrela 0.25\ncpu podunit-nojournal seq 0.30\n")
	must("logs-containerd-1.log", run("containerd", 500)+"cpu containerd containerd 3.00\n")
	must("logs-containerd2-1.log", run("containerd2", 1000)+"cpu containerd2 containerd 2.00\ncpu containerd2 cat 0.10\n")
	r, err := loadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.logs["podunit"]); n != 1 {
		t.Fatalf("podunit has %d log runs, want 1 (the journald-off file must not count)", n)
	}
	var b strings.Builder
	r.renderLogs(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	doc := b.String()
	for _, want := range []string{
		"| podunit | 1 | 2000 | 100.00 | 0.50 | 1.50 | 0.90 |",
		"| podunit, journald off | 1 | 3000 | 100.00 | 0.50 | 1.50 | 0.25 |",
		"| containerd 2.4.2 | 1 | 1000 | 100.00 | 0.50 | 1.50 | 2.00 |",
		"Ratio (lines/s, to the faster containerd): 2.00 (2.4) with journald on, 3.00 (2.4) with it off.",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("logs section lacks %q:\n%s", want, doc)
		}
	}
}
