//go:build integration

// Integration tests boot a real systemd with test/harness and run podunit
// inside it. They need root and are built only with -tags integration
// (make test runs them; see docs/testing.md).
package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The smoke test of the foundation: podunit comes up as a Type=notify service,
// answers Version and Status over CRI and crictl, survives SIGKILL and a
// restart, refuses a second instance on its socket, and the harness leaves
// nothing behind on the host.
func TestPodunitSmokeAndNoLeftovers(t *testing.T) {
	var h *harness.Harness
	t.Run("lifecycle", func(t *testing.T) {
		h = harness.Start(t, harness.Options{})
		p := h.StartPodunit(h.TestConfig())

		checkVersionAndStatus(t, p)
		crictl(t, p, "version", "RuntimeName:  podunit")
		crictl(t, p, "info", `"RuntimeReady"`)

		// SIGKILL: no clean shutdown, the socket file stays behind stale
		h.MustExec("systemctl", "kill", "-s", "KILL", harness.UnitName)
		if err := h.WaitUnitGone(harness.UnitName, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		p = h.StartPodunit(h.TestConfig())
		checkVersionAndStatus(t, p)

		// a second podunit on the same socket must refuse, exit 1, and leave
		// the first one serving
		out, err := h.ExecTimeout(30*time.Second, harness.Binary(t), "serve", "--config", p.ConfigPath)
		if code := harness.ExitCode(err); code != 1 {
			t.Fatalf("second podunit serve: exit %d (err %v), want 1; output:\n%s", code, err, out)
		}
		if !strings.Contains(out, "already") {
			t.Errorf("second podunit serve gave no clear reason:\n%s", out)
		}
		if st := h.UnitActiveState(harness.UnitName); st != "active" {
			t.Fatalf("first podunit is %q after the second one was refused", st)
		}
		checkVersionAndStatus(t, p)
	})
	if h == nil {
		t.Fatal("harness never started")
	}
	// the subtest's cleanup has torn the harness down by now
	if leaks := h.Leaks(); len(leaks) > 0 {
		t.Fatalf("harness left behind: %q", leaks)
	}
	if _, err := os.Stat(h.Base); !os.IsNotExist(err) {
		t.Fatalf("harness directory %s still exists (err %v)", h.Base, err)
	}
}

func checkVersionAndStatus(t *testing.T, p *harness.Podunit) {
	t.Helper()
	ctx := harness.Context(t, 10*time.Second)
	v, err := p.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if v.RuntimeName != "podunit" || v.RuntimeVersion == "" || v.RuntimeApiVersion != "v1" {
		t.Fatalf("Version = %+v, want RuntimeName podunit, a RuntimeVersion, RuntimeApiVersion v1", v)
	}
	st, err := p.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	conds := map[string]*runtimeapi.RuntimeCondition{}
	for _, c := range st.GetStatus().GetConditions() {
		conds[c.Type] = c
	}
	for _, typ := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		c := conds[typ]
		if c == nil || !c.Status {
			t.Fatalf("Status condition %s = %+v, want true (test/cni is configured)", typ, c)
		}
	}
}

// crictl runs the real crictl from the host against the socket under the
// harness' /run and checks its output contains want.
func crictl(t *testing.T, p *harness.Podunit, cmd, want string) {
	t.Helper()
	out, err := exec.Command("crictl", "--runtime-endpoint", p.Endpoint, "--image-endpoint", p.Endpoint,
		"--timeout", "10s", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("crictl %s: %v\n%s", cmd, err, out)
	}
	if !strings.Contains(string(out), want) {
		t.Fatalf("crictl %s: output lacks %q:\n%s", cmd, want, out)
	}
}
