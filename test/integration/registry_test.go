//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/podunit/podunit/test/harness"
)

// TestRegistryLeases drives test/critest/registry.sh's leases on a registry
// of its own (another port, run and storage directory): runs that overlap
// share the registry, and only the last one to leave stops it, only when a
// run started it. Before leases, the first run to end stopped a registry it
// had started while another run still pulled from it (CI lost test/deb and
// imagestore that way).
func TestRegistryLeases(t *testing.T) {
	repo, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(repo, "test", "critest", "registry.sh")
	dir := t.TempDir()
	// The run this test is part of (test/integration.sh) holds a lease of
	// its own: without its variable here, "by hand" means by hand.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PODUNIT_REGISTRY_LEASE=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"PODUNIT_TEST_REGISTRY=127.0.0.1:5097",
		"PODUNIT_TEST_REGISTRY_DIR="+filepath.Join(dir, "storage"),
		"PODUNIT_TEST_REGISTRY_RUN="+filepath.Join(dir, "run"),
	)
	// a run is a process whose PID is its lease
	newRun := func() *exec.Cmd {
		c := exec.Command("sleep", "300")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _, _ = c.Process.Wait() })
		return c
	}
	reg := func(run *exec.Cmd, args ...string) string {
		t.Helper()
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = env
		if run != nil {
			cmd.Env = append(cmd.Env, "PODUNIT_REGISTRY_LEASE="+strconv.Itoa(run.Process.Pid))
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("registry.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	pid := func(run *exec.Cmd) string { return strconv.Itoa(run.Process.Pid) }
	up := func() bool {
		return exec.Command("curl", "-fsS", "-o", "/dev/null", "--max-time", "3", "http://127.0.0.1:5097/v2/").Run() == nil
	}
	t.Cleanup(func() {
		cmd := exec.Command("bash", script, "stop")
		cmd.Env = env
		_ = cmd.Run()
	})

	// two overlapping runs: the one that started it leaves first
	a, b := newRun(), newRun()
	reg(a, "hold", pid(a))
	reg(a, "start")
	reg(b, "hold", pid(b))
	if !up() {
		t.Fatal("registry not up after start")
	}
	reg(a, "release", pid(a))
	if !up() {
		t.Fatal("the first run's release stopped the registry the second run holds")
	}
	reg(b, "release", pid(b))
	if up() {
		t.Fatal("the last run's release left the registry a run started running")
	}

	// a run killed outright leaves a lease that does not count
	c, d := newRun(), newRun()
	reg(c, "hold", pid(c))
	reg(c, "start")
	reg(d, "hold", pid(d))
	_ = c.Process.Kill()
	_, _ = c.Process.Wait()
	reg(d, "release", pid(d))
	if up() {
		t.Fatal("a dead run's lease kept the registry up")
	}

	// a registry started by hand outlives the runs that use it
	reg(nil, "start")
	e := newRun()
	reg(e, "hold", pid(e))
	reg(e, "release", pid(e))
	if !up() {
		t.Fatal("a run's release stopped a registry started by hand")
	}
	// and one a run started becomes the operator's once started by hand
	reg(nil, "stop")
	f := newRun()
	reg(f, "hold", pid(f))
	reg(f, "start")
	reg(nil, "start")
	reg(f, "release", pid(f))
	if !up() {
		t.Fatal("a run's release stopped a registry also started by hand")
	}
}
