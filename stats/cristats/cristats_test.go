package cristats

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/stats"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// critest v1.37's expectedMetricDescriptorNames minus its
// unimplementedMetricDescriptors; the last five may lack values.
var critestRequired = []string{
	"container_blkio_device_usage_total", "container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total",
	"container_cpu_cfs_throttled_seconds_total", "container_cpu_system_seconds_total", "container_cpu_usage_seconds_total",
	"container_cpu_user_seconds_total", "container_file_descriptors", "container_fs_inodes_free", "container_fs_inodes_total",
	"container_fs_limit_bytes", "container_fs_reads_bytes_total", "container_fs_reads_total", "container_fs_usage_bytes",
	"container_fs_writes_bytes_total", "container_fs_writes_total", "container_last_seen", "container_memory_cache",
	"container_memory_failcnt", "container_memory_failures_total", "container_memory_kernel_usage",
	"container_memory_mapped_file", "container_memory_max_usage_bytes", "container_memory_rss", "container_memory_swap",
	"container_memory_usage_bytes", "container_memory_working_set_bytes", "container_network_receive_bytes_total",
	"container_network_receive_errors_total", "container_network_receive_packets_dropped_total",
	"container_network_receive_packets_total", "container_network_transmit_bytes_total",
	"container_network_transmit_errors_total", "container_network_transmit_packets_dropped_total",
	"container_network_transmit_packets_total", "container_oom_events_total", "container_processes", "container_sockets",
	"container_spec_cpu_period", "container_spec_cpu_shares", "container_spec_memory_limit_bytes",
	"container_spec_memory_swap_limit_bytes", "container_start_time_seconds", "container_threads", "container_threads_max",
}

var critestOptionalValues = []string{
	"container_blkio_device_usage_total", "container_fs_reads_bytes_total", "container_fs_reads_total",
	"container_fs_writes_bytes_total", "container_fs_writes_total",
}

func TestDescriptorsAndMetricsAgree(t *testing.T) {
	descs := map[string]*runtimeapi.MetricDescriptor{}
	for _, d := range MetricDescriptors() {
		if d.Help == "" || len(d.LabelKeys) == 0 {
			t.Errorf("descriptor %s lacks help or labels", d.Name)
		}
		if _, dup := descs[d.Name]; dup {
			t.Errorf("duplicate descriptor %s", d.Name)
		}
		descs[d.Name] = d
	}
	for _, n := range critestRequired {
		if descs[n] == nil {
			t.Errorf("no descriptor for %s", n)
		}
	}
	now := time.Unix(1700000000, 0)
	lim := uint64(100)
	x := &stats.Extended{CgroupStats: stats.CgroupStats{
		CPU: &stats.CPUStats{UsageNanos: 5e9}, Memory: &stats.MemoryStats{Usage: 10, WorkingSet: 5, Limit: 100, Available: &lim},
		Swap: &stats.SwapStats{}, Pids: &stats.PidsStats{Current: 1},
		Pressure: stats.Pressure{
			// cpu.pressure of a kernel before 5.13: no "full" line.
			CPU:    &stats.PSIStats{Some: &stats.PSIData{TotalNanos: 3_900_000_000}},
			Memory: &stats.PSIStats{Some: &stats.PSIData{TotalNanos: 2e9}, Full: &stats.PSIData{TotalNanos: 1e9}},
			IO:     &stats.PSIStats{Some: &stats.PSIData{TotalNanos: 7e9}, Full: &stats.PSIData{TotalNanos: 6e9}},
		},
	}}
	ctr := Container{ID: "c1", PodID: "p1", Metadata: &runtimeapi.ContainerMetadata{Name: "web"}, Image: "busybox", StartedAt: now.UnixNano()}
	got := ContainerMetrics(ctr, x, &LayerUsage{Mountpoint: "/var/lib", UsedBytes: 1}, now)
	got = append(got, NetworkMetrics(Pod{ID: "p1"}, []stats.InterfaceStats{{Name: "eth0", RxBytes: 3}}, now)...)
	seen := map[string]bool{}
	for _, m := range got {
		d := descs[m.Name]
		if d == nil {
			t.Fatalf("metric %s has no descriptor", m.Name)
		}
		if len(m.LabelValues) != len(d.LabelKeys) {
			t.Errorf("%s: %d label values for keys %v", m.Name, len(m.LabelValues), d.LabelKeys)
		}
		if m.Timestamp != now.UnixNano() || m.Value == nil {
			t.Errorf("%s: timestamp %d value %v", m.Name, m.Timestamp, m.Value)
		}
		seen[m.Name] = true
	}
	for _, n := range critestRequired {
		if !seen[n] && !slices.Contains(critestOptionalValues, n) {
			t.Errorf("no value for %s", n)
		}
	}
	if seen["container_pressure_cpu_stalled_seconds_total"] {
		t.Error("cpu stalled reported without a cpu \"full\" line")
	}
	for name, want := range map[string]uint64{
		"container_pressure_cpu_waiting_seconds_total": 3, "container_pressure_memory_waiting_seconds_total": 2,
		"container_pressure_memory_stalled_seconds_total": 1, "container_pressure_io_waiting_seconds_total": 7,
		"container_pressure_io_stalled_seconds_total": 6,
	} {
		i := slices.IndexFunc(got, func(m *runtimeapi.Metric) bool { return m.Name == name })
		if i < 0 {
			t.Errorf("no %s", name)
			continue
		}
		if got[i].Value.Value != want || got[i].MetricType != runtimeapi.MetricType_COUNTER {
			t.Errorf("%s: want counter %d, got %v", name, want, got[i])
		}
	}
	for _, m := range got {
		if m.Name == "container_cpu_usage_seconds_total" && m.Value.Value != 5 {
			t.Errorf("cpu seconds = %d", m.Value.Value)
		}
		if m.Name == "container_start_time_seconds" && m.Value.Value != 1700000000 {
			t.Errorf("start time = %d", m.Value.Value)
		}
	}
}

type fakeSource struct {
	ctrs []Container
	pods []Pod
}

func (f fakeSource) StatsContainers(context.Context) ([]Container, error) { return f.ctrs, nil }
func (f fakeSource) StatsPods(context.Context) ([]Pod, error)             { return f.pods, nil }

// fixtureReader lays out a v2 tree: the captured unit files at path and
// the captured PSI files (../testdata/v2/psi) at path and at each of psiAt.
func fixtureReader(t *testing.T, path string, psiAt ...string) *stats.Reader {
	root := t.TempDir()
	copyFixture(t, "v2/running", filepath.Join(root, path))
	for _, p := range append([]string{path}, psiAt...) {
		copyFixture(t, "v2/psi", filepath.Join(root, p))
	}
	return stats.NewReaderWith(stats.ReaderOptions{V2Root: root})
}

// copyFixture copies the files of ../testdata/src into dir, creating it.
func copyFixture(t *testing.T, src, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join("../testdata", src))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("../testdata", src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCollectorStats(t *testing.T) {
	const unit = "/pod.slice/podunit-ctr-a.service"
	src := fakeSource{
		ctrs: []Container{
			{ID: "a", PodID: "p", CgroupPath: unit, Labels: map[string]string{"app": "x"}, Metadata: &runtimeapi.ContainerMetadata{Name: "a"}},
			{ID: "created", PodID: "p", Labels: map[string]string{"app": "y"}},
			{ID: "other", PodID: "q", CgroupPath: "/gone.service"},
		},
		pods: []Pod{{ID: "p", CgroupPath: "/pod.slice", NetNSPath: "/run/netns/p"}, {ID: "q"}},
	}
	c := New(Options{
		Reader: fixtureReader(t, unit, "/pod.slice"), Source: src,
		WritableLayer: func(_ context.Context, id string) (LayerUsage, error) {
			if id == "other" {
				return LayerUsage{}, errdefs.ErrNotFound
			}
			return LayerUsage{Mountpoint: "/var/lib/podunit/storage", UsedBytes: 42, InodesUsed: 7}, nil
		},
		NetworkStats: func(p string) ([]stats.InterfaceStats, error) {
			if p != "/run/netns/p" {
				return nil, errors.New("wrong namespace " + p)
			}
			return []stats.InterfaceStats{{Name: "eth0", RxBytes: 10, TxErrors: 1}, {Name: "net1"}}, nil
		},
		HostNetworkStats: func() ([]stats.InterfaceStats, error) { return []stats.InterfaceStats{{Name: "host0"}}, nil },
	})
	ctx := context.Background()
	all, err := c.ListContainerStats(ctx, nil)
	if err != nil || len(all) != 3 {
		t.Fatalf("ListContainerStats = %d, %v", len(all), err)
	}
	a := all[0]
	if a.Attributes.Id != "a" || a.Cpu.UsageCoreNanoSeconds.GetValue() != 6714643000 || a.Cpu.Timestamp == 0 ||
		a.Memory.WorkingSetBytes.GetValue() != 20283392-45056 || a.WritableLayer.UsedBytes.GetValue() != 42 ||
		a.WritableLayer.FsId.Mountpoint == "" || a.Swap == nil {
		t.Fatalf("stats of a = %v", a)
	}
	// PSI of the v2 fixture: kernel µs as ns, averages in percent.
	wantPSI(t, "container a", a.Cpu.GetPsi(), a.Memory.GetPsi(), a.Io)
	if a.Io.Timestamp != a.Cpu.Timestamp {
		t.Fatalf("io timestamp %d, cpu %d", a.Io.Timestamp, a.Cpu.Timestamp)
	}
	// Not started: listed with timestamps and no values.
	cr := all[1]
	if cr.Cpu.Timestamp == 0 || cr.Memory.Timestamp == 0 || cr.Cpu.UsageCoreNanoSeconds != nil || cr.WritableLayer == nil ||
		cr.Cpu.Psi != nil || cr.Memory.Psi != nil || cr.Io != nil {
		t.Fatalf("stats of created = %v", cr)
	}
	if all[2].WritableLayer != nil {
		t.Fatal("vanished layer reported")
	}
	for _, tc := range []struct {
		f    *runtimeapi.ContainerStatsFilter
		want []string
	}{
		{&runtimeapi.ContainerStatsFilter{Id: "created"}, []string{"created"}},
		{&runtimeapi.ContainerStatsFilter{PodSandboxId: "q"}, []string{"other"}},
		{&runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "x"}}, []string{"a"}},
		{&runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "z"}}, nil},
	} {
		got, err := c.ListContainerStats(ctx, tc.f)
		var ids []string
		for _, s := range got {
			ids = append(ids, s.Attributes.Id)
		}
		if err != nil || !slices.Equal(ids, tc.want) {
			t.Errorf("filter %v: %v, %v", tc.f, ids, err)
		}
	}
	// The second read of "a" has a rate (same counters: 0 cores).
	one, err := c.ContainerStats(ctx, "a")
	if err != nil || one.Cpu.UsageNanoCores == nil || one.Cpu.UsageNanoCores.Value != 0 {
		t.Fatalf("ContainerStats(a) = %v, %v", one, err)
	}
	if _, err := c.ContainerStats(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown container: %v", err)
	}
	// IDs follow package idindex, as every RPC: a unique prefix names one.
	if byPrefix, err := c.ContainerStats(ctx, "oth"); err != nil || byPrefix.Attributes.Id != "other" {
		t.Fatalf("ContainerStats(oth) = %v, %v", byPrefix, err)
	}
	if _, err := c.PodSandboxStats(ctx, ""); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("empty pod id: %v", err)
	}

	ps, err := c.PodSandboxStats(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	l := ps.Linux
	if ps.Attributes.Id != "p" || len(l.Containers) != 2 || l.Network.DefaultInterface.GetName() != "eth0" ||
		len(l.Network.Interfaces) != 2 || l.Network.DefaultInterface.TxErrors.GetValue() != 1 || l.Cpu.Timestamp == 0 {
		t.Fatalf("pod stats = %v", ps)
	}
	wantPSI(t, "pod p", l.Cpu.GetPsi(), l.Memory.GetPsi(), l.Io)
	if l.Containers[0].Io == nil {
		t.Fatal("pod stats: container a without io")
	}
	pods, err := c.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{Id: "q"})
	if err != nil || len(pods) != 1 || pods[0].Linux.Network.Interfaces[0].Name != "host0" || len(pods[0].Linux.Containers) != 1 {
		t.Fatalf("pod q = %v, %v", pods, err)
	}
	// Pod q has no cgroup: timestamps, no PSI.
	if q := pods[0].Linux; q.Cpu.Psi != nil || q.Memory.Psi != nil || q.Io != nil {
		t.Fatalf("pod q without cgroup has PSI: %v", q)
	}
	all2, err := c.ListPodSandboxStats(ctx, nil)
	if err != nil || len(all2) != 2 || all2[0].Linux.Io == nil {
		t.Fatalf("ListPodSandboxStats = %v, %v", all2, err)
	}
	pm, err := c.ListPodSandboxMetrics(ctx)
	if err != nil || len(pm) != 2 || len(pm[0].ContainerMetrics) != 2 || len(pm[0].Metrics) != 16 {
		t.Fatalf("metrics = %v, %v", pm, err)
	}
	pressure := map[string]uint64{}
	for _, m := range pm[0].ContainerMetrics[0].Metrics {
		if strings.HasPrefix(m.Name, "container_pressure_") {
			pressure[m.Name] = m.Value.GetValue()
		}
	}
	// Whole seconds of the fixture's totals (6427.8 s, 0.05 s, 292.7 s, 76.6 s).
	if want := map[string]uint64{
		"container_pressure_cpu_waiting_seconds_total": 6427, "container_pressure_cpu_stalled_seconds_total": 0,
		"container_pressure_memory_waiting_seconds_total": 0, "container_pressure_memory_stalled_seconds_total": 0,
		"container_pressure_io_waiting_seconds_total": 292, "container_pressure_io_stalled_seconds_total": 76,
	}; !maps.Equal(pressure, want) {
		t.Fatalf("pressure metrics = %v, want %v", pressure, want)
	}
}

// wantPSI checks the CRI form of the testdata/v2/psi files.
func wantPSI(t *testing.T, what string, cpu, mem *runtimeapi.PsiStats, io *runtimeapi.IoUsage) {
	t.Helper()
	if cpu == nil || mem == nil || io == nil || io.Timestamp == 0 {
		t.Fatalf("%s: PSI cpu %v memory %v io %v", what, cpu, mem, io)
	}
	for _, c := range []struct {
		name      string
		got, want *runtimeapi.PsiData
	}{
		{"cpu some", cpu.Some, &runtimeapi.PsiData{Total: 6427777130000, Avg10: 14.58, Avg60: 28.81, Avg300: 34.96}},
		{"cpu full", cpu.Full, &runtimeapi.PsiData{}},
		{"memory some", mem.Some, &runtimeapi.PsiData{Total: 49961000}},
		{"memory full", mem.Full, &runtimeapi.PsiData{Total: 29235000}},
		{"io some", io.Psi.GetSome(), &runtimeapi.PsiData{Total: 292659222000, Avg10: 1.80, Avg60: 1.43, Avg300: 1.16}},
		{"io full", io.Psi.GetFull(), &runtimeapi.PsiData{Total: 76597596000, Avg10: 1.10, Avg60: 0.93, Avg300: 0.67}},
	} {
		if !proto.Equal(c.got, c.want) {
			t.Errorf("%s: %s = %v, want %v", what, c.name, c.got, c.want)
		}
	}
}

// On cgroup v1 there is no PSI: the CRI fields are nil (unknown), not zero,
// and no pressure metric is sent, even with pressure files lying about.
func TestCollectorV1NoPSI(t *testing.T) {
	const unit = "/podunit.slice/podunit-ctr-a.service"
	root := t.TempDir()
	mounts := map[string]string{}
	for _, c := range []string{"memory", "cpuacct", "pids", "name=systemd"} {
		mounts[c] = filepath.Join(root, c)
		copyFixture(t, "v1/running", filepath.Join(mounts[c], unit))
		// v1 hierarchies have no pressure files; planted to catch a
		// reader that would report them on v1.
		copyFixture(t, "v2/psi", filepath.Join(mounts[c], unit))
		copyFixture(t, "v2/psi", filepath.Join(mounts[c], "/podunit.slice"))
	}
	c := New(Options{
		Reader: stats.NewReaderWith(stats.ReaderOptions{V1Mounts: mounts}),
		Source: fakeSource{
			ctrs: []Container{{ID: "a", PodID: "p", CgroupPath: unit}},
			pods: []Pod{{ID: "p", CgroupPath: "/podunit.slice"}},
		},
		NetworkStats:     func(string) ([]stats.InterfaceStats, error) { return nil, nil },
		HostNetworkStats: func() ([]stats.InterfaceStats, error) { return nil, nil },
	})
	ctx := context.Background()
	cs, err := c.ContainerStats(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if cs.Cpu.UsageCoreNanoSeconds.GetValue() != 1005698331 {
		t.Fatalf("v1 fixture not read: %v", cs)
	}
	if cs.Cpu.Psi != nil || cs.Memory.Psi != nil || cs.Io != nil {
		t.Fatalf("v1 container stats carry PSI: %v", cs)
	}
	ps, err := c.PodSandboxStats(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if l := ps.Linux; l.Cpu.Psi != nil || l.Memory.Psi != nil || l.Io != nil || l.Containers[0].Io != nil {
		t.Fatalf("v1 pod stats carry PSI: %v", l)
	}
	pm, err := c.ListPodSandboxMetrics(ctx)
	if err != nil || len(pm) != 1 || len(pm[0].ContainerMetrics) != 1 {
		t.Fatalf("metrics = %v, %v", pm, err)
	}
	for _, m := range pm[0].ContainerMetrics[0].Metrics {
		if strings.HasPrefix(m.Name, "container_pressure_") {
			t.Errorf("v1 metric %s = %v", m.Name, m.Value)
		}
	}
}
