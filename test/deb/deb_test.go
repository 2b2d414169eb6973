//go:build integration

// Package deb tests the Debian package: built with dpkg-buildpackage, installed
// with dpkg inside the systemd harness (whose root is an overlay of the host's,
// so the host's dpkg database stays untouched), served by its own units.
package deb

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
)

// TestDebInstallsAndServes builds the .deb (test/deb/build.sh from the
// committed tree, or $PODUNIT_DEB when set), installs it into a harness with
// dpkg, starts podunit.service with systemctl and asks crictl for
// RuntimeReady over the packaged socket.
func TestDebInstallsAndServes(t *testing.T) {
	hostBefore := hostDpkgState(t)
	if hostBefore.podunitKnown {
		t.Fatal("the host already has a podunit package: the test could not tell its install apart")
	}

	deb, debDir := buildDeb(t)
	// registered before harness.Start, so it runs after the harness' teardown
	// (its overlay gone): the host's dpkg database must not have seen any of it
	t.Cleanup(func() {
		after := hostDpkgState(t)
		if after.podunitKnown {
			t.Errorf("the host's dpkg database now knows podunit: the install escaped the harness")
		}
		// someone's `make install`-like copy may be there already; it must
		// be the same file as before
		if after.policyRcd != hostBefore.policyRcd {
			t.Errorf("the host's /usr/sbin/policy-rc.d changed (was there: %v, is: %v)", hostBefore.policyRcd, after.policyRcd)
		}
		if after.binarySum != hostBefore.binarySum {
			t.Errorf("the host's /usr/bin/podunit changed (or appeared) during the test")
		}
		if after.statusSum != hostBefore.statusSum {
			// another apt run on the host changes the file too; podunit
			// not being in it is what matters, and that was checked above
			t.Logf("note: /var/lib/dpkg/status changed during the test (another apt run?), podunit not in it")
		} else {
			t.Logf("host /var/lib/dpkg/status unchanged (sha256 %x)", hostBefore.statusSum[:8])
		}
	})

	h := harness.Start(t, harness.Options{HostNet: true, Binds: []string{debDir}})
	// the package's units are not the harness' transient podunit.service, so
	// the harness teardown would only power them off; stop them cleanly first
	t.Cleanup(func() {
		if out, err := h.ExecTimeout(45*time.Second, "systemctl", "stop", "podunit.service", "podunit.socket"); err != nil {
			t.Errorf("systemctl stop: %v\n%s", err, out)
		}
	})

	// the drop-in must exist before dpkg -i: postinst starts the service.
	// /etc/podunit is a host directory bound in, so the conffile dpkg
	// writes lands next to it.
	dropin := filepath.Join(h.ConfigDir, "podunit.toml.d", "50-test.toml")
	if err := os.MkdirAll(filepath.Dir(dropin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropin, []byte(h.TestConfig()), 0o644); err != nil {
		t.Fatal(err)
	}

	// Docker-built hosts carry a policy-rc.d that forbids starting services
	// (exit 101), which would keep postinst from starting the units. The
	// harness is a booted system: hide it there (a whiteout in the overlay;
	// the host's file stays, checked at the end).
	h.MustExec("rm", "-f", "/usr/sbin/policy-rc.d")

	out, err := h.ExecTimeout(3*time.Minute, "dpkg", "-i", deb)
	t.Logf("dpkg -i inside the harness:\n%s", out)
	if err != nil {
		t.Fatalf("dpkg -i %s: %v", deb, err)
	}

	t.Run("package", func(t *testing.T) {
		if st := strings.TrimSpace(h.MustExec("dpkg-query", "-W", "-f", "${Status}", "podunit")); st != "install ok installed" {
			t.Errorf("dpkg status inside = %q", st)
		}
		if cf := h.MustExec("dpkg-query", "-W", "-f", "${Conffiles}", "podunit"); !strings.Contains(cf, "/etc/podunit/podunit.toml ") {
			t.Errorf("conffiles = %q, want /etc/podunit/podunit.toml", cf)
		}
		shipped, err := os.ReadFile(filepath.Join(h.Repo, "contrib", "config", "podunit.toml"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(h.ConfigDir, "podunit.toml")); err != nil || !bytes.Equal(got, shipped) {
			t.Errorf("/etc/podunit/podunit.toml is not contrib/config/podunit.toml (err %v)", err)
		}
		if v := h.MustExec("/usr/bin/podunit", "version"); !strings.HasPrefix(v, "podunit 0.1.0") {
			t.Errorf("/usr/bin/podunit version = %q", v)
		}
		// podunit started the node's log relay from the package's small binary
		if es := h.MustExec("systemctl", "show", "-p", "ExecStart", "podunit-logrelay.service"); !strings.Contains(es, "path=/usr/bin/podunit-logrelay ") {
			t.Errorf("podunit-logrelay.service ExecStart = %q, want /usr/bin/podunit-logrelay", es)
		}
		man := h.MustExec("sh", "-c", "zcat /usr/share/man/man8/podunit.8.gz")
		for _, want := range []string{".TH PODUNIT 8", ".SS podunit ps", "podunit.toml.d"} {
			if !strings.Contains(man, want) {
				t.Errorf("podunit(8) lacks %q", want)
			}
		}
		for _, unit := range []string{"podunit.socket", "podunit.service"} {
			if p := strings.TrimSpace(h.MustExec("systemctl", "show", "-p", "FragmentPath", "--value", unit)); p != "/lib/systemd/system/"+unit {
				t.Errorf("%s comes from %q, want the packaged /lib/systemd/system/%s", unit, p, unit)
			}
		}
		for _, unit := range []string{"podunit.socket", "podunit.service"} {
			if en, _ := h.Exec("systemctl", "is-enabled", unit); strings.TrimSpace(en) != "enabled" {
				t.Errorf("%s is %q after install, want enabled", unit, strings.TrimSpace(en))
			}
		}
	})

	t.Run("serves", func(t *testing.T) {
		// postinst started both
		for _, unit := range []string{"podunit.socket", "podunit.service"} {
			if st := h.UnitActiveState(unit); st != "active" {
				t.Fatalf("%s is %q after dpkg -i", unit, st)
			}
		}
		// an operator's restart through the packaged unit
		h.MustExec("systemctl", "restart", "podunit.service")
		if st := h.UnitActiveState("podunit.service"); st != "active" {
			t.Fatalf("podunit.service is %q after systemctl restart", st)
		}
		if typ := strings.TrimSpace(h.MustExec("systemctl", "show", "-p", "Type", "--value", "podunit.service")); typ != "notify" {
			t.Errorf("podunit.service Type=%s", typ)
		}
		endpoint := "unix://" + filepath.Join(h.RunDir(), "podunit", "podunit.sock")
		info := crictl(t, endpoint, 30*time.Second, "info")
		var resp struct {
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status bool   `json:"status"`
				} `json:"conditions"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(info), &resp); err != nil {
			t.Fatalf("crictl info is not JSON: %v\n%s", err, info)
		}
		ready := map[string]bool{}
		for _, c := range resp.Status.Conditions {
			ready[c.Type] = c.Status
		}
		if !ready["RuntimeReady"] {
			t.Fatalf("crictl info: RuntimeReady not true:\n%s", info)
		}
		// the drop-in sends pulls to the local test registry
		// (test/critest/registries.conf); without it this pull would go to
		// the internet and fail
		crictl(t, endpoint, 2*time.Minute, "pull", "docker.io/library/busybox:1.37.0")
		if imgs := crictl(t, endpoint, 30*time.Second, "images"); !strings.Contains(imgs, "busybox") {
			t.Fatalf("crictl images after the pull:\n%s", imgs)
		}
	})

	// dpkg -i of the package again runs the upgrade path of the maintainer
	// scripts (prerm upgrade, postinst configure OLDVERSION: restart of
	// podunit.service); a running container must not notice
	t.Run("reinstall-keeps-containers", func(t *testing.T) {
		endpoint := "unix://" + filepath.Join(h.RunDir(), "podunit", "podunit.sock")
		podJSON := filepath.Join(debDir, "pod.json")
		ctrJSON := filepath.Join(debDir, "ctr.json")
		writeJSON(t, podJSON, map[string]any{
			"metadata":      map[string]any{"name": "debpod", "namespace": "default", "uid": "debpod-uid"},
			"log_directory": "/var/log/pods/default_debpod_debpod-uid",
			"linux":         map[string]any{},
		})
		writeJSON(t, ctrJSON, map[string]any{
			"metadata": map[string]any{"name": "sleeper"},
			"image":    map[string]any{"image": "docker.io/library/busybox:1.37.0"},
			"command":  []string{"sleep", "3600"},
			"log_path": "sleeper/0.log",
			"linux":    map[string]any{},
		})
		crictl(t, endpoint, 2*time.Minute, "pull", "docker.io/library/busybox:1.37.0")
		pod := strings.TrimSpace(crictl(t, endpoint, time.Minute, "runp", podJSON))
		ctr := strings.TrimSpace(crictl(t, endpoint, time.Minute, "create", pod, ctrJSON, podJSON))
		crictl(t, endpoint, time.Minute, "start", ctr)
		unit := "podunit-ctr-" + ctr + ".service"
		// the unit's helpers are the package's small binary, not the full
		// podunit: what runs in the unit is charged to the container. With
		// the private mount namespace (the package's default) it is told the
		// namespace's pin and runs the runtime in it, no nsenter before it.
		for _, p := range []string{"ExecStart", "ExecStopPost"} {
			es := h.MustExec("systemctl", "show", "-p", p, unit)
			if !strings.Contains(es, "path=/usr/bin/podunit-unithelper ") || !strings.Contains(es, " --mount-ns /run/podunit/mntns/mnt ") {
				t.Errorf("%s %s = %q, want /usr/bin/podunit-unithelper with --mount-ns /run/podunit/mntns/mnt", unit, p, es)
			}
		}
		before := unitProps(t, h, unit)
		podunitBefore := unitProps(t, h, "podunit.service").MainPID

		out, err := h.ExecTimeout(3*time.Minute, "dpkg", "-i", deb)
		if err != nil {
			t.Fatalf("dpkg -i (reinstall): %v\n%s", err, out)
		}
		if now := unitProps(t, h, "podunit.service").MainPID; now == podunitBefore || now == "0" {
			t.Fatalf("podunit.service MainPID %s -> %s: the upgrade path did not restart it", podunitBefore, now)
		}
		if after := unitProps(t, h, unit); after != before {
			t.Fatalf("%s changed across the package upgrade:\nbefore %v\nafter  %v", unit, before, after)
		}
		if st := crictl(t, endpoint, 30*time.Second, "inspect", "-o", "go-template", "--template", "{{.status.state}}", ctr); strings.TrimSpace(st) != "CONTAINER_RUNNING" {
			t.Fatalf("container state after the package upgrade: %q", st)
		}
		crictl(t, endpoint, time.Minute, "stop", "--timeout", "2", ctr)
		crictl(t, endpoint, time.Minute, "rm", ctr)
		crictl(t, endpoint, time.Minute, "stopp", pod)
		crictl(t, endpoint, time.Minute, "rmp", pod)
	})

}

type unitState struct{ MainPID, InvocationID, ActiveState, ExecMainStartTimestampMonotonic string }

func unitProps(t *testing.T, h *harness.Harness, unit string) unitState {
	t.Helper()
	out := h.MustExec("systemctl", "show", unit, "-p", "MainPID", "-p", "InvocationID", "-p", "ActiveState",
		"-p", "ExecMainStartTimestampMonotonic")
	p := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			p[k] = v
		}
	}
	if p["ActiveState"] != "active" {
		t.Fatalf("%s is %q", unit, p["ActiveState"])
	}
	return unitState{p["MainPID"], p["InvocationID"], p["ActiveState"], p["ExecMainStartTimestampMonotonic"]}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type dpkgState struct {
	statusSum    [32]byte
	podunitKnown bool
	binarySum    [32]byte // zero when absent
	policyRcd    bool
}

func hostDpkgState(t *testing.T) dpkgState {
	t.Helper()
	status, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		t.Fatal(err)
	}
	var s dpkgState
	s.statusSum = sha256.Sum256(status)
	s.podunitKnown = bytes.Contains(status, []byte("\nPackage: podunit\n")) || bytes.HasPrefix(status, []byte("Package: podunit\n"))
	if _, err := os.Stat("/var/lib/dpkg/info/podunit.list"); err == nil {
		s.podunitKnown = true
	}
	if _, err := os.Stat("/usr/sbin/policy-rc.d"); err == nil {
		s.policyRcd = true
	}
	if b, err := os.ReadFile("/usr/bin/podunit"); err == nil {
		s.binarySum = sha256.Sum256(b)
	}
	return s
}

// buildDeb returns the .deb to test and the host directory holding it (bound
// into the harness at the same path).
func buildDeb(t *testing.T) (deb, dir string) {
	t.Helper()
	if p := os.Getenv("PODUNIT_DEB"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs, filepath.Dir(abs)
	}
	repo, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err = os.MkdirTemp("/var/tmp", "podunit-deb-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command("bash", filepath.Join(repo, "test", "deb", "build.sh"), dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("test/deb/build.sh: %v\n%s%s", err, stderr.String(), out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	deb = lines[len(lines)-1]
	t.Logf("built %s in %s", deb, time.Since(start).Round(time.Second))
	return deb, dir
}

func crictl(t *testing.T, endpoint string, timeout time.Duration, args ...string) string {
	t.Helper()
	argv := append([]string{"--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
		"--timeout", timeout.String()}, args...)
	// stderr carries crictl's own warnings (no /etc/crictl.yaml); stdout is the answer
	var stderr bytes.Buffer
	cmd := exec.Command("crictl", argv...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("crictl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
