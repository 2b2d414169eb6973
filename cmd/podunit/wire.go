package main

import (
	"context"
	"log/slog"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/cri"
	"github.com/podunit/podunit/systemd"
)

// services are the long-lived parts of the daemon.
type services struct {
	cri     *cri.Server
	systemd *systemd.DBus
}

func (s *services) close() {
	s.systemd.Close()
}

// wire builds podunit's packages from the configuration.
func wire(ctx context.Context, cfg *config.Config, log *slog.Logger) (*services, error) {
	sd := systemd.New(systemd.Options{
		CallTimeout:     cfg.Systemd.CallTimeout.D(),
		MaxParallelJobs: cfg.Systemd.MaxParallelJobs,
		Logger:          log.With("component", "systemd"),
	})
	if err := sd.Ping(ctx); err != nil {
		// Not fatal: the CRI stays up and Status says why the runtime is
		// not ready, so the kubelet and operators can see it.
		log.Warn("systemd not reachable over D-Bus yet", "err", err)
	}
	s := &services{systemd: sd}
	s.cri = cri.New(cri.Deps{Config: cfg, Systemd: sd, Version: podunitVersion(), Logger: log})
	return s, nil
}
