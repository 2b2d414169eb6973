package cri

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd/systemdtest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status answers from the configuration running now: a reload that swaps
// it shows in the verbose config and in the runtime handlers at once.
func TestStatusFollowsReloadedConfig(t *testing.T) {
	var running atomic.Pointer[config.Config]
	first := config.Default()
	first.CNI.ConfDir = t.TempDir()
	running.Store(&first)
	s := New(Deps{Config: running.Load, Systemd: systemdtest.New(), Version: "1.2.3"})

	status := func() (config.Config, []string) {
		t.Helper()
		st, err := s.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		var c config.Config
		if err := json.Unmarshal([]byte(st.Info["config"]), &c); err != nil {
			t.Fatalf("verbose config: %v", err)
		}
		var names []string
		for _, h := range st.RuntimeHandlers {
			names = append(names, h.Name)
		}
		return c, names
	}
	if c, names := status(); c.Image.RegistriesConf != first.Image.RegistriesConf || slices.Contains(names, "kata") {
		t.Fatalf("before: registries %q handlers %q", c.Image.RegistriesConf, names)
	}
	next := first
	next.Image.RegistriesConf = "/etc/podunit/registries.conf"
	next.Runtime.Handlers = map[string]config.Handler{"runc": first.Runtime.Handlers["runc"], "kata": first.Runtime.Handlers["runc"]}
	running.Store(&next)
	if c, names := status(); c.Image.RegistriesConf != "/etc/podunit/registries.conf" || !slices.Contains(names, "kata") || slices.Contains(names, "crun") {
		t.Fatalf("after the swap: registries %q handlers %q", c.Image.RegistriesConf, names)
	}
}

// rroRuntime is a handler that can make recursive read-only mounts.
type rroRuntime struct{ ctrTestRuntime }

func (rroRuntime) Features(ctx context.Context) (oci.Features, error) {
	return oci.Features{Source: "test", RecursiveReadOnly: true}, nil
}

// A reload that adds a handler makes it and its probed features appear in
// Status: names and features come from the container manager, which holds
// the handlers in force.
func TestStatusFeaturesFollowReloadedHandlers(t *testing.T) {
	_, ctrs := newManagers(t, nil)
	cfg := config.Default()
	cfg.CNI.ConfDir = t.TempDir()
	s := New(Deps{Config: func() *config.Config { return &cfg }, Systemd: systemdtest.New(), Containers: ctrs, Handlers: ctrs.HandlerFeatures})
	handlers := func() map[string]*runtimeapi.RuntimeHandlerFeatures {
		t.Helper()
		st, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*runtimeapi.RuntimeHandlerFeatures{}
		for _, h := range st.RuntimeHandlers {
			out[h.Name] = h.Features
		}
		return out
	}
	if got := handlers(); len(got) != 2 || got["kata"] != nil {
		t.Fatalf("before: %v", got)
	}
	if err := ctrs.SetRuntimes(context.Background(), "runc", map[string]oci.Runtime{"runc": ctrTestRuntime{}, "kata": rroRuntime{}}); err != nil {
		t.Fatal(err)
	}
	got := handlers()
	if len(got) != 3 || got["kata"] == nil || !got["kata"].RecursiveReadOnlyMounts || got["runc"].RecursiveReadOnlyMounts || got[""].RecursiveReadOnlyMounts {
		t.Fatalf("after adding kata: %v", got)
	}
	if err := ctrs.SetRuntimes(context.Background(), "kata", map[string]oci.Runtime{"runc": ctrTestRuntime{}, "kata": rroRuntime{}}); err != nil {
		t.Fatal(err)
	}
	if got := handlers(); !got[""].RecursiveReadOnlyMounts {
		t.Fatalf("the default handler is kata now: %v", got)
	}
}
