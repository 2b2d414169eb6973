package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/cri"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/gc"
	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/metrics"
	"github.com/podunit/podunit/mountns"
	"github.com/podunit/podunit/network"
	"github.com/podunit/podunit/sandbox"
	"github.com/podunit/podunit/stats"
	"github.com/podunit/podunit/stats/cristats"
	"github.com/podunit/podunit/streaming"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitcgroup"
	"github.com/prometheus/client_golang/prometheus"
)

// podNetNS adapts the pod manager to the streaming server's Pods.
type podNetNS struct{ pods *sandbox.Manager }

func (p podNetNS) NetNSPath(ctx context.Context, podID string) (string, error) {
	sb, err := p.pods.Get(ctx, podID)
	if err != nil {
		return "", err
	}
	return sb.NetNSPath, nil
}

// statsSource joins containers and pods for the stats collector.
type statsSource struct {
	ctrs *container.Manager
	pods *sandbox.Manager
}

func (s statsSource) StatsContainers(ctx context.Context) ([]cristats.Container, error) {
	return s.ctrs.StatsContainers(ctx)
}

func (s statsSource) StatsPods(ctx context.Context) ([]cristats.Pod, error) {
	var out []cristats.Pod
	for _, sb := range s.pods.List(ctx) {
		out = append(out, cristats.Pod{
			ID: sb.ID, Metadata: sb.Config.GetMetadata(), Labels: sb.Config.GetLabels(),
			Annotations: sb.Config.GetAnnotations(), CgroupPath: systemd.SlicePath(sb.Slice), NetNSPath: sb.NetNSPath,
		})
	}
	return out, nil
}

// startStreaming starts (or finds) the streaming session process,
// podunit-stream.service, which serves the exec/attach/port-forward URLs
// and runs the sessions outside podunit's cgroup, so a podunit restart
// ends none (docs/streaming.md "Session process"). podunit only checks
// requests and registers sessions with it.
func startStreaming(cfg *config.Config, s *services, stored []*os.File, log *slog.Logger) *streaming.Remote {
	log = log.With("component", "streaming")
	streaming.ReleaseStored(stored, streaming.NotifyFDStore{}, log)
	sc := streaming.Config{Address: cfg.Streaming.Address, TLSCert: cfg.Streaming.TLSCert, TLSKey: cfg.Streaming.TLSKey}
	sock := filepath.Join(cfg.Paths.RunDir, "stream.sock")
	props := streaming.UnitProperties(mountns.Wrap(mountNS(cfg), []string{s.self, streaming.HelperName}),
		sock, s.relay.Socket, sc)
	ensure := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return streaming.Ensure(ctx, s.systemd, props, sock, sc, log)
	}
	if err := ensure(context.Background()); err != nil {
		// Not fatal: the next Exec, Attach or PortForward tries again.
		log.Warn("streaming session process not running", "err", err)
	}
	return &streaming.Remote{Socket: sock, Containers: s.ctrs, Execs: s.ctrs, Pods: podNetNS{s.pods}, Ensure: ensure}
}

// startEvents subscribes to systemd's unit signals and translates them to
// CRI container events.
func startEvents(ctx context.Context, cfg *config.Config, s *services, hub *events.Hub, log *slog.Logger) error {
	w, err := systemd.NewWatcher(systemd.WatchOptions{
		Match:       func(u string) bool { return strings.HasPrefix(u, container.UnitPrefix) },
		CallTimeout: time.Duration(cfg.Systemd.CallTimeout),
		Logger:      log.With("component", "unit-watcher"),
	})
	if err != nil {
		return err
	}
	tr, err := events.NewTranslator(events.TranslatorOptions{
		Units: w.Events(), Containers: s.ctrs, Systemd: s.systemd,
		UnitPattern: container.UnitPrefix + "*.service", Hub: hub,
		CallTimeout: time.Duration(cfg.Systemd.CallTimeout), Logger: log.With("component", "events"),
	})
	if err != nil {
		return err
	}
	go func() { _ = w.Run(ctx) }()
	go func() { _ = tr.Run(ctx) }()
	return nil
}

func statsDeps(s *services, reader *stats.Reader, hub *events.Hub, storageRoot string) cri.StatsDeps {
	collector := cristats.New(cristats.Options{
		Reader: reader,
		Source: statsSource{s.ctrs, s.pods},
		WritableLayer: func(ctx context.Context, id string) (cristats.LayerUsage, error) {
			b, n, err := s.images.RootfsUsage(ctx, id)
			if err != nil {
				return cristats.LayerUsage{}, err
			}
			l := cristats.LayerUsage{Mountpoint: storageRoot, UsedBytes: b, InodesUsed: n}
			l.TotalBytes, l.TotalInodes, l.FreeInodes, _ = stats.FSInfo(storageRoot)
			return l, nil
		},
	})
	return cri.StatsDeps{Collector: collector, Hub: hub}
}

// startMetrics serves Prometheus metrics (and pprof) on addr.
func startMetrics(addr string, s *services, hub *events.Hub, log *slog.Logger) (*metrics.Server, error) {
	var cs []prometheus.Collector
	cs = append(cs, systemd.Collectors()...)
	cs = append(cs, systemd.WatcherCollectors()...)
	cs = append(cs, cri.Collectors()...)
	cs = append(cs, events.Collectors()...)
	cs = append(cs, gc.Collectors()...)
	reg, err := metrics.NewRegistry(metrics.Options{
		Collectors: cs,
		ContainersByState: func() map[string]int {
			out := map[string]int{}
			list, err := s.ctrs.List(context.Background(), nil)
			if err != nil {
				return out
			}
			for _, c := range list {
				out[strings.ToLower(strings.TrimPrefix(c.State.String(), "CONTAINER_"))]++
			}
			return out
		},
		EventSubscribers: hub.Subscribers,
		LogRelayStats:    func() (logrelay.Stats, error) { return s.relay.Stats(2 * time.Second) },
	})
	if err != nil {
		return nil, err
	}
	return metrics.Start(addr, reg, log.With("component", "metrics"))
}

// collectors are the garbage collectors run at start (minAge 0, before the
// CRI serves), periodically and by `podunit gc` (minAge > 0, so objects
// being created right now, which have mounts and directories before their
// record, are left alone): podunit's own units, storage containers,
// mounts and directories that no record owns, and host-local IPAM
// reservations a killed plugin left without an owner.
func collectors(cfg *config.Config, s *services, minAge time.Duration) []gc.Collector {
	ctx := context.Background()
	knownCtr := func(id string) bool { _, _, err := s.ctrs.Status(ctx, id, false); return err == nil }
	knownPod := func(id string) bool { _, err := s.pods.Get(ctx, id); return err == nil }
	cs := []gc.Collector{
		gc.Units{Conn: s.systemd, Patterns: []string{container.UnitPrefix + "*.service"}, Known: func(u string) bool {
			_, ok := s.ctrs.ContainerOfUnit(u)
			return ok
		}, Leftover: func(cg string) error { return unitcgroup.RemoveLeftover(s.cgroupRoot, cg) }},
	}
	if minAge == 0 {
		// Storage containers carry no age podunit can trust, so only the
		// start-up pass, which runs before any CreateContainer, takes them.
		cs = append(cs, gc.Func{N: "storage-containers", F: func(ctx context.Context, dry bool) ([]string, error) {
			ids, err := s.images.ListRootfs(ctx)
			if err != nil {
				return nil, err
			}
			var out []string
			for _, id := range ids {
				if knownCtr(id) {
					continue
				}
				out = append(out, id)
				if !dry {
					if err := s.images.DeleteRootfs(ctx, id); err != nil {
						return out, err
					}
				}
			}
			return out, nil
		}})
		// After a reboot the transient store's records are gone and the
		// layers they named are left under storage_root; with nothing
		// created yet, every layer directory no record names is one.
		cs = append(cs, gc.Func{N: "storage-orphan-layers", F: s.images.CollectOrphanLayers})
	}
	cni := network.NewCNI(network.Options{ConfDir: cfg.CNI.ConfDir, BinDirs: cfg.CNI.BinDirs})
	cs = append(cs, gc.Func{N: "cni-torn-reservations", F: func(ctx context.Context, dry bool) ([]string, error) {
		dirs, err := cni.HostLocalDirs()
		if errors.Is(err, errdefs.ErrUnavailable) {
			return nil, nil // no usable network configuration: nothing was reserved by it
		}
		if err != nil {
			return nil, err
		}
		var out []string
		for _, d := range dirs {
			torn, err := network.ReleaseTornReservations(d, dry)
			out = append(out, torn...)
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}})
	podRun := filepath.Join(cfg.Paths.RunDir, "sandboxes")
	ctrRun := filepath.Join(cfg.Paths.RunDir, "containers")
	return append(cs,
		gc.Mounts{Root: podRun, Known: knownPod, MinAge: minAge},
		gc.Mounts{Root: ctrRun, Known: knownCtr, MinAge: minAge},
		gc.Dirs{Dir: podRun, Known: knownPod, MinAge: minAge},
		gc.Dirs{Dir: ctrRun, Known: knownCtr, MinAge: minAge},
		gc.Dirs{Dir: filepath.Join(cfg.Paths.StateDir, "containers"), Known: knownCtr, MinAge: minAge},
		gc.Dirs{Dir: filepath.Join(cfg.Paths.StateDir, "sandboxes"), Known: knownPod, MinAge: minAge},
	)
}
