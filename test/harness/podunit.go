package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Podunit is a podunit daemon running as podunit.service inside a harness.
type Podunit struct {
	// Socket is the host path of the CRI socket; Endpoint is its unix:// URL
	// (what crictl/critest take as --runtime-endpoint).
	Socket, Endpoint string
	// ConfigPath is the config file's path inside the harness (and on the
	// host below Harness.ConfigDir).
	ConfigPath string

	Conn    *grpc.ClientConn
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the podunit binary to run: $PODUNIT_BINARY when set (the
// Makefile builds bin/podunit once and passes it), otherwise bin/podunit built
// here once per test process. It must lie under the repository or another
// bound path to be visible inside the harness.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("PODUNIT_BINARY"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatalf("harness: PODUNIT_BINARY: %v", err)
		}
		return abs
	}
	buildOnce.Do(func() {
		repo, err := RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(repo, "bin", "podunit")
		cmd := exec.Command("go", "build", "-tags", BuildTags, "-o", buildPath, "./cmd/podunit")
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/podunit: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("harness: %v", buildErr)
	}
	return buildPath
}

// StartPodunit writes configTOML to ConfigDirInside/podunit.toml and starts
// `podunit serve --config` inside the harness as a transient Type=notify
// service named podunit.service, so the start returns once podunit sent
// READY=1. It returns a CRI client connected to the socket; the connection is
// closed and the service stopped at teardown. Calling it again after podunit
// died (or was stopped with StopPodunit) starts a fresh instance.
func (h *Harness) StartPodunit(configTOML string) *Podunit {
	h.t.Helper()
	bin := Binary(h.t)
	h.closePodunit()
	cfg := filepath.Join(h.ConfigDir, "podunit.toml")
	if err := os.WriteFile(cfg, []byte(configTOML), 0o644); err != nil {
		h.t.Fatalf("harness: %v", err)
	}
	cfgInside := filepath.Join(ConfigDirInside, "podunit.toml")
	// a unit that failed before (e.g. killed by a test) must not block the name
	_, _ = h.Exec("systemctl", "reset-failed", UnitName)
	out, err := h.ExecTimeout(90*time.Second, "systemd-run", "--unit="+UnitName, "--collect",
		"-p", "Type=notify", "-p", "NotifyAccess=main", "-p", "TimeoutStartSec=60",
		"-p", "TimeoutStopSec=30", "--description=podunit under test",
		bin, "serve", "--config", cfgInside)
	if err != nil {
		h.t.Fatalf("harness: starting %s: %v\n%s", UnitName, err, out)
	}
	p := &Podunit{
		Socket:     filepath.Join(h.RunDir(), "podunit", "podunit.sock"),
		ConfigPath: cfgInside,
	}
	p.Endpoint = "unix://" + p.Socket
	if err := waitSocket(p.Socket, 30*time.Second); err != nil {
		h.t.Fatalf("harness: %v", err)
	}
	conn, err := grpc.NewClient(p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatalf("harness: grpc client for %s: %v", p.Endpoint, err)
	}
	p.Conn = conn
	p.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	p.Image = runtimeapi.NewImageServiceClient(conn)
	h.mu.Lock()
	h.podunit = p
	h.mu.Unlock()
	return p
}

// StopPodunit stops podunit.service cleanly and closes the client.
func (h *Harness) StopPodunit() {
	h.t.Helper()
	h.closePodunit()
	if st := h.UnitActiveState(UnitName); st != "active" && st != "activating" {
		return
	}
	if out, err := h.ExecTimeout(45*time.Second, "systemctl", "stop", UnitName); err != nil {
		h.t.Fatalf("harness: systemctl stop %s: %v\n%s", UnitName, err, out)
	}
}

// UnitActiveState is systemctl's is-active answer for unit ("active",
// "inactive", "failed", ...).
func (h *Harness) UnitActiveState(unit string) string {
	out, _ := h.Exec("systemctl", "is-active", unit)
	return firstLine(out)
}

// WaitUnitGone waits until unit is no longer active or activating.
func (h *Harness) WaitUnitGone(unit string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st := h.UnitActiveState(unit)
		if st != "active" && st != "activating" && st != "deactivating" && st != "reloading" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still %s after %s", unit, st, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *Harness) closePodunit() {
	h.mu.Lock()
	p := h.podunit
	h.mu.Unlock()
	if p != nil && p.Conn != nil {
		_ = p.Conn.Close()
		p.Conn = nil
	}
}

// podunitStarted reports whether StartPodunit ever ran on this harness.
func (h *Harness) podunitStarted() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.podunit != nil
}

func waitSocket(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no socket at %s after %s", path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Context returns a context with a per-call deadline for CRI requests in tests.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// TestConfig is a podunit configuration for tests: image pulls go to the
// local test registry (test/critest/registries.conf, which needs
// Options.HostNet to be reachable), signatures are not checked, and pods
// get the private bridge network of test/cni. Everything else is default.
func (h *Harness) TestConfig() string {
	kit := filepath.Join(h.Repo, "test", "critest")
	return fmt.Sprintf(`# written by test/harness
[image]
registries_conf = %q
policy_path = %q

[cni]
conf_dir = %q
`, filepath.Join(kit, "registries.conf"), filepath.Join(kit, "policy.json"), filepath.Join(h.Repo, "test", "cni"))
}

// BusyboxBundleScript is the path of make-busybox-bundle.sh, which writes an
// OCI bundle with a busybox-static rootfs:
//
//	make-busybox-bundle.sh BUNDLE_DIR [--cgroups-path P] [--memory-limit BYTES] -- ARG...
func BusyboxBundleScript() (string, error) {
	repo, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(repo, "test", "harness", "make-busybox-bundle.sh"), nil
}
