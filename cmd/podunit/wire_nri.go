package main

import (
	"fmt"
	"log/slog"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/nri"
	"github.com/podunit/podunit/sandbox"
)

// nriPlugins is the NRI runtime side, or nil when [nri] is off; the
// managers get it as their Plugins (nil interfaces when off).
type nriPlugins struct{ rt *nri.Runtime }

func newNRI(cfg *config.Config, log *slog.Logger) (nriPlugins, error) {
	if !cfg.NRI.Enabled {
		return nriPlugins{}, nil
	}
	rt, err := nri.New(nri.Options{
		SocketPath:          cfg.NRI.SocketPath,
		DisableConnections:  cfg.NRI.DisableConnections,
		PluginPath:          cfg.NRI.PluginPath,
		PluginConfigPath:    cfg.NRI.PluginConfigPath,
		RegistrationTimeout: cfg.NRI.RegistrationTimeout.D(),
		RequestTimeout:      cfg.NRI.RequestTimeout.D(),
		Version:             podunitVersion(),
		Logger:              log.With("component", "nri"),
	})
	if err != nil {
		return nriPlugins{}, err
	}
	return nriPlugins{rt}, nil
}

func (n nriPlugins) sandbox() sandbox.Plugins {
	if n.rt == nil {
		return nil
	}
	return n.rt
}

func (n nriPlugins) containers() container.Plugins {
	if n.rt == nil {
		return nil
	}
	return n.rt
}

// start serves plugins once the managers have recovered: a plugin's
// synchronization must see every pod and container.
func (n nriPlugins) start(s *services, copts container.Options) error {
	if n.rt == nil {
		return nil
	}
	n.rt.Attach(nri.Deps{Pods: s.pods, Containers: s.ctrs, CDI: copts.CDI})
	if err := n.rt.Start(); err != nil {
		return fmt.Errorf("nri: %w", err)
	}
	s.stop = append(s.stop, n.rt.Stop)
	return nil
}
