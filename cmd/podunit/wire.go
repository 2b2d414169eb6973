package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/cri"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/gc"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/logrelay/relayunit"
	"github.com/podunit/podunit/metrics"
	"github.com/podunit/podunit/sandbox"
	"github.com/podunit/podunit/stats"
	"github.com/podunit/podunit/streaming"
	"github.com/podunit/podunit/systemd"
)

// services are the long-lived parts of the daemon.
type services struct {
	cri     *cri.Server
	systemd *systemd.DBus
	images  *imagestore.Store
	pods    *sandbox.Manager
	ctrs    *container.Manager
	stream  *streaming.Remote
	hub     *events.Hub
	metrics *metricsEndpoint
	gc      *gc.Runner
	relay   logrelay.Client
	// self is podunit's binary (the runtimes' exec helper).
	self string
	// cgroupRoot is where the cgroup hierarchies are mounted.
	cgroupRoot string
	stop       []func()
	log        *slog.Logger
	// warming is the image store's Warm, which close ends and waits for.
	warming    sync.WaitGroup
	stopWarmup context.CancelFunc
}

// drainTimeout bounds how long a graceful stop waits for removed
// containers' files to be deleted (container.Manager.Drain); what is left
// stays in the trash and is deleted at the next start.
const drainTimeout = 10 * time.Second

func (s *services) close() {
	for i := len(s.stop) - 1; i >= 0; i-- {
		s.stop[i]()
	}
	if s.metrics != nil {
		s.metrics.stop()
	}
	if s.hub != nil {
		s.hub.Close()
	}
	if s.ctrs != nil {
		// Before the image store closes: the reaper deletes through it.
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		if err := s.ctrs.Drain(ctx); err != nil && s.log != nil {
			s.log.Warn("stopping with removed containers' files not yet deleted; the next start deletes them", "err", err)
		}
		cancel()
	}
	if s.images != nil {
		s.stopWarmup()
		s.warming.Wait()
		s.images.Close()
	}
	s.systemd.Close()
}

// wire builds podunit's packages from the configuration and gives rl the
// steps that apply a reloaded one to them.
func wire(ctx context.Context, cfg *config.Config, log *slog.Logger, storedFDs []*os.File, rl *reloader) (*services, error) {
	sd, err := systemd.New(systemd.Options{
		CallTimeout:     cfg.Systemd.CallTimeout.D(),
		MaxParallelJobs: cfg.Systemd.MaxParallelJobs,
		Logger:          log.With("component", "systemd"),
	})
	if err != nil {
		return nil, err
	}
	if err := sd.Ping(ctx); err != nil {
		// Not fatal: the CRI stays up and Status says why the runtime is
		// not ready, so the kubelet and operators can see it.
		log.Warn("systemd not reachable over D-Bus yet", "err", err)
	}
	s := &services{systemd: sd, log: log}
	il := imageLive(cfg)
	images, err := imagestore.New(ctx, imagestore.Options{
		Root:                cfg.Image.StorageRoot,
		RunRoot:             cfg.Image.StorageRunRoot,
		Driver:              cfg.Image.StorageDriver,
		Transient:           cfg.Image.StorageTransient,
		RegistriesConf:      il.RegistriesConf,
		PolicyPath:          il.PolicyPath,
		AuthFile:            il.AuthFile,
		PullProgressTimeout: il.PullProgressTimeout,
		MaxParallelPulls:    cfg.Image.MaxParallelPulls,
		PinnedImages:        il.PinnedImages,
		Logger:              log.With("component", "images"),
	})
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s.images = images
	// In the background: the CRI serves meanwhile, a call that comes first
	// reads the image from storage as it would without the warm-up.
	wctx, stopWarmup := context.WithCancel(ctx)
	s.stopWarmup = stopWarmup
	s.warming.Add(1)
	go func() {
		defer s.warming.Done()
		images.Warm(wctx)
	}()

	plugins, err := newNRI(cfg, log)
	if err != nil {
		return nil, err
	}
	copts, err := container.OptionsFromConfig(cfg, log.With("component", "containers"))
	if err != nil {
		return nil, err
	}
	pods, err := sandbox.New(sandbox.Options{
		StateDir:    cfg.Paths.StateDir,
		RunDir:      cfg.Paths.RunDir,
		CNIConfDir:  cfg.CNI.ConfDir,
		CNIBinDirs:  cfg.CNI.BinDirs,
		ParentSlice: cfg.Systemd.ParentSlice,
		MountNS:     mountNS(cfg),
		OpTimeout:   cfg.Systemd.CallTimeout.D(),
		Handlers:    handlerNames(cfg),
		Systemd:     sd,
		Logger:      log.With("component", "pods"),
		Plugins:     plugins.sandbox(),
		CgroupRoot:  copts.CgroupRoot,
	})
	if err != nil {
		return nil, fmt.Errorf("pod manager: %w", err)
	}
	s.pods = pods

	// The hub exists before the managers: recovery already publishes
	// exits, which the hub keeps for the kubelet's first subscription.
	s.hub = events.NewHub(events.HubOptions{})
	hub := s.hub

	// The node's log relay writes container output to the CRI log files
	// and journald from outside the container units (package logrelay); it
	// outlives podunit.
	relaySock := filepath.Join(cfg.Paths.RunDir, "logrelay.sock")
	lm := logrelay.Client{Socket: relaySock}
	s.relay = lm
	s.self = copts.Self
	s.cgroupRoot = copts.CgroupRoot
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	err = relayunit.Ensure(rctx, sd, copts.Self, relaySock, filepath.Join(cfg.Paths.RunDir, "logrelay"))
	rcancel()
	if err != nil {
		log.Warn("no log relay: container output is relayed to journald from inside each unit, no CRI log file is written (kubectl logs stays empty) and the last output of an exiting container can be cut", "err", err)
	} else {
		copts.LogRelaySocket = relaySock
	}
	runtimes, err := container.RuntimesFromConfig(cfg.Runtime.Handlers, cfg.Paths.RunDir, copts.Self)
	if err != nil {
		return nil, err
	}
	// Handlers change only with the configuration: asked now and, for new
	// or changed handlers, at a reload (Manager.SetRuntimes); the manager
	// keeps them for CreateContainer's checks and Status's
	// RuntimeHandlerFeatures (Manager.HandlerFeatures).
	features := container.ProbeFeatures(ctx, runtimes, log.With("component", "containers"))
	ctrs, err := container.New(copts, container.Deps{
		Systemd: sd, Images: images, Pods: container.SandboxPods(pods), Runtimes: runtimes, Features: features, Logs: lm, Events: hub,
		Plugins: plugins.containers(),
	})
	if err != nil {
		return nil, fmt.Errorf("container manager: %w", err)
	}
	s.ctrs = ctrs

	// Pods first (containers look their pod up), then containers.
	if err := pods.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recover pods: %w", err)
	}
	if err := ctrs.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recover containers: %w", err)
	}
	if err := plugins.start(s, copts); err != nil {
		return nil, err
	}
	// Leftovers of a crash (units, mounts, storage containers, dirs with
	// no record) go before the CRI serves, when nothing is in flight.
	startGC := gc.NewRunner(log.With("component", "gc"), collectors(cfg, s, 0)...)
	if _, err := startGC.Run(ctx, false); err != nil {
		log.Warn("garbage collection at start incomplete", "err", err)
	}
	s.gc = gc.NewRunner(log.With("component", "gc"), collectors(cfg, s, 10*time.Minute)...)
	go s.gc.Loop(ctx, cfg.GC.Interval.D())
	if stopAdmin, err := serveAdmin(cfg.Paths.RunDir, s.gc, rl, log); err != nil {
		log.Warn("admin socket unavailable: podunit gc and podunit reload will not work (SIGHUP still reloads)", "err", err)
	} else {
		s.stop = append(s.stop, stopAdmin)
	}

	s.stream = startStreaming(cfg, s, storedFDs, log)
	if err := startEvents(ctx, cfg, s, s.hub, log); err != nil {
		return nil, err
	}
	reader, err := stats.Host()
	if err != nil {
		return nil, fmt.Errorf("cgroup stats: %w", err)
	}

	s.cri = cri.New(cri.Deps{
		Config: rl.current, Systemd: sd, Images: images, Pods: pods, Containers: ctrs, Logs: lm, Stream: s.stream,
		Stats:   statsDeps(s, reader, s.hub, cfg.Image.StorageRoot),
		Network: pods.NetworkReady, Handlers: ctrs.HandlerFeatures, Version: podunitVersion(), Logger: log,
	})
	s.metrics = &metricsEndpoint{start: func(addr string) (*metrics.Server, error) { return startMetrics(addr, s, s.hub, log) }}
	if err := s.metrics.set(cfg.Metrics.Address); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	steps := reloadSteps(s)
	if err := coverLiveKeys(steps); err != nil {
		return nil, err
	}
	rl.setSteps(steps)
	return s, nil
}
