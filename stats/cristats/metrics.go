package cristats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/stats"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Label keys follow cAdvisor's container metrics: the container's id,
// name and image, plus a per-metric extra where cAdvisor has one. Pod-level
// (network) metrics use the pod's id and name and an empty image.
var (
	baseLabels    = []string{"id", "name", "image"}
	ifaceLabels   = []string{"id", "name", "image", "interface"}
	failureLabels = []string{"id", "name", "image", "failure_type", "scope"}
	deviceLabels  = []string{"id", "name", "image", "device"}
	blkioLabels   = []string{"id", "name", "image", "device", "major", "minor", "operation"}
	cpuLabels     = []string{"id", "name", "image", "cpu"}
)

type desc struct {
	name, help string
	labels     []string
	typ        runtimeapi.MetricType
}

const (
	counter = runtimeapi.MetricType_COUNTER
	gauge   = runtimeapi.MetricType_GAUGE
)

// descriptors is every metric podunit describes. Values are integers (the
// CRI carries uint64): *_seconds metrics are whole seconds.
var descriptors = []desc{
	{"container_cpu_usage_seconds_total", "Cumulative CPU time consumed in seconds.", cpuLabels, counter},
	{"container_cpu_user_seconds_total", "Cumulative user CPU time consumed in seconds.", baseLabels, counter},
	{"container_cpu_system_seconds_total", "Cumulative system CPU time consumed in seconds.", baseLabels, counter},
	{"container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", baseLabels, counter},
	{"container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", baseLabels, counter},
	{"container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled, in seconds.", baseLabels, counter},
	{"container_memory_cache", "Number of bytes of page cache memory.", baseLabels, gauge},
	{"container_memory_rss", "Size of RSS in bytes.", baseLabels, gauge},
	{"container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", baseLabels, gauge},
	{"container_memory_mapped_file", "Size of memory mapped files in bytes.", baseLabels, gauge},
	{"container_memory_swap", "Container swap usage in bytes.", baseLabels, gauge},
	{"container_memory_failcnt", "Number of memory usage hits limits.", baseLabels, counter},
	{"container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed.", baseLabels, gauge},
	{"container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes.", baseLabels, gauge},
	{"container_memory_working_set_bytes", "Current working set in bytes.", baseLabels, gauge},
	{"container_memory_failures_total", "Cumulative count of memory allocation failures.", failureLabels, counter},
	{"container_oom_events_total", "Count of out of memory events observed for the container.", baseLabels, counter},
	{"container_network_receive_bytes_total", "Cumulative count of bytes received.", ifaceLabels, counter},
	{"container_network_receive_packets_total", "Cumulative count of packets received.", ifaceLabels, counter},
	{"container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving.", ifaceLabels, counter},
	{"container_network_receive_errors_total", "Cumulative count of errors encountered while receiving.", ifaceLabels, counter},
	{"container_network_transmit_bytes_total", "Cumulative count of bytes transmitted.", ifaceLabels, counter},
	{"container_network_transmit_packets_total", "Cumulative count of packets transmitted.", ifaceLabels, counter},
	{"container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting.", ifaceLabels, counter},
	{"container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting.", ifaceLabels, counter},
	{"container_fs_inodes_free", "Number of available inodes.", deviceLabels, gauge},
	{"container_fs_inodes_total", "Number of inodes.", deviceLabels, gauge},
	{"container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", deviceLabels, gauge},
	{"container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", deviceLabels, gauge},
	{"container_fs_reads_bytes_total", "Cumulative count of bytes read.", deviceLabels, counter},
	{"container_fs_reads_total", "Cumulative count of reads completed.", deviceLabels, counter},
	{"container_fs_writes_bytes_total", "Cumulative count of bytes written.", deviceLabels, counter},
	{"container_fs_writes_total", "Cumulative count of writes completed.", deviceLabels, counter},
	{"container_blkio_device_usage_total", "Blkio device bytes usage.", blkioLabels, counter},
	{"container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", baseLabels, counter},
	{"container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", baseLabels, counter},
	{"container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", baseLabels, counter},
	{"container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", baseLabels, counter},
	{"container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.", baseLabels, counter},
	{"container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.", baseLabels, counter},
	{"container_processes", "Number of processes running inside the container.", baseLabels, gauge},
	{"container_threads", "Number of threads running inside the container.", baseLabels, gauge},
	{"container_threads_max", "Maximum number of threads allowed inside the container, 0 if unlimited.", baseLabels, gauge},
	{"container_file_descriptors", "Number of open file descriptors for the container.", baseLabels, gauge},
	{"container_sockets", "Number of open sockets for the container.", baseLabels, gauge},
	{"container_spec_cpu_period", "CPU period of the container, in microseconds.", baseLabels, gauge},
	{"container_spec_cpu_shares", "CPU share of the container.", baseLabels, gauge},
	{"container_spec_memory_limit_bytes", "Memory limit for the container, 0 if unlimited.", baseLabels, gauge},
	{"container_spec_memory_swap_limit_bytes", "Memory swap limit for the container, 0 if unlimited.", baseLabels, gauge},
	{"container_start_time_seconds", "Start time of the container since unix epoch in seconds.", baseLabels, gauge},
	{"container_last_seen", "Last time a container was seen by the exporter, in seconds since the epoch.", baseLabels, gauge},
}

// MetricDescriptors lists every metric ListPodSandboxMetrics can return.
func MetricDescriptors() []*runtimeapi.MetricDescriptor {
	out := make([]*runtimeapi.MetricDescriptor, 0, len(descriptors))
	for _, d := range descriptors {
		out = append(out, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: append([]string(nil), d.labels...)})
	}
	return out
}

var typeOf = func() map[string]runtimeapi.MetricType {
	m := map[string]runtimeapi.MetricType{}
	for _, d := range descriptors {
		m[d.name] = d.typ
	}
	return m
}()

type builder struct {
	ts     int64
	labels []string
	out    []*runtimeapi.Metric
}

func (b *builder) add(name string, v uint64, extra ...string) {
	b.out = append(b.out, &runtimeapi.Metric{
		Name: name, Timestamp: b.ts, MetricType: typeOf[name],
		LabelValues: append(append([]string(nil), b.labels...), extra...), Value: u64(v),
	})
}

const nsPerSec = uint64(time.Second)

// ContainerMetrics builds the container's metrics from an extended
// reading; pure, so the label/descriptor agreement is unit-tested.
func ContainerMetrics(ctr Container, x *stats.Extended, layer *LayerUsage, now time.Time) []*runtimeapi.Metric {
	name := ""
	if ctr.Metadata != nil {
		name = ctr.Metadata.Name
	}
	b := &builder{ts: now.UnixNano(), labels: []string{ctr.ID, name, ctr.Image}}
	b.add("container_last_seen", uint64(now.Unix()))
	if ctr.StartedAt > 0 {
		b.add("container_start_time_seconds", uint64(ctr.StartedAt)/nsPerSec)
	}
	if layer != nil {
		dev := layer.Mountpoint
		b.add("container_fs_usage_bytes", layer.UsedBytes, dev)
		b.add("container_fs_limit_bytes", layer.TotalBytes, dev)
		b.add("container_fs_inodes_total", layer.TotalInodes, dev)
		b.add("container_fs_inodes_free", layer.FreeInodes, dev)
	}
	if x == nil {
		return b.out
	}
	if x.CPU != nil {
		b.add("container_cpu_usage_seconds_total", x.CPU.UsageNanos/nsPerSec, "total")
	}
	b.add("container_cpu_user_seconds_total", x.CPUUserNanos/nsPerSec)
	b.add("container_cpu_system_seconds_total", x.CPUSystemNanos/nsPerSec)
	b.add("container_cpu_cfs_periods_total", x.CFSPeriods)
	b.add("container_cpu_cfs_throttled_periods_total", x.CFSThrottledPeriods)
	b.add("container_cpu_cfs_throttled_seconds_total", x.CFSThrottledNanos/nsPerSec)
	b.add("container_spec_cpu_period", x.CPUPeriodUsec)
	b.add("container_spec_cpu_shares", x.CPUShares)
	if m := x.Memory; m != nil {
		b.add("container_memory_usage_bytes", m.Usage)
		b.add("container_memory_working_set_bytes", m.WorkingSet)
		b.add("container_memory_rss", m.RSS)
		b.add("container_oom_events_total", m.OOMKills)
		b.add("container_spec_memory_limit_bytes", m.Limit)
	}
	b.add("container_memory_cache", x.MemoryCache)
	b.add("container_memory_kernel_usage", x.MemoryKernel)
	b.add("container_memory_mapped_file", x.MemoryMappedFile)
	b.add("container_memory_max_usage_bytes", x.MemoryMaxUsage)
	b.add("container_memory_failcnt", x.MemoryFailcnt)
	b.add("container_memory_failures_total", x.PgFaultContainer, "pgfault", "container")
	b.add("container_memory_failures_total", x.PgMajFaultContainer, "pgmajfault", "container")
	b.add("container_memory_failures_total", x.PgFaultHierarchy, "pgfault", "hierarchy")
	b.add("container_memory_failures_total", x.PgMajFaultHierarchy, "pgmajfault", "hierarchy")
	var swap uint64
	if x.Swap != nil {
		swap = x.Swap.Usage
	}
	b.add("container_memory_swap", swap)
	b.add("container_spec_memory_swap_limit_bytes", x.SwapLimit)
	// PSI "some" is cAdvisor's waiting, "full" its stalled. Unlike the
	// figures above they are left out, not zero, where the kernel has none
	// (cgroup v1, no PSI, cpu "full" before 5.13): zero would claim "no
	// pressure".
	for _, p := range []struct {
		psi              *stats.PSIStats
		waiting, stalled string
	}{
		{x.Pressure.CPU, "container_pressure_cpu_waiting_seconds_total", "container_pressure_cpu_stalled_seconds_total"},
		{x.Pressure.Memory, "container_pressure_memory_waiting_seconds_total", "container_pressure_memory_stalled_seconds_total"},
		{x.Pressure.IO, "container_pressure_io_waiting_seconds_total", "container_pressure_io_stalled_seconds_total"},
	} {
		if p.psi == nil {
			continue
		}
		if p.psi.Some != nil {
			b.add(p.waiting, p.psi.Some.TotalNanos/nsPerSec)
		}
		if p.psi.Full != nil {
			b.add(p.stalled, p.psi.Full.TotalNanos/nsPerSec)
		}
	}
	b.add("container_processes", x.Processes)
	b.add("container_threads", x.Threads)
	b.add("container_threads_max", x.ThreadsMax)
	b.add("container_file_descriptors", x.FileDescriptors)
	b.add("container_sockets", x.Sockets)
	return b.out
}

// NetworkMetrics builds a pod's per-interface metrics.
func NetworkMetrics(p Pod, ifs []stats.InterfaceStats, now time.Time) []*runtimeapi.Metric {
	name := ""
	if p.Metadata != nil {
		name = p.Metadata.Name
	}
	b := &builder{ts: now.UnixNano(), labels: []string{p.ID, name, ""}}
	for _, i := range ifs {
		b.add("container_network_receive_bytes_total", i.RxBytes, i.Name)
		b.add("container_network_receive_packets_total", i.RxPackets, i.Name)
		b.add("container_network_receive_packets_dropped_total", i.RxDropped, i.Name)
		b.add("container_network_receive_errors_total", i.RxErrors, i.Name)
		b.add("container_network_transmit_bytes_total", i.TxBytes, i.Name)
		b.add("container_network_transmit_packets_total", i.TxPackets, i.Name)
		b.add("container_network_transmit_packets_dropped_total", i.TxDropped, i.Name)
		b.add("container_network_transmit_errors_total", i.TxErrors, i.Name)
	}
	return b.out
}

// ListPodSandboxMetrics returns metrics for every pod and its containers.
func (c *Collector) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	pods, err := c.o.Source.StatsPods(ctx)
	if err != nil {
		return nil, err
	}
	ctrs, err := c.o.Source.StatsContainers(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []*runtimeapi.PodSandboxMetrics
	for _, p := range pods {
		pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: p.ID}
		var ifs []stats.InterfaceStats
		if p.NetNSPath == "" {
			ifs, err = c.o.HostNetworkStats()
		} else {
			ifs, err = c.o.NetworkStats(p.NetNSPath)
		}
		if err == nil {
			pm.Metrics = NetworkMetrics(p, ifs, now)
		}
		for _, ctr := range ctrs {
			if ctr.PodID != p.ID {
				continue
			}
			cm, err := c.containerMetrics(ctx, ctr, now)
			if err != nil {
				return nil, err
			}
			pm.ContainerMetrics = append(pm.ContainerMetrics, cm)
		}
		out = append(out, pm)
	}
	return out, nil
}

func (c *Collector) containerMetrics(ctx context.Context, ctr Container, now time.Time) (*runtimeapi.ContainerMetrics, error) {
	var x *stats.Extended
	if ctr.CgroupPath != "" {
		// No sampling key: metrics must not disturb the stats calls'
		// CPU rate intervals.
		r, err := c.o.Reader.ReadExtended("", ctr.CgroupPath)
		switch {
		case err == nil:
			x = r
		case errors.Is(err, errdefs.ErrNotFound):
		default:
			return nil, fmt.Errorf("metrics of container %s: %w", ctr.ID, err)
		}
	}
	var layer *LayerUsage
	if c.o.WritableLayer != nil {
		if l, err := c.o.WritableLayer(ctx, ctr.ID); err == nil {
			layer = &l
		}
	}
	return &runtimeapi.ContainerMetrics{ContainerId: ctr.ID, Metrics: ContainerMetrics(ctr, x, layer, now)}, nil
}
