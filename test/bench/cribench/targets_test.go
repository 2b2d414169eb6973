package main

import (
	"strings"
	"testing"
)

// latencies is n samples: v, but the last two tail (the nearest-rank p99
// of 100 samples is the 99th).
func latencies(n int, v, tail float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v
	}
	s[n-1], s[n-2] = tail, tail
	return s
}

// issue 20's latency targets: podunit's p50 and p99 each against the better
// containerd at that percentile (which may be a different one), met only
// when every ratio is within the limit; the start totals by p50 alone at
// half the better containerd's.
func TestLatencyTargets(t *testing.T) {
	r := testRun()
	r.critest = map[string]map[string][]float64{
		"podunit":     {"container_benchmark_data/StatusContainer": latencies(100, 1, 3), "pod_benchmark_data/StopPod": latencies(100, 40, 80)},
		"containerd":  {"container_benchmark_data/StatusContainer": latencies(100, 1, 9), "pod_benchmark_data/StopPod": latencies(100, 90, 120)},
		"containerd2": {"container_benchmark_data/StatusContainer": latencies(100, 2, 2), "pod_benchmark_data/StopPod": latencies(100, 95, 100)},
	}
	r.failures["critest-containers/podunit"] = "unused: podunit has samples"
	start := func(rt string, total, create float64) Result {
		return Result{Kind: "startlat", Runtime: rt, Params: map[string]string{"parallel": "1"}, Samples: map[string][]float64{
			"total": latencies(50, total, total), "CreateContainer": latencies(50, create, create), "StartContainer": latencies(50, 80, 80)}}
	}
	r.results = []Result{start("podunit", 100, 10), start("containerd", 210, 9), start("containerd2", 190, 12)}
	gs := r.targets()

	// p50 1 against 1 (1.6), but p99 3 against 2 (2.4): behind on the tail
	g := goalOf(t, gs, "critest -benchmark container_benchmark_data/StatusContainer, p50 / p99")
	if g.ratio != "1.00 (1.6) / 1.50 (2.4)" || g.verdict != "**behind**" || g.podunit != "1.0 / 3.0 ms" {
		t.Errorf("StatusContainer = %+v; want ratios 1.00 (1.6) / 1.50 (2.4), behind", g)
	}
	g = goalOf(t, gs, "critest -benchmark pod_benchmark_data/StopPod")
	if g.ratio != "0.44 (1.6) / 0.80 (2.4)" || g.verdict != "met" {
		t.Errorf("StopPod = %+v; want 0.44 (1.6) / 0.80 (2.4), met", g)
	}
	// 100 over 190: 0.53 > 0.5
	g = goalOf(t, gs, "pod + container start to RUNNING (50 sequential), p50")
	if g.ratio != "0.53 (2.4)" || g.verdict != "**behind**" || g.goal != "ratio ≤ 0.5" {
		t.Errorf("sequential start = %+v; want 0.53 (2.4) against ≤ 0.5, behind", g)
	}
	g = goalOf(t, gs, "CreateContainer in the pod + container start (50 sequential), p50 / p99")
	if g.ratio != "1.11 (1.6) / 1.11 (1.6)" || g.verdict != "**behind**" {
		t.Errorf("sequential CreateContainer = %+v; want 1.11 (1.6) twice, behind", g)
	}
	g = goalOf(t, gs, "StartContainer in the pod + container start (50 sequential)")
	if g.verdict != "met" {
		t.Errorf("sequential StartContainer (equal) = %+v; want met", g)
	}
	// no concurrent samples at all: not measured, never met
	g = goalOf(t, gs, "pod + container start to RUNNING (bursts of 20 concurrent)")
	if g.verdict != "not measured" || !strings.HasPrefix(g.podunit, "not measured") {
		t.Errorf("concurrent start without samples = %+v; want not measured", g)
	}
	// a reference without samples does not count; none at all: not measured
	r.critest["containerd"] = nil
	r.critest["containerd2"] = nil
	g = goalOf(t, r.targets(), "critest -benchmark pod_benchmark_data/StopPod")
	if g.verdict != "not measured" || g.ratio != "–" {
		t.Errorf("StopPod without references = %+v; want not measured", g)
	}
}

// The calls under concurrency are judged in the phased bursts only: the
// pod + container bursts give the start total, and neither kind of burst's
// samples leak into the other's rows.
func TestPhasedTargets(t *testing.T) {
	r := testRun()
	burst := func(rt string, phased bool, create, start float64) Result {
		p := map[string]string{"parallel": "20"}
		if phased {
			p["phased"] = "1"
		}
		total := 2000.0
		switch {
		case phased:
			total = start / 100 // far below the others: mixed in, it would move their p50
		case rt == "podunit":
			total = 1000
		}
		return Result{Kind: "startlat", Runtime: rt, Params: p, Samples: map[string][]float64{
			"total": latencies(40, total, total), "RunPodSandbox": latencies(40, 50, 50),
			"CreateContainer": latencies(40, create, create), "StartContainer": latencies(40, start, start)}}
	}
	r.results = []Result{
		// in the pod + container bursts podunit's calls are slower ...
		burst("podunit", false, 100, 1500), burst("containerd", false, 120, 1400), burst("containerd2", false, 40, 1200),
		// ... and in the phased ones faster than both containerds
		burst("podunit", true, 60, 1700), burst("containerd", true, 130, 2500), burst("containerd2", true, 120, 2300),
	}
	gs := r.targets()
	g := goalOf(t, gs, "CreateContainer, 20 at once (phased bursts)")
	if g.ratio != "0.50 (2.4) / 0.50 (2.4)" || g.verdict != "met" {
		t.Errorf("phased CreateContainer = %+v; want 0.50 (2.4) twice, met", g)
	}
	g = goalOf(t, gs, "StartContainer, 20 at once (phased bursts)")
	if g.ratio != "0.74 (2.4) / 0.74 (2.4)" || g.verdict != "met" {
		t.Errorf("phased StartContainer = %+v; want 0.74 (2.4) twice, met", g)
	}
	// the start total of the pod + container bursts only: 1000 against 2000
	g = goalOf(t, gs, "pod + container start to RUNNING (bursts of 20 concurrent)")
	if g.ratio != "0.50 (1.6)" || g.verdict != "met" {
		t.Errorf("concurrent start = %+v; want 0.50 (1.6), met", g)
	}
	for _, g := range gs {
		if strings.Contains(g.figure, "in the pod + container start (bursts") {
			t.Errorf("a per-call target of the pod + container bursts: %+v", g)
		}
	}
	// without phased samples the calls under concurrency are not measured
	r.results = r.results[:3]
	if g := goalOf(t, r.targets(), "StartContainer, 20 at once (phased bursts)"); g.verdict != "not measured" {
		t.Errorf("phased StartContainer without samples = %+v; want not measured", g)
	}
}
