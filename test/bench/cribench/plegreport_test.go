package main

import (
	"fmt"
	"strings"
	"testing"
)

func plegResult(mode string, kubelet, podunit, relists, podRelists, events float64) Result {
	return Result{Kind: "pleg", Runtime: "podunit", Params: map[string]string{"mode": mode, "pods": "100"},
		Samples: map[string][]float64{"kubelet_cpu_s": {kubelet}, "podunit_cpu_s": {podunit}, "hold_s": {60},
			"relists": {relists}, "pod_relists": {podRelists}, "events": {events}}}
}

func TestRenderPleg(t *testing.T) {
	r := testRun()
	r.machine["pleg_kubelet"] = "v1.37.2"
	r.results = []Result{
		plegResult("generic", 3, 1.5, 60, 2, 0),
		plegResult("evented", 3.3, 1.6, 60, 5, 12),
		plegResult("evented", 2.7, 1.4, 59, 4, 10),
		plegResult("generic", 3, 1.5, 60, 1, 0),
	}
	var b strings.Builder
	r.renderPleg(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	doc := b.String()
	for _, want := range []string{
		"A kubelet v1.37.2 (test/kubelet/build-kubelet.sh) on podunit in the bench harness, 100 static pods",
		"shows running and a settle time, the CPU time of its unit's cgroup (systemd's CPUUsageNSec, or cpuacct.usage) is read across a hold of 60 s",
		"| kubelet CPU over the hold, each round (s) | 3.00, 3.00 | 3.30, 2.70 |",
		"| kubelet CPU, mean (% of one core) | 5.0 % | 5.0 % |",
		"| podunit CPU over the hold, each round (s) | 1.50, 1.50 | 1.60, 1.40 |",
		"| global relists in the hold | 60, 60 | 60, 59 |",
		"| single-pod relists in the hold | 2, 1 | 5, 4 |",
		"| container events the kubelet took in the hold | 0, 0 | 12, 10 |",
		"Evented / generic kubelet CPU: 1.00.",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("pleg section lacks %q:\n%s", want, doc)
		}
	}

	b.Reset()
	testRun().renderPleg(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	if !strings.Contains(b.String(), "Not run") {
		t.Errorf("no-pleg run: %q", b.String())
	}
	b.Reset()
	failed := testRun()
	failed.failures["pleg/podunit"] = "pleg: only 80 of 100 pods running after 900 s"
	failed.renderPleg(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	if !strings.Contains(b.String(), "Not measured: pleg: only 80 of 100 pods running after 900 s") {
		t.Errorf("failed pleg run: %q", b.String())
	}
}
