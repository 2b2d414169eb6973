// Package cristats turns cgroup and network namespace readings into the
// CRI's stats and metrics messages. The cri package's stats RPCs are thin
// wrappers over a Collector.
package cristats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/idindex"
	"github.com/podunit/podunit/stats"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Container is what the collector needs to know about a container.
type Container struct {
	ID, PodID           string
	Metadata            *runtimeapi.ContainerMetadata
	Labels, Annotations map[string]string
	// Image is the image reference shown in metric labels.
	Image string
	// CgroupPath is the unit's cgroup ("/podunit.slice/…/podunit-ctr-<id>.service");
	// empty before the container was started.
	CgroupPath string
	// StartedAt is Unix nanoseconds, 0 if never started.
	StartedAt int64
}

// Pod is what the collector needs to know about a pod sandbox.
type Pod struct {
	ID                  string
	Metadata            *runtimeapi.PodSandboxMetadata
	Labels, Annotations map[string]string
	// CgroupPath is the pod slice's cgroup path.
	CgroupPath string
	// NetNSPath is the pinned network namespace; empty for host-network
	// pods, whose counters are then podunit's own namespace's.
	NetNSPath string
}

// LayerUsage is a container's writable layer usage.
type LayerUsage struct {
	Mountpoint            string
	UsedBytes, InodesUsed uint64
	// Capacity of the filesystem holding the layer, for the fs_* metrics;
	// zero when unknown.
	TotalBytes, TotalInodes, FreeInodes uint64
}

// Source lists the containers and pods podunit knows.
type Source interface {
	StatsContainers(ctx context.Context) ([]Container, error)
	StatsPods(ctx context.Context) ([]Pod, error)
}

// Options wire a Collector.
type Options struct {
	Reader *stats.Reader
	Source Source
	// WritableLayer reports the container's writable layer; nil leaves
	// WritableLayer out of the stats.
	WritableLayer func(ctx context.Context, containerID string) (LayerUsage, error)
	// NetworkStats reads a namespace's interfaces; nil means
	// stats.NetworkStats, and HostNetworkStats for host-network pods.
	NetworkStats     func(nsPath string) ([]stats.InterfaceStats, error)
	HostNetworkStats func() ([]stats.InterfaceStats, error)
}

// Collector answers the CRI stats and metrics calls.
type Collector struct{ o Options }

// New returns a Collector.
func New(o Options) *Collector {
	if o.NetworkStats == nil {
		o.NetworkStats = stats.NetworkStats
	}
	if o.HostNetworkStats == nil {
		o.HostNetworkStats = stats.HostNetworkStats
	}
	return &Collector{o: o}
}

func containerKey(id string) string { return "c/" + id }
func podKey(id string) string       { return "p/" + id }

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

func u64p(v *uint64) *runtimeapi.UInt64Value {
	if v == nil {
		return nil
	}
	return u64(*v)
}

// read returns the cgroup stats or nil when the cgroup does not exist
// (container not started yet, or stopped and collected).
func (c *Collector) read(key, path string) (*stats.CgroupStats, error) {
	if path == "" {
		return nil, nil
	}
	st, err := c.o.Reader.Read(key, path)
	if errors.Is(err, errdefs.ErrNotFound) {
		c.o.Reader.Forget(key)
		return nil, nil
	}
	return st, err
}

// psi converts a PSI reading. nil stays nil, and so does a missing "full"
// line: the kubelet must read cgroup v1 or a kernel without PSI as
// "unknown", not as a container under no pressure.
func psi(p *stats.PSIStats) *runtimeapi.PsiStats {
	if p == nil {
		return nil
	}
	return &runtimeapi.PsiStats{Some: psiData(p.Some), Full: psiData(p.Full)}
}

func psiData(d *stats.PSIData) *runtimeapi.PsiData {
	if d == nil {
		return nil
	}
	return &runtimeapi.PsiData{Total: d.TotalNanos, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
}

// The pressure files do not depend on the cpu or memory controller being
// enabled, so PSI is reported whenever the cgroup was read.
func cpuUsage(ts int64, st *stats.CgroupStats) *runtimeapi.CpuUsage {
	u := &runtimeapi.CpuUsage{Timestamp: ts}
	if st == nil {
		return u
	}
	if st.CPU != nil {
		u.UsageCoreNanoSeconds = u64(st.CPU.UsageNanos)
		u.UsageNanoCores = u64p(st.CPU.NanoCores)
	}
	u.Psi = psi(st.Pressure.CPU)
	return u
}

// ioUsage carries only PSI (the CRI has no I/O counters there), so it is
// nil when there is none, like swap without swap accounting.
func ioUsage(ts int64, st *stats.CgroupStats) *runtimeapi.IoUsage {
	if st == nil || st.Pressure.IO == nil {
		return nil
	}
	return &runtimeapi.IoUsage{Timestamp: ts, Psi: psi(st.Pressure.IO)}
}

func memoryUsage(ts int64, st *stats.CgroupStats) *runtimeapi.MemoryUsage {
	u := &runtimeapi.MemoryUsage{Timestamp: ts}
	if st == nil {
		return u
	}
	u.Psi = psi(st.Pressure.Memory)
	if st.Memory != nil {
		m := st.Memory
		u.WorkingSetBytes = u64(m.WorkingSet)
		u.AvailableBytes = u64p(m.Available)
		u.UsageBytes = u64(m.Usage)
		u.RssBytes = u64(m.RSS)
		u.PageFaults = u64(m.PageFaults)
		u.MajorPageFaults = u64(m.MajorPageFaults)
	}
	return u
}

func swapUsage(ts int64, st *stats.CgroupStats) *runtimeapi.SwapUsage {
	if st == nil || st.Swap == nil {
		return nil
	}
	return &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: u64(st.Swap.Usage), SwapAvailableBytes: u64p(st.Swap.Available)}
}

// Every stats message carries CPU and memory with a timestamp even when
// the cgroup is gone: created-but-not-started containers are listed too,
// and consumers read missing values as "unknown", not "zero".
func (c *Collector) containerStats(ctx context.Context, ctr Container) (*runtimeapi.ContainerStats, error) {
	st, err := c.read(containerKey(ctr.ID), ctr.CgroupPath)
	if err != nil {
		return nil, fmt.Errorf("stats of container %s: %w", ctr.ID, err)
	}
	ts := time.Now().UnixNano()
	if st != nil {
		ts = st.Time.UnixNano()
	}
	out := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: ctr.ID, Metadata: ctr.Metadata, Labels: ctr.Labels, Annotations: ctr.Annotations},
		Cpu:        cpuUsage(ts, st),
		Memory:     memoryUsage(ts, st),
		Swap:       swapUsage(ts, st),
		Io:         ioUsage(ts, st),
	}
	if c.o.WritableLayer != nil {
		l, err := c.o.WritableLayer(ctx, ctr.ID)
		switch {
		case err == nil:
			out.WritableLayer = &runtimeapi.FilesystemUsage{
				Timestamp: ts, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: l.Mountpoint},
				UsedBytes: u64(l.UsedBytes), InodesUsed: u64(l.InodesUsed),
			}
		case errors.Is(err, errdefs.ErrNotFound):
			// Layer removed between listing and measuring.
		default:
			return nil, fmt.Errorf("writable layer of container %s: %w", ctr.ID, err)
		}
	}
	return out, nil
}

func matchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// ContainerStats returns one container's stats.
func (c *Collector) ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error) {
	all, err := c.o.Source.StatsContainers(ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]Container, len(all))
	for _, ctr := range all {
		byID[ctr.ID] = ctr
	}
	full, err := idindex.Resolve("container", id, byID)
	if err != nil {
		return nil, err
	}
	return c.containerStats(ctx, byID[full])
}

// ListContainerStats returns the stats of the containers matching f. It
// also drops CPU samples of containers that no longer exist.
func (c *Collector) ListContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	all, err := c.o.Source.StatsContainers(ctx)
	if err != nil {
		return nil, err
	}
	if f == nil {
		c.prune(all, nil)
	}
	var out []*runtimeapi.ContainerStats
	for _, ctr := range all {
		if f != nil && (f.Id != "" && f.Id != ctr.ID || f.PodSandboxId != "" && f.PodSandboxId != ctr.PodID || !matchLabels(ctr.Labels, f.LabelSelector)) {
			continue
		}
		st, err := c.containerStats(ctx, ctr)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// prune forgets samples of containers and pods not in the full lists
// (pods nil: keep every pod key).
func (c *Collector) prune(ctrs []Container, pods []Pod) {
	keep := map[string]bool{}
	for _, ctr := range ctrs {
		keep[containerKey(ctr.ID)] = true
	}
	for _, p := range pods {
		keep[podKey(p.ID)] = true
	}
	c.o.Reader.Keep(func(k string) bool {
		if pods == nil && len(k) > 2 && k[:2] == "p/" {
			return true
		}
		return keep[k]
	})
}

func (c *Collector) network(ts int64, p Pod) (*runtimeapi.NetworkUsage, error) {
	var (
		ifs []stats.InterfaceStats
		err error
	)
	if p.NetNSPath == "" {
		ifs, err = c.o.HostNetworkStats()
	} else {
		ifs, err = c.o.NetworkStats(p.NetNSPath)
	}
	if err != nil {
		return nil, err
	}
	n := &runtimeapi.NetworkUsage{Timestamp: ts}
	for _, i := range ifs {
		u := &runtimeapi.NetworkInterfaceUsage{
			Name: i.Name, RxBytes: u64(i.RxBytes), RxErrors: u64(i.RxErrors), TxBytes: u64(i.TxBytes), TxErrors: u64(i.TxErrors),
		}
		n.Interfaces = append(n.Interfaces, u)
		if i.Name == DefaultInterface {
			n.DefaultInterface = u
		}
	}
	return n, nil
}

// DefaultInterface is the pod interface CNI plugins create.
const DefaultInterface = "eth0"

func (c *Collector) podStats(ctx context.Context, p Pod, ctrs []Container) (*runtimeapi.PodSandboxStats, error) {
	st, err := c.read(podKey(p.ID), p.CgroupPath)
	if err != nil {
		return nil, fmt.Errorf("stats of pod %s: %w", p.ID, err)
	}
	ts := time.Now().UnixNano()
	if st != nil {
		ts = st.Time.UnixNano()
	}
	linux := &runtimeapi.LinuxPodSandboxStats{Cpu: cpuUsage(ts, st), Memory: memoryUsage(ts, st), Io: ioUsage(ts, st)}
	if st != nil && st.Pids != nil {
		linux.Process = &runtimeapi.ProcessUsage{Timestamp: ts, ProcessCount: u64(st.Pids.Current)}
	}
	// A pod whose namespace pin is gone (stopped) simply has no network.
	if n, err := c.network(ts, p); err == nil {
		linux.Network = n
	}
	for _, ctr := range ctrs {
		if ctr.PodID != p.ID {
			continue
		}
		cs, err := c.containerStats(ctx, ctr)
		if err != nil {
			return nil, err
		}
		linux.Containers = append(linux.Containers, cs)
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: p.ID, Metadata: p.Metadata, Labels: p.Labels, Annotations: p.Annotations},
		Linux:      linux,
	}, nil
}

// PodSandboxStats returns one pod's stats including its containers'.
func (c *Collector) PodSandboxStats(ctx context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	pods, err := c.o.Source.StatsPods(ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]Pod, len(pods))
	for _, p := range pods {
		byID[p.ID] = p
	}
	full, err := idindex.Resolve("pod sandbox", id, byID)
	if err != nil {
		return nil, err
	}
	ctrs, err := c.o.Source.StatsContainers(ctx)
	if err != nil {
		return nil, err
	}
	return c.podStats(ctx, byID[full], ctrs)
}

// ListPodSandboxStats returns the stats of the pods matching f.
func (c *Collector) ListPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	pods, err := c.o.Source.StatsPods(ctx)
	if err != nil {
		return nil, err
	}
	ctrs, err := c.o.Source.StatsContainers(ctx)
	if err != nil {
		return nil, err
	}
	if f == nil {
		c.prune(ctrs, pods)
	}
	var out []*runtimeapi.PodSandboxStats
	for _, p := range pods {
		if f != nil && (f.Id != "" && f.Id != p.ID || !matchLabels(p.Labels, f.LabelSelector)) {
			continue
		}
		ps, err := c.podStats(ctx, p, ctrs)
		if err != nil {
			return nil, err
		}
		out = append(out, ps)
	}
	return out, nil
}
