//go:build integration

package harness

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The harness itself, with a trivial unit instead of podunit: boot, run a
// transient service, read its journal, and prove the leak check sees a live
// harness (so its silence after teardown means something).
func TestHarnessBootsSystemdAndRunsUnits(t *testing.T) {
	h := Start(t, Options{})

	if st := strings.TrimSpace(h.MustExec("systemctl", "is-system-running")); st != "running" && st != "degraded" {
		t.Fatalf("SystemState %q, want running", st)
	}
	h.MustExec("systemd-run", "--unit=harness-selftest", "--collect", "-p", "Type=exec",
		"sh", "-c", "echo selftest-marker; exec sleep 600")
	if st := h.UnitActiveState("harness-selftest.service"); st != "active" {
		t.Fatalf("harness-selftest.service is %q, want active", st)
	}
	var j string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		j, _ = h.Journal("harness-selftest.service")
		if strings.Contains(j, "selftest-marker") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(j, "selftest-marker") {
		t.Fatalf("journal of harness-selftest.service lacks the marker:\n%s", j)
	}

	leaks := h.Leaks()
	var cg, proc bool
	for _, l := range leaks {
		cg = cg || strings.HasPrefix(l, "cgroup ")
		proc = proc || strings.HasPrefix(l, "process ")
	}
	if !cg || !proc {
		t.Fatalf("leak check does not see the running harness (cgroups %v, processes %v): %q", cg, proc, leaks)
	}

	// the in-harness storage dir is a real bound directory, not the overlay
	h.MustExec("sh", "-c", "echo x > "+StateDirInside+"/probe")
	if out := h.MustExec("stat", "-f", "-c", "%T", StateDirInside); strings.Contains(out, "overlay") {
		t.Fatalf("%s is on %s, want the host's file system", StateDirInside, out)
	}
}

func TestHarnessHostNetworkAndIPC(t *testing.T) {
	h := Start(t, Options{HostNet: true, HostIPC: true})
	out := h.MustExec("readlink", "/proc/self/ns/net", "/proc/self/ns/ipc")
	host := readlinks(t, "/proc/self/ns/net", "/proc/self/ns/ipc")
	if strings.TrimSpace(out) != host {
		t.Fatalf("namespaces inside %q, host %q", out, host)
	}
	// host netns sysctls stay read-only unless NetRW
	if _, err := h.Exec("sh", "-c", "cat /proc/sys/net/ipv4/ip_forward > /proc/sys/net/ipv4/ip_forward"); err == nil {
		t.Fatal("/proc/sys/net is writable in a --host-net harness without NetRW")
	}
}

func readlinks(t *testing.T, paths ...string) string {
	t.Helper()
	var out []string
	for _, p := range paths {
		l, err := os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// critest mounts on the host below its TMPDIR and expects containers to see
// it, and the reverse: a shared bind must propagate both ways, and stop must
// leave no mount on the host.
func TestHarnessSharedBindPropagatesBothWays(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "puhs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"src", "fromhost", "frominside"} {
		if err := os.Mkdir(dir+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dir+"/src/flag", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var h *Harness
	t.Run("harness", func(t *testing.T) {
		h = Start(t, Options{SharedBinds: []string{dir}})
		if out, err := exec.Command("mount", "-n", "--bind", dir+"/src", dir+"/fromhost").CombinedOutput(); err != nil {
			t.Fatalf("host mount: %v\n%s", err, out)
		}
		h.MustExec("test", "-e", dir+"/fromhost/flag")
		h.MustExec("mount", "-n", "--bind", "/etc", dir+"/frominside")
		if _, err := os.Stat(dir + "/frominside/passwd"); err != nil {
			t.Fatalf("mount made inside is not visible on the host: %v", err)
		}
	})
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), " "+dir) {
		t.Fatalf("mounts under %s left on the host after stop:\n%s", dir, mi)
	}
}

func TestHarnessRunTmpfs(t *testing.T) {
	var h *Harness
	t.Run("harness", func(t *testing.T) {
		h = Start(t, Options{RunTmpfs: true})
		if fs := strings.TrimSpace(h.MustExec("stat", "-f", "-c", "%T", "/run")); fs != "tmpfs" {
			t.Fatalf("/run in the harness is %q, want tmpfs", fs)
		}
		// the host still reaches what is made inside (the bus socket, podunit's)
		h.MustExec("sh", "-c", "echo inside > /run/run-tmpfs-probe")
		if b, err := os.ReadFile(h.RunDir() + "/run-tmpfs-probe"); err != nil || string(b) != "inside\n" {
			t.Fatalf("host view of the harness' /run: %q, %v", b, err)
		}
	})
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), " "+h.Dir) {
		t.Fatalf("mounts under %s left on the host after stop:\n%s", h.Dir, mi)
	}
	if _, err := os.Stat(h.Dir); !os.IsNotExist(err) {
		t.Fatalf("harness directory %s left after stop: %v", h.Dir, err)
	}
}
