package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReconcileTakesLiveKeysAndKeepsTheRest(t *testing.T) {
	running := Default()
	loaded := Default()
	loaded.Server.LogLevel = "debug"
	loaded.Server.Socket = "/run/other/podunit.sock"
	loaded.Paths.StateDir = "/var/lib/other"
	loaded.Image.RegistriesConf = "/etc/podunit/registries.conf"
	loaded.Image.PullProgressTimeout = Duration(time.Minute)
	loaded.CNI.BinDirs = []string{"/opt/cni/bin"}
	loaded.Runtime.Handlers = map[string]Handler{
		"runc":  running.Runtime.Handlers["runc"],
		"crun":  running.Runtime.Handlers["crun"],
		"kata2": {Type: "runc", Path: "/usr/bin/runc2", Root: "/run/podunit/runc2"},
	}
	loaded.Runtime.StartTimeout = Duration(time.Hour)
	loaded.Metrics.Address = "127.0.0.1:9090"

	next, live, restart := Reconcile(running, loaded)

	wantLive := []string{"server.log_level", "image.registries_conf", "image.pull_progress_timeout", "runtime.handlers", "metrics.address"}
	wantRestart := []string{"server.socket", "paths.state_dir", "cni.bin_dirs", "runtime.start_timeout"}
	if !reflect.DeepEqual(live, wantLive) {
		t.Errorf("live = %q, want %q", live, wantLive)
	}
	if !reflect.DeepEqual(restart, wantRestart) {
		t.Errorf("restart = %q, want %q", restart, wantRestart)
	}

	want := running
	want.Server.LogLevel = "debug"
	want.Image.RegistriesConf = "/etc/podunit/registries.conf"
	want.Image.PullProgressTimeout = Duration(time.Minute)
	want.Runtime.Handlers = loaded.Runtime.Handlers
	want.Metrics.Address = "127.0.0.1:9090"
	if !reflect.DeepEqual(next, want) {
		t.Errorf("next =\n%+v\nwant\n%+v", next, want)
	}
	if running.Server.LogLevel != "info" || len(running.Runtime.Handlers) != 2 {
		t.Errorf("Reconcile changed the running configuration: %+v", running)
	}
}

func TestReconcileUnchanged(t *testing.T) {
	next, live, restart := Reconcile(Default(), Default())
	if len(live) != 0 || len(restart) != 0 {
		t.Fatalf("no change reported live %q, restart %q", live, restart)
	}
	if !reflect.DeepEqual(next, Default()) {
		t.Fatalf("next = %+v", next)
	}
}

// A handler whose path changes is a change of the one key runtime.handlers;
// one whose value only moves between equal maps is no change.
func TestReconcileHandlersCompareByValue(t *testing.T) {
	running, loaded := Default(), Default()
	h := loaded.Runtime.Handlers["runc"]
	h.Path = "/usr/local/sbin/runc"
	loaded.Runtime.Handlers = map[string]Handler{"runc": h, "crun": loaded.Runtime.Handlers["crun"]}
	_, live, restart := Reconcile(running, loaded)
	if !reflect.DeepEqual(live, []string{"runtime.handlers"}) || len(restart) != 0 {
		t.Fatalf("live %q restart %q", live, restart)
	}
}

// The documented sample marks exactly the live keys, so an operator reading
// it knows what a reload applies.
func TestLiveKeysMarkedInSample(t *testing.T) {
	keys := LiveKeys()
	want := []string{
		"server.log_level",
		"image.registries_conf", "image.policy_path", "image.auth_file", "image.pull_progress_timeout", "image.pause_image", "image.pinned_images",
		"runtime.default_handler", "runtime.handlers",
		"metrics.address",
	}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("LiveKeys() = %q, want %q", keys, want)
	}
	doc, err := Documented(Default())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(doc), " (reload)\n"); n != len(want) {
		t.Fatalf("sample marks %d keys (reload), want %d", n, len(want))
	}
}
