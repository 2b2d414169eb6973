package main

import (
	"fmt"
	"strings"
)

// scaleTargets are issue 19's scale targets, judged on podunit's scale run;
// the references' figures are shown beside them.
func (r *run) scaleTargets() []goal {
	type target struct {
		figure, want string
		value        func(s *ScaleResult) string
		ok           func(s *ScaleResult) bool
	}
	ts := []target{
		{"scale: containers running (pods × containers asked)", "all asked",
			func(s *ScaleResult) string { return fmt.Sprintf("%d of %d", s.Started, s.Wanted) },
			func(s *ScaleResult) bool { return s.Started == s.Wanted }},
		{"scale: D-Bus timeouts / deadline errors in the runtime's log", "= 0",
			func(s *ScaleResult) string { return fmt.Sprint(s.Timeouts) },
			func(s *ScaleResult) bool { return s.Timeouts == 0 }},
		{"scale: PID 1 mountinfo lines, all running − baseline", "= 0",
			func(s *ScaleResult) string { return fmt.Sprintf("%+d", s.PID1Mounts[1]-s.PID1Mounts[0]) },
			func(s *ScaleResult) bool { return s.PID1Mounts[1] == s.PID1Mounts[0] }},
		{"scale: daemon-reload every second, containers whose limits or state changed", "= 0",
			func(s *ScaleResult) string {
				return fmt.Sprintf("%d changes over %d containers, %d reloads", len(s.Changed), s.Checked, s.Reloads)
			},
			func(s *ScaleResult) bool {
				return len(s.Changed) == 0 && s.Checked == s.Started && s.LimitsAsAsked == s.Checked && s.RunningAfter == s.Started && s.Reloads > 0
			}},
		{"scale: leaked units, mounts, cgroups, netns after removal", "= 0",
			func(s *ScaleResult) string { return leakCell(s.Leaks) },
			func(s *ScaleResult) bool { return s.Leaks.Total() == 0 }},
		{"churn: PID 1 RSS growth over the cycles", "< 5%",
			func(s *ScaleResult) string {
				if s.Churn == nil {
					return "no churn run"
				}
				return fmt.Sprintf("%+.1f%% over %d cycles", s.Churn.Growth(), s.Churn.Cycles)
			},
			func(s *ScaleResult) bool { return s.Churn != nil && s.Churn.Growth() < 5 }},
		{"churn: leaked units, mounts, cgroups, netns", "= 0",
			func(s *ScaleResult) string {
				if s.Churn == nil {
					return "no churn run"
				}
				return leakCell(s.Churn.Leaks)
			},
			func(s *ScaleResult) bool { return s.Churn != nil && s.Churn.Leaks.Total() == 0 }},
	}
	ran := false
	for _, rt := range runtimes {
		ran = ran || r.scale(rt) != nil || r.failures["scale/"+rt] != ""
	}
	if !ran { // not in this run's ONLY: no rows of "not run"
		return nil
	}
	var out []goal
	for _, t := range ts {
		g := goal{figure: t.figure, goal: t.want, ratio: "–", verdict: "not measured", podunit: r.missing("scale", "podunit")}
		if s := r.scale("podunit"); s != nil {
			g.podunit, g.verdict = t.value(s), "met"
			if !t.ok(s) {
				g.verdict = "**behind**"
			}
		}
		for _, rt := range refs {
			cell := r.missing("scale", rt)
			if s := r.scale(rt); s != nil {
				cell = t.value(s)
			}
			g.refs = append(g.refs, cell)
		}
		out = append(out, g)
	}
	return out
}

func leakCell(l Leaks) string {
	return fmt.Sprintf("%d units, %d mounts, %d cgroups, %d netns", l.Units, l.Mounts, l.Cgroups, l.Netns)
}

// renderScale writes the scale section: one column per runtime that ran it.
func (r *run) renderScale(w writer) {
	w("\n## Scale: N running containers, daemon-reloads, removal, churn (test/bench/cribench scale)\n\n")
	var rts []string
	for _, rt := range runtimes {
		if r.scale(rt) != nil || r.failures["scale/"+rt] != "" {
			rts = append(rts, rt)
		}
	}
	if len(rts) == 0 {
		w("Not run (`ONLY=scale`, not in the default list; the last hand-started run is in docs/benchmarks-earlier.md).\n")
		return
	}
	w("Pods with several busybox `sleep` containers each (memory limit 64 MiB, CPU quota 20 ms per 100 ms), pod starts " +
		"in flight as given; every pod on the bench's CNI network. Then a hold during which `systemctl daemon-reload` runs " +
		"in the harness every second (or back to back when one takes longer); each container's unit (ActiveState, " +
		"SubState, MainPID, MemoryMax, MemoryLimit, CPUQuotaPerSecUSec), its unit cgroup's memory limit and CFS quota as " +
		"the kernel has them, and its `sleep` process are read before and after. Then every pod is stopped and removed " +
		"(4 at a time), and leaks are counted over the baseline taken before the first start: loaded units in " +
		"/benchmark.slice, mountinfo lines of PID 1 and of the runtime's own mount namespace, cgroup directories under " +
		"the harness' benchmark.slice, nsfs net namespace pins. Then the churn: cycles of a pod with one container " +
		"(RunPodSandbox, CreateContainer, StartContainer, RUNNING, StopContainer, RemoveContainer, StopPodSandbox, " +
		"RemovePodSandbox), the same number in flight, PID 1's RSS before and after, and the leaks again. CPU is utime + " +
		"stime of the harness' processes between the phase's ends. Timeouts: lines of the runtime's journal (whole run) " +
		"matching deadline exceeded, DeadlineExceeded, Timeout was reached, DBus.Error.NoReply/Timeout, timed out.\n\n")
	w("| | %s |\n|---|%s\n", strings.Join(labels(r, rts), " | "), strings.Repeat("---|", len(rts)))
	row := func(name string, f func(s *ScaleResult, rt string) string) {
		var cells []string
		for _, rt := range rts {
			s := r.scale(rt)
			if s == nil {
				cells = append(cells, r.missing("scale", rt))
				continue
			}
			cells = append(cells, f(s, rt))
		}
		w("| %s | %s |\n", name, strings.Join(cells, " | "))
	}
	param := func(rt, k string) string {
		for _, res := range r.results {
			if res.Kind == "scale" && res.Runtime == rt {
				return res.Params[k]
			}
		}
		return ""
	}
	row("pods × containers, in flight, hold, churn cycles", func(s *ScaleResult, rt string) string {
		return fmt.Sprintf("%d × %d, %s, %s, %s", s.Pods, s.PerPod, param(rt, "parallel"), param(rt, "hold"), param(rt, "churn"))
	})
	row("containers running", func(s *ScaleResult, _ string) string {
		v := fmt.Sprintf("%d of %d", s.Started, s.Wanted)
		if s.StoppedBy != "" {
			v += " (stopped: " + s.StoppedBy + ")"
		}
		return v
	})
	row("start: wall time, throughput", func(s *ScaleResult, _ string) string {
		return fmt.Sprintf("%.1f s, %.2f containers/s", s.StartSeconds, float64(s.Started)/max(s.StartSeconds, 0.001))
	})
	for _, op := range []string{"RunPodSandbox", "CreateContainer", "StartContainer"} {
		row(op+" p50 / p99", func(_ *ScaleResult, rt string) string {
			v := r.samples("scale", rt, op, nil)
			return fmt.Sprintf("%s / %s ms (n=%d)", f1(percentile(v, 50)), f1(percentile(v, 99)), len(v))
		})
	}
	for _, ph := range []string{"start", "hold", "remove"} {
		row("CPU s during "+ph+": PID 1, journald, dbus-daemon, runtime", func(s *ScaleResult, _ string) string {
			p := s.Phases[ph]
			return fmt.Sprintf("%.2f, %.2f, %.2f, %.2f (%.1f s)", p.PID1, p.Journald, p.DBus, p.Daemon, p.Seconds)
		})
	}
	row("PID 1 CPU per container started", func(s *ScaleResult, _ string) string {
		if s.Started == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f ms", s.Phases["start"].PID1*1000/float64(s.Started))
	})
	row("PID 1 RSS: baseline → all running → removed", func(s *ScaleResult, _ string) string {
		return fmt.Sprintf("%d → %d → %d KiB (%+d KiB at the peak)", s.PID1RSS[0], s.PID1RSS[1], s.PID1RSS[2], s.PID1RSS[1]-s.PID1RSS[0])
	})
	row("PID 1 mountinfo lines: baseline → all running → removed", func(s *ScaleResult, _ string) string {
		return fmt.Sprintf("%d → %d → %d", s.PID1Mounts[0], s.PID1Mounts[1], s.PID1Mounts[2])
	})
	row("runtime's own mount namespace, lines (0: PID 1's)", func(s *ScaleResult, _ string) string {
		return fmt.Sprintf("%d → %d → %d", s.DaemonMounts[0], s.DaemonMounts[1], s.DaemonMounts[2])
	})
	row("runtime daemon RSS, all running", func(s *ScaleResult, _ string) string {
		return fmt.Sprintf("%.1f MiB", float64(s.DaemonRSS)/1024)
	})
	row("daemon-reloads in the hold: count, p50 / max", func(s *ScaleResult, _ string) string {
		return fmt.Sprintf("%d, %.0f / %.0f ms", s.Reloads, percentile(s.ReloadMS, 50), percentile(s.ReloadMS, 100))
	})
	row("containers checked, with the asked limits, changed by the reloads, running after", func(s *ScaleResult, _ string) string {
		v := fmt.Sprintf("%d, %d, %d, %d", s.Checked, s.LimitsAsAsked, len(s.Changed), s.RunningAfter)
		if len(s.Changed) > 0 {
			v += " (first: " + mdEscape(s.Changed[0]) + ")"
		}
		return v
	})
	row("removal: wall time; leaks over the baseline", func(s *ScaleResult, _ string) string {
		return fmt.Sprintf("%.1f s; %s", s.Phases["remove"].Seconds, leakCell(s.Leaks))
	})
	row("D-Bus timeouts / deadline errors in the runtime's log", func(s *ScaleResult, _ string) string {
		v := fmt.Sprint(s.Timeouts)
		if len(s.TimeoutLines) > 0 {
			v += " (first: " + mdEscape(s.TimeoutLines[0]) + ")"
		}
		return v
	})
	row("D-Bus calls to systemd, whole run: count, p50 / p99 (bucket bounds)", func(s *ScaleResult, _ string) string {
		if len(s.DBus) == 0 {
			return "not measured"
		}
		var parts []string
		for _, l := range s.DBus {
			parts = append(parts, fmt.Sprintf("%s %d, ≤%g / ≤%g ms", l.Op, l.Calls, l.P50, l.P99))
		}
		return strings.Join(parts, "; ")
	})
	row("churn: cycles, wall time, cycles/s", func(s *ScaleResult, _ string) string {
		if s.Churn == nil {
			return "not run"
		}
		return fmt.Sprintf("%d, %.1f s, %.2f/s", s.Churn.Cycles, s.Churn.Seconds, float64(s.Churn.Cycles)/max(s.Churn.Seconds, 0.001))
	})
	row("churn: cycle p50 / p99", func(_ *ScaleResult, rt string) string {
		v := r.samples("scale", rt, "churn cycle", nil)
		return fmt.Sprintf("%s / %s ms (n=%d)", f1(percentile(v, 50)), f1(percentile(v, 99)), len(v))
	})
	row("churn: PID 1 RSS before → after (max)", func(s *ScaleResult, _ string) string {
		if s.Churn == nil {
			return "not run"
		}
		c := s.Churn
		return fmt.Sprintf("%d → %d KiB (%d), %+.1f%%", c.PID1RSSBefore, c.PID1RSSAfter, c.PID1RSSMax, c.Growth())
	})
	row("churn: leaks over the baseline", func(s *ScaleResult, _ string) string {
		if s.Churn == nil {
			return "not run"
		}
		return leakCell(s.Churn.Leaks)
	})
}

func labels(r *run, rts []string) []string {
	var out []string
	for _, rt := range rts {
		out = append(out, r.label(rt))
	}
	return out
}
