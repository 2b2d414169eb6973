package main

import (
	"fmt"
	"strings"
)

// plegModes are the pleg figure's series: the kubelet's generic PLEG alone,
// and with featureGates EventedPLEG (bench.sh pleg_figure).
var plegModes = []string{"generic", "evented"}

// renderPleg is the kubelet's own CPU with many static pods on podunit,
// generic against evented PLEG.
func (r *run) renderPleg(w writer) {
	w("\n## Kubelet CPU, generic vs evented PLEG (bench.sh pleg)\n\n")
	cpu := map[string][]float64{}
	for _, m := range plegModes {
		cpu[m] = r.samples("pleg", "podunit", "kubelet_cpu_s", map[string]string{"mode": m})
	}
	if len(cpu["generic"]) == 0 && len(cpu["evented"]) == 0 {
		if why, ok := r.failures["pleg/podunit"]; ok {
			w("Not measured: %s\n", mdEscape(why))
			return
		}
		w("Not run (`ONLY=pleg`, not in the default list; the last hand-started run is in docs/benchmarks-earlier.md).\n")
		return
	}
	pods, hold, from := "", 0.0, "the CPU time of its unit's cgroup (systemd's CPUUsageNSec, or cpuacct.usage)"
	for _, res := range r.results {
		if res.Kind == "pleg" {
			pods = res.Params["pods"]
			hold = mean(res.Samples["hold_s"])
			if res.Params["kubelet_cpu_from"] == "process" {
				from = "utime + stime of its process (the harness gave the unit no CPU accounting)"
			}
			break
		}
	}
	w("A kubelet %s (test/kubelet/build-kubelet.sh) on podunit in the bench harness, %s static pods of one busybox "+
		"`sleep` container each, started once; the kubelet is restarted in each mode and adopts them, and after every pod "+
		"shows running and a settle time, %s is read across a hold of %.0f s, as is podunit's. Rounds alternate the modes. Relists and events are the kubelet's own counters over the same "+
		"hold (kubelet_pleg_relist_duration_seconds_count, kubelet_pleg_pod_relist_duration_seconds_count, "+
		"kubelet_evented_pleg_connection_latency_seconds_count).\n\n", r.machine["pleg_kubelet"], pods, from, hold)
	w("| | generic PLEG | EventedPLEG |\n|---|---|---|\n")
	row := func(label, series string, format func([]float64) string) {
		cells := make([]string, len(plegModes))
		for i, m := range plegModes {
			v := r.samples("pleg", "podunit", series, map[string]string{"mode": m})
			cells[i] = "–"
			if len(v) > 0 {
				cells[i] = format(v)
			}
		}
		w("| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	each := func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprintf("%.2f", x)
		}
		return strings.Join(s, ", ")
	}
	counts := func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprintf("%.0f", x)
		}
		return strings.Join(s, ", ")
	}
	row("kubelet CPU over the hold, each round (s)", "kubelet_cpu_s", each)
	if hold > 0 {
		row("kubelet CPU, mean (% of one core)", "kubelet_cpu_s", func(v []float64) string {
			return fmt.Sprintf("%.1f %%", 100*mean(v)/hold)
		})
	}
	row("podunit CPU over the hold, each round (s)", "podunit_cpu_s", each)
	row("global relists in the hold", "relists", counts)
	row("single-pod relists in the hold", "pod_relists", counts)
	row("container events the kubelet took in the hold", "events", counts)
	if g, e := mean(cpu["generic"]), mean(cpu["evented"]); g > 0 && e > 0 {
		w("\nEvented / generic kubelet CPU: %s.\n", ratio(e, g))
	}
}
