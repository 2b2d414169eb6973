package cri

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/podunit/podunit/config"
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
