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
		if en, _ := h.Exec("systemctl", "is-enabled", "podunit.socket"); strings.TrimSpace(en) != "enabled" {
			t.Errorf("podunit.socket is %q after install, want enabled", strings.TrimSpace(en))
		}
	})

	t.Run("serves", func(t *testing.T) {
		// postinst started both already unless a policy-rc.d forbids it;
		// starting again is what an operator does and is a no-op otherwise
		h.MustExec("systemctl", "start", "podunit.socket", "podunit.service")
		for _, unit := range []string{"podunit.socket", "podunit.service"} {
			if st := h.UnitActiveState(unit); st != "active" {
				t.Fatalf("%s is %q", unit, st)
			}
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

}

type dpkgState struct {
	statusSum    [32]byte
	podunitKnown bool
	binarySum    [32]byte // zero when absent
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
