package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/metrics"
)

// Keys each reload step applies. server.log_level is the reloader's own.
// A test checks that together they are exactly config.LiveKeys().
var (
	runtimeKeys = []string{"runtime.default_handler", "runtime.handlers"}
	metricsKeys = []string{"metrics.address"}
	imageKeys   = []string{"image.registries_conf", "image.policy_path", "image.auth_file", "image.pull_progress_timeout", "image.pause_image", "image.pinned_images"}
)

// reloadSteps apply a reloaded configuration to the running services, the
// ones whose changes can be undone exactly first: a refusal by the image
// store, the likeliest (a broken registries.conf), then undoes them.
func reloadSteps(s *services) []reloadStep {
	return []reloadStep{
		{name: "runtime handlers", keys: runtimeKeys, apply: func(ctx context.Context, c config.Config) error {
			rts, err := container.RuntimesFromConfig(c.Runtime.Handlers, c.Paths.RunDir, s.self)
			if err != nil {
				return err
			}
			if err := s.ctrs.SetRuntimes(ctx, c.Runtime.DefaultHandler, rts); err != nil {
				return err
			}
			s.pods.SetHandlers(handlerNames(&c))
			return nil
		}},
		{name: "metrics endpoint", keys: metricsKeys, apply: func(_ context.Context, c config.Config) error {
			return s.metrics.set(c.Metrics.Address)
		}},
		// Every reload: registries.conf, the policy or the auth file may
		// have changed while the keys naming them did not.
		{name: "image store", keys: imageKeys, always: true, apply: func(ctx context.Context, c config.Config) error {
			return s.images.Reconfigure(ctx, imageLive(&c))
		}},
	}
}

// coverLiveKeys checks that steps, with the log level, apply exactly the
// keys config marks live: a key tagged live that no step applies would be
// reported as reloaded and never reach its component.
func coverLiveKeys(steps []reloadStep) error {
	covered := []string{"server.log_level"}
	for _, st := range steps {
		covered = append(covered, st.keys...)
	}
	slices.Sort(covered)
	live := config.LiveKeys()
	slices.Sort(live)
	if !slices.Equal(covered, live) {
		return fmt.Errorf("reload steps cover %q, config's live keys are %q", covered, live)
	}
	return nil
}

// imageLive is the image store's share of the live keys.
func imageLive(c *config.Config) imagestore.Live {
	return imagestore.Live{
		RegistriesConf:      c.Image.RegistriesConf,
		PolicyPath:          c.Image.PolicyPath,
		AuthFile:            c.Image.AuthFile,
		PullProgressTimeout: c.Image.PullProgressTimeout.D(),
		// The pause image is always pinned, besides the operator's.
		PinnedImages: append([]string{c.Image.PauseImage}, c.Image.PinnedImages...),
	}
}

// handlerNames are the runtime handlers a pod may name.
func handlerNames(c *config.Config) []string {
	names := make([]string, 0, len(c.Runtime.Handlers))
	for name := range c.Runtime.Handlers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// metricsEndpoint is the metrics server, which a reload may move, start or
// stop.
type metricsEndpoint struct {
	start func(addr string) (*metrics.Server, error)

	mu   sync.Mutex
	addr string
	srv  *metrics.Server
}

// set serves on addr ("" stops serving). The old endpoint stops first, as
// the new address may name the same port differently; when the new one
// cannot listen, the old one comes back and the error is returned.
func (m *metricsEndpoint) set(addr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if addr == m.addr {
		return nil
	}
	oldAddr := m.addr
	m.stopLocked()
	if addr == "" {
		return nil
	}
	srv, err := m.start(addr)
	if err == nil {
		m.srv, m.addr = srv, addr
		return nil
	}
	if oldAddr != "" {
		if old, rerr := m.start(oldAddr); rerr == nil {
			m.srv, m.addr = old, oldAddr
		} else {
			err = fmt.Errorf("%w (and the old address %s is gone: %w)", err, oldAddr, rerr)
		}
	}
	return err
}

func (m *metricsEndpoint) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked()
}

func (m *metricsEndpoint) stopLocked() {
	if m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = m.srv.Stop(ctx)
	cancel()
	m.srv, m.addr = nil, ""
}
