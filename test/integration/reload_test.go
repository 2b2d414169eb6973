//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/test/harness"
	"google.golang.org/grpc/connectivity"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestReloadAppliesRegistriesWithoutDroppingCRI runs podunit from the
// shipped unit files and reloads it with `systemctl reload`: a registries.conf
// rewrite makes a pull that failed succeed over the same CRI connection,
// which never leaves READY, under the same main PID; a changed key that needs
// a restart is named in the log and kept; a broken podunit.toml makes the
// reload fail (systemctl and SIGHUP alike), logged, with podunit serving on
// under the configuration it had.
func TestReloadAppliesRegistriesWithoutDroppingCRI(t *testing.T) {
	h := harness.Start(t, harness.Options{HostNet: true}) // the test registry is on the host's loopback
	bin := harness.Binary(t)
	kit := filepath.Join(h.Repo, "test", "critest")
	regHost := filepath.Join(h.ConfigDir, "registries.conf")
	regInside := filepath.Join(harness.ConfigDirInside, "registries.conf")
	tomlHost := filepath.Join(h.ConfigDir, "podunit.toml")
	podunitToml := func(extra string) string {
		return fmt.Sprintf("[image]\nregistries_conf = %q\npolicy_path = %q\n[cni]\nconf_dir = %q\n%s",
			regInside, filepath.Join(kit, "policy.json"), filepath.Join(h.Repo, "test", "cni"), extra)
	}
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing maps the test's registry name yet: its pull must fail.
	const image = "reload.podunit.test/library/busybox:1.37.0"
	write(regHost, "unqualified-search-registries = []\n")
	write(tomlHost, podunitToml(""))
	conn, rt, img := serveInstalled(t, h, bin)
	ctx := harness.Context(t, 10*time.Minute)
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("Version: %v", err)
	}
	pid := restartPodunitPID(t, h)

	pullCtx := harness.Context(t, 2*time.Minute)
	if _, err := img.PullImage(pullCtx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err == nil {
		t.Fatalf("PullImage(%s) succeeded before registries.conf maps it", image)
	} else {
		t.Logf("before the reload, as expected: %v", err)
	}

	// The connection must stay READY through every reload below.
	if st := conn.GetState(); st != connectivity.Ready {
		t.Fatalf("CRI connection is %v before the reload", st)
	}
	dropped := make(chan bool, 1)
	watchCtx := harness.Context(t, 10*time.Minute)
	go func() { dropped <- conn.WaitForStateChange(watchCtx, connectivity.Ready) }()

	write(regHost, "unqualified-search-registries = []\n\n[[registry]]\nprefix = \"reload.podunit.test\"\nlocation = \"127.0.0.1:5000\"\ninsecure = true\n")
	// a live key and one that needs a restart
	write(tomlHost, podunitToml("[server]\nlog_level = \"debug\"\n[systemd]\ncall_timeout = \"21s\"\n"))
	h.MustExec("systemctl", "reload", "podunit.service")

	t.Run("registries-conf-applied", func(t *testing.T) {
		if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
			t.Fatalf("PullImage(%s) after the reload: %v", image, err)
		}
		cfg := reloadRunningConfig(t, rt)
		if cfg.Server.LogLevel != "debug" {
			t.Errorf("Status verbose log_level = %q, want debug (reloaded)", cfg.Server.LogLevel)
		}
		if cfg.Systemd.CallTimeout != config.Default().Systemd.CallTimeout {
			t.Errorf("Status verbose call_timeout = %s: a key that needs a restart changed live", cfg.Systemd.CallTimeout.D())
		}
		reloadWaitJournal(t, h, "configuration reloaded")
		reloadWaitJournal(t, h, "systemd.call_timeout")
		// the files say 21s; the daemon keeps 30s until a restart
		conf := filepath.Join(harness.ConfigDirInside, "podunit.toml")
		if out := h.MustExec(bin, "config", "--config", conf); !strings.Contains(out, `call_timeout = "21s"`) {
			t.Errorf("podunit config lacks the file's call_timeout:\n%s", out)
		}
		out := h.MustExec(bin, "config", "--running", "--config", conf)
		if !strings.Contains(out, `call_timeout = "30s"`) || !strings.Contains(out, `log_level = "debug"`) {
			t.Errorf("podunit config --running does not show the running configuration:\n%s", out)
		}
	})

	// The service file is reused for both broken-file checks.
	write(tomlHost, podunitToml("[server]\nlog_level = \"info\"\n[image\n"))
	t.Run("broken-file-refused-by-systemctl-reload", func(t *testing.T) {
		out, err := h.Exec("systemctl", "reload", "podunit.service")
		if err == nil {
			t.Fatalf("systemctl reload with a broken podunit.toml succeeded:\n%s", out)
		}
		reloadWaitJournal(t, h, "podunit.toml:")
		reloadWaitJournal(t, h, "not reloaded, podunit keeps its running configuration")
	})
	t.Run("broken-file-refused-on-sighup", func(t *testing.T) {
		h.MustExec("systemctl", "kill", "--kill-who=main", "-s", "HUP", "podunit.service")
		reloadWaitJournal(t, h, "configuration reload refused")
	})

	t.Run("still-serving-the-old-config", func(t *testing.T) {
		deadline := time.Now().Add(30 * time.Second)
		for h.UnitActiveState("podunit.service") != "active" {
			if time.Now().After(deadline) {
				t.Fatalf("podunit.service is %q after the refused reloads", h.UnitActiveState("podunit.service"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got := restartPodunitPID(t, h); got != pid {
			t.Fatalf("podunit's main PID went from %d to %d: it was restarted", pid, got)
		}
		if cfg := reloadRunningConfig(t, rt); cfg.Server.LogLevel != "debug" {
			t.Errorf("log_level %q after refused reloads, want the running debug", cfg.Server.LogLevel)
		}
		if _, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
			t.Fatalf("ImageStatus: %v", err)
		}
		select {
		case <-dropped:
			t.Fatalf("the CRI connection left READY (now %v) during the reloads", conn.GetState())
		default:
		}
	})
}

// reloadRunningConfig is the configuration podunit runs with, from Status
// verbose.
func reloadRunningConfig(t *testing.T, rt runtimeapi.RuntimeServiceClient) config.Config {
	t.Helper()
	st, err := rt.Status(harness.Context(t, 30*time.Second), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var c config.Config
	if err := json.Unmarshal([]byte(st.Info["config"]), &c); err != nil {
		t.Fatalf("Status verbose config: %v\n%s", err, st.Info["config"])
	}
	return c
}

// reloadWaitJournal waits for podunit.service's journal to show want.
func reloadWaitJournal(t *testing.T, h *harness.Harness, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := h.Journal("podunit.service")
		if err == nil && strings.Contains(j, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("podunit.service journal lacks %q after 30s (err %v):\n%s", want, err, tail([]byte(j), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
