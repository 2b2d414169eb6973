package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMountStats(t *testing.T) {
	mi := "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n" +
		"30 22 0:4 net:[4026532300] /run/netns/cni-1 rw shared:5 - nsfs nsfs rw\n" +
		"31 22 0:4 mnt:[4026532301] /run/podunit/mntns/mnt rw - nsfs nsfs rw\n" +
		"32 22 0:4 net:[4026532302] /run/podunit/netns/x rw - nsfs nsfs rw\n" +
		"33 22 0:50 / /var/lib/x/merged rw - overlay overlay rw,lowerdir=a\n"
	lines, netns := mountStats([]byte(mi))
	if lines != 5 || netns != 2 {
		t.Errorf("mountStats = %d lines, %d netns; want 5, 2 (a mnt pin is not a netns)", lines, netns)
	}
	if l, n := mountStats(nil); l != 0 || n != 0 {
		t.Errorf("empty table: %d, %d", l, n)
	}
}

func TestCgroupMountsAndLimits(t *testing.T) {
	root := t.TempDir()
	mi := fmt.Sprintf("40 30 0:35 / %[1]s/unified rw shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"+
		"41 30 0:36 / %[1]s/systemd rw shared:11 - cgroup cgroup rw,xattr,name=systemd\n"+
		"42 30 0:37 / %[1]s/memory rw shared:12 - cgroup cgroup rw,memory\n"+
		"43 30 0:38 / %[1]s/cpu,cpuacct rw shared:13 - cgroup cgroup rw,cpu,cpuacct\n", root)
	m := cgroupMounts([]byte(mi))
	if m["memory"] != root+"/memory" || m["cpu"] != root+"/cpu,cpuacct" || m["cpuacct"] != root+"/cpu,cpuacct" ||
		m["name=systemd"] != root+"/systemd" || m[""] != root+"/unified" {
		t.Fatalf("cgroupMounts = %v", m)
	}
	unit := "/podunit-harness-ab/benchmark.slice/benchmark-pod1.slice/podunit-c1.service"
	for _, f := range []struct{ dir, file, val string }{
		{"memory", "memory.limit_in_bytes", "67108864\n"},
		{"cpu,cpuacct", "cpu.cfs_quota_us", "20000\n"},
		// the leaf a process may sit in below its unit has no limit of its own
		{"memory", "sub/memory.limit_in_bytes", "9223372036854771712\n"},
	} {
		p := filepath.Join(root, f.dir, unit, f.file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.val), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cg := procCgroups([]byte("12:memory:" + unit + "/sub\n4:cpu,cpuacct:" + unit + "\n1:name=systemd:" + unit + "\n0::" + unit + "\n"))
	mem, cpu, u := readLimits(cg, m, true)
	if mem != "67108864" || cpu != "20000" || u != "podunit-c1.service" {
		t.Errorf("readLimits = %q %q %q; want the unit cgroup's limits", mem, cpu, u)
	}
	if lm, lc, _ := readLimits(cg, m, false); lm != "9223372036854771712" || lc != "20000" {
		t.Errorf("readLimits of the process' own cgroup = %q %q", lm, lc)
	}
	if !asAsked(ctrState{MemLimit: mem, CPUQuota: cpu}) {
		t.Error("the asked limits not recognised")
	}
	if asAsked(ctrState{MemLimit: "9223372036854771712", CPUQuota: cpu}) || asAsked(ctrState{MemLimit: mem, CPUQuota: "-1"}) {
		t.Error("a missing limit passed as asked")
	}
	if !asAsked(ctrState{MemLimit: "67108864", CPUQuota: "20000 100000"}) {
		t.Error("cgroup v2 cpu.max notation not recognised")
	}
}

func TestUnitPath(t *testing.T) {
	for _, c := range []struct{ in, path, unit string }{
		{"/h/benchmark.slice/benchmark-p.slice/cri-containerd-1.scope", "/h/benchmark.slice/benchmark-p.slice/cri-containerd-1.scope", "cri-containerd-1.scope"},
		{"/h/benchmark.slice/podunit-c.service/payload", "/h/benchmark.slice/podunit-c.service", "podunit-c.service"},
		{"/h/benchmark.slice", "", ""},
	} {
		if p, u := unitPath(c.in); p != c.path || u != c.unit {
			t.Errorf("unitPath(%q) = %q, %q; want %q, %q", c.in, p, u, c.path, c.unit)
		}
	}
}

func TestParseShow(t *testing.T) {
	out := "Id=a.service\nActiveState=active\nMemoryMax=67108864\n\nId=b.scope\nActiveState=failed\nSlice=benchmark-x.slice\n"
	m := parseShow([]byte(out))
	if len(m) != 2 || m["a.service"]["MemoryMax"] != "67108864" || m["b.scope"]["ActiveState"] != "failed" {
		t.Errorf("parseShow = %v", m)
	}
	if _, ok := m["a.service"]["Id"]; ok {
		t.Error("Id kept among the properties")
	}
}

func TestCountBenchUnits(t *testing.T) {
	show := map[string]map[string]string{
		"benchmark.slice":          {"Slice": "-.slice"},
		"benchmark-p1.slice":       {"Slice": "benchmark.slice"},
		"podunit-c1.service":       {"Slice": "benchmark-p1.slice"},
		"podunit.service":          {"Slice": "system.slice"},
		"systemd-journald.service": {"Slice": "system.slice"},
	}
	if n := countBenchUnits(show); n != 2 {
		t.Errorf("countBenchUnits = %d; want 2 (pod slice and container unit, not benchmark.slice)", n)
	}
}

func TestDiffStates(t *testing.T) {
	st := func(pid int, mem, quota, sub string) ctrState {
		return ctrState{Proc: procKey{pid, 1}, MemLimit: mem, CPUQuota: quota,
			UnitProps: map[string]string{"ActiveState": "active", "SubState": sub, "MemoryMax": mem, "CPUQuotaPerSecUSec": "200ms"}}
	}
	before := map[string]ctrState{"a": st(1, "67108864", "20000", "running"), "b": st(2, "67108864", "20000", "running"),
		"c": st(3, "67108864", "20000", "running"), "e": st(5, "67108864", "20000", "running")}
	if d := diffStates(before, before); len(d) != 0 {
		t.Errorf("no change reported %v", d)
	}
	leaf := st(1, "67108864", "20000", "running")
	leaf.LeafMem = "1"
	after := map[string]ctrState{"a": st(1, "67108864", "20000", "running"), "b": st(2, "9223372036854771712", "-1", "running"),
		"d": st(4, "67108864", "20000", "running"), "c": leaf}
	d := strings.Join(diffStates(before, after), "\n")
	for _, want := range []string{"b: memory limit 67108864 -> 9223372036854771712", "b: CPU quota 20000 -> -1",
		"b: MemoryMax 67108864 -> 9223372036854771712", "c: process 3 became 1", "c: the process' own cgroup's limits", "d: new", "e: gone"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "a:") {
		t.Errorf("unchanged container a reported:\n%s", d)
	}
}

func TestCountTimeouts(t *testing.T) {
	log := "time=1 level=INFO msg=\"container started\"\n" +
		"time=2 level=ERROR msg=\"start unit\" err=\"systemd: StartUnit: context deadline exceeded\"\n" +
		"time=3 level=WARN msg=x err=\"rpc error: code = DeadlineExceeded desc = y\"\n" +
		"time=4 level=ERROR msg=z err=\"org.freedesktop.DBus.Error.NoReply: Did not receive a reply\"\n" +
		"time=5 level=INFO msg=\"stopped\" timeout=10s\n"
	n, first := countTimeouts([]byte(log), 2)
	if n != 3 || len(first) != 2 || !strings.Contains(first[0], "context deadline exceeded") {
		t.Errorf("countTimeouts = %d %q; want 3 (a timeout= setting is not a timeout)", n, first)
	}
}

func TestLeaksAndGrowth(t *testing.T) {
	l := leaksOver(leakBase{0, 40, 1, 0}, leakBase{2, 39, 3, 1})
	if l != (Leaks{2, 0, 2, 1}) || l.Total() != 5 {
		t.Errorf("leaksOver = %+v (a count below the baseline is no leak)", l)
	}
	c := &ChurnResult{PID1RSSBefore: 10000, PID1RSSAfter: 10600}
	if g := c.Growth(); g < 5.99 || g > 6.01 {
		t.Errorf("Growth = %v; want 6", g)
	}
	if (*ChurnResult)(nil).Growth() != 0 {
		t.Error("nil churn has growth")
	}
}

func scaleRun(s *ScaleResult) *run {
	r := testRun()
	r.results = []Result{{Kind: "scale", Runtime: "podunit", Scale: s, Params: map[string]string{"parallel": "4", "hold": "1m0s", "churn": "1000"},
		Samples: map[string][]float64{"RunPodSandbox": {10, 20}, "CreateContainer": {5}, "StartContainer": {50, 70}, "churn cycle": {300}}}}
	return r
}

func goodScale() *ScaleResult {
	return &ScaleResult{Pods: 500, PerPod: 2, Wanted: 1000, Started: 1000, StartSeconds: 200,
		Phases:  map[string]ScalePhase{"start": {Seconds: 200, PID1: 12}, "hold": {Seconds: 60}, "remove": {Seconds: 100}},
		PID1RSS: [3]int64{10000, 30000, 20000}, PID1Mounts: [3]int64{35, 35, 35}, DaemonMounts: [3]int64{40, 6040, 40},
		Reloads: 60, ReloadMS: []float64{500}, Checked: 1000, LimitsAsAsked: 1000, RunningAfter: 1000,
		Churn: &ChurnResult{Cycles: 1000, Seconds: 100, PID1RSSBefore: 20000, PID1RSSAfter: 20400}}
}

func TestScaleTargets(t *testing.T) {
	if g := testRun().scaleTargets(); g != nil {
		t.Errorf("a run without scale has scale targets: %v", g)
	}
	verdicts := func(r *run) string {
		var v []string
		for _, g := range r.scaleTargets() {
			v = append(v, g.verdict)
		}
		return strings.Join(v, ",")
	}
	if v := verdicts(scaleRun(goodScale())); v != "met,met,met,met,met,met,met" {
		t.Errorf("good run verdicts %s", v)
	}
	bad := goodScale()
	bad.Started, bad.Timeouts, bad.PID1Mounts[1] = 998, 1, 635
	bad.Changed = []string{"x: memory limit a -> b"}
	bad.Leaks.Mounts = 1
	bad.Churn.PID1RSSAfter = 21000 // +5%: not below
	bad.Churn.Leaks.Units = 1
	if v := verdicts(scaleRun(bad)); strings.Contains(v, "met") {
		t.Errorf("bad run verdicts %s; want every one behind", v)
	}
	noChurn := goodScale()
	noChurn.Churn = nil
	if v := verdicts(scaleRun(noChurn)); !strings.HasSuffix(v, "**behind**,**behind**") {
		t.Errorf("a run without churn meets the churn targets: %s", v)
	}
	// a reload check that read no container proves nothing
	none := goodScale()
	none.Checked, none.LimitsAsAsked = 0, 0
	if g := scaleRun(none).scaleTargets()[3]; g.verdict == "met" {
		t.Errorf("reload target met with no container checked: %+v", g)
	}
	r := testRun()
	r.failures["scale/podunit"] = "cribench: 3 pod starts failed"
	if g := r.scaleTargets(); len(g) != 7 || g[0].verdict != "not measured" || !strings.Contains(g[0].podunit, "3 pod starts failed") {
		t.Errorf("failed run targets %+v", g)
	}
}

func TestRenderScale(t *testing.T) {
	var b strings.Builder
	scaleRun(goodScale()).renderScale(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	doc := b.String()
	for _, want := range []string{
		"| | podunit |",
		"| pods × containers, in flight, hold, churn cycles | 500 × 2, 4, 1m0s, 1000 |",
		"| start: wall time, throughput | 200.0 s, 5.00 containers/s |",
		"| RunPodSandbox p50 / p99 | 10.0 / 20.0 ms (n=2) |",
		"| PID 1 CPU per container started | 12.0 ms |",
		"| PID 1 mountinfo lines: baseline → all running → removed | 35 → 35 → 35 |",
		"| churn: PID 1 RSS before → after (max) | 20000 → 20400 KiB (0), +2.0% |",
		"| churn: leaks over the baseline | 0 units, 0 mounts, 0 cgroups, 0 netns |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("scale section lacks %q:\n%s", want, doc)
		}
	}
	b.Reset()
	testRun().renderScale(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	if !strings.Contains(b.String(), "Not run") {
		t.Errorf("no-scale run: %q", b.String())
	}
}
