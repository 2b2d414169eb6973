package cristats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/stats"
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

func fixtureReader(t *testing.T, path string) *stats.Reader {
	root := t.TempDir()
	dir := filepath.Join(root, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "../testdata/v2/running"
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(src, e.Name()))
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return stats.NewReaderWith(stats.ReaderOptions{V2Root: root})
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
		Reader: fixtureReader(t, unit), Source: src,
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
	// Not started: listed with timestamps and no values.
	cr := all[1]
	if cr.Cpu.Timestamp == 0 || cr.Memory.Timestamp == 0 || cr.Cpu.UsageCoreNanoSeconds != nil || cr.WritableLayer == nil {
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
	pods, err := c.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{Id: "q"})
	if err != nil || len(pods) != 1 || pods[0].Linux.Network.Interfaces[0].Name != "host0" || len(pods[0].Linux.Containers) != 1 {
		t.Fatalf("pod q = %v, %v", pods, err)
	}
	pm, err := c.ListPodSandboxMetrics(ctx)
	if err != nil || len(pm) != 2 || len(pm[0].ContainerMetrics) != 2 || len(pm[0].Metrics) != 16 {
		t.Fatalf("metrics = %v, %v", pm, err)
	}
}
