// Package harness boots a disposable real systemd (podunit-harness.sh) for
// integration tests, runs podunit inside it as a transient Type=notify service
// and hands the test a CRI client connected to it over the harness' /run.
//
// podunit runs inside rather than on the host because everything it gets from
// systemd (MainPID, unit cgroups, bundle paths) is only meaningful in the
// harness' namespaces. The test process stays on the host and talks CRI over
// the socket that appears at Dir/run/podunit/podunit.sock.
//
// Every harness is torn down in t.Cleanup, which then fails the test if the
// harness left a mount, a cgroup or a process behind.
package harness

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/procstat"
)

// BuildTags are the tags podunit is always built with (cgo-free image
// signing, no btrfs/devicemapper graph drivers).
const BuildTags = "containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper"

// In-harness paths podunit uses by default; the host directories behind them
// are bound in by Start.
const (
	StateDirInside  = "/var/lib/podunit"
	PodLogDirInside = "/var/log/pods"
	ConfigDirInside = "/etc/podunit"
	SocketInside    = "/run/podunit/podunit.sock"
	UnitName        = "podunit.service"
)

// Options select how the harness is booted.
type Options struct {
	// HostNet shares the host's network namespace: needed when the host must
	// reach pod IPs or host ports, or podunit must reach the test registry on
	// 127.0.0.1:5000. Otherwise the harness has its own netns (loopback only).
	// Start then sets the host's ip_forward to 1 (the test network's bridge
	// plugin cannot write it through the read-only /proc/sys/net), and
	// teardown restores it and removes the test network's bridge and CNI
	// chains with test/cni/net-cleanup.sh.
	HostNet bool
	// NetRW keeps /proc/sys/net writable with HostNet (CNI plugins set
	// ip_forward and route_localnet there; with HostNet those are the host's).
	NetRW bool
	// HostIPC shares the host's IPC namespace.
	HostIPC bool
	// Binds are extra "SRC[:DST]" host paths to bind in.
	Binds []string
	// SharedBinds are host directories bound in at the same path with mount
	// propagation in both directions (see --shared-bind in the script).
	SharedBinds []string
	// RunTmpfs makes the harness' /run a tmpfs, as on a node (--run-tmpfs).
	RunTmpfs bool
}

// Harness is one booted systemd. Fields are host paths unless named Inside.
type Harness struct {
	t testing.TB

	// Base is the short temporary directory holding everything of this harness.
	Base string
	// Dir is the script's harness directory; Dir/run is the harness' /run.
	Dir string
	// Name is the harness' cgroup name, podunit-harness-<hash of Dir>.
	Name string
	// StateDir, PodLogDir and ConfigDir are the host directories bound at
	// StateDirInside, PodLogDirInside and ConfigDirInside.
	StateDir, PodLogDir, ConfigDir string
	// Repo is the repository root, bound at the same path inside.
	Repo string

	script  string
	cgroups []string // harness cgroup dirs, read before stop removes Dir
	hostNet bool     // ip_forward recorded in Base: net-cleanup.sh at teardown

	mu      sync.Mutex
	podunit *Podunit
}

// Start boots a harness for t. It fails the test (t.Fatal) if it cannot, and
// registers the teardown and leak check with t.Cleanup.
func Start(t testing.TB, opts Options) *Harness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("harness: integration tests must run as root (they boot systemd in namespaces)")
	}
	repo, err := RepoRoot()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	// not t.TempDir(): its path embeds the test name, and unix socket paths
	// under Dir/run must stay below 108 bytes.
	base, err := os.MkdirTemp("/tmp", "puh-")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	h := &Harness{
		t:         t,
		Base:      base,
		Dir:       filepath.Join(base, "sd"),
		StateDir:  filepath.Join(base, "lib"),
		PodLogDir: filepath.Join(base, "pods"),
		ConfigDir: filepath.Join(base, "etc"),
		Repo:      repo,
		script:    filepath.Join(repo, "test", "harness", "podunit-harness.sh"),
	}
	h.Name = cgroupName(h.Dir)
	for _, d := range []string{h.StateDir, h.PodLogDir, h.ConfigDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	args := []string{"start", h.Dir,
		"--bind", repo,
		// overlay mounts of the image store cannot stack on the harness'
		// overlayfs root: the store must be a real directory.
		"--bind", h.StateDir + ":" + StateDirInside,
		"--bind", h.PodLogDir + ":" + PodLogDirInside,
		"--bind", h.ConfigDir + ":" + ConfigDirInside,
	}
	for _, b := range opts.Binds {
		args = append(args, "--bind", b)
	}
	for _, b := range opts.SharedBinds {
		args = append(args, "--shared-bind", b)
	}
	if opts.HostNet {
		args = append(args, "--host-net")
	}
	if opts.NetRW {
		args = append(args, "--net-rw")
	}
	if opts.HostIPC {
		args = append(args, "--host-ipc")
	}
	if opts.RunTmpfs {
		args = append(args, "--run-tmpfs")
	}
	t.Cleanup(h.teardown)
	if opts.HostNet {
		// before boot, so the host's state as found is what teardown restores
		if err := h.prepareHostNet(); err != nil {
			t.Fatalf("harness: host network: %v", err)
		}
	}
	out, err := h.script1(2*time.Minute, args...)
	if err != nil {
		t.Fatalf("harness: start: %v\n%s", err, out)
	}
	// the cgroup list goes away with Dir at stop; the leak check needs it
	if b, err := os.ReadFile(filepath.Join(h.Dir, "cgroups")); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				h.cgroups = append(h.cgroups, f[1])
			}
		}
	}
	if len(h.cgroups) == 0 {
		t.Fatalf("harness: no cgroups recorded in %s/cgroups", h.Dir)
	}
	return h
}

// cgroupName mirrors harness_name in podunit-harness.sh.
func cgroupName(dir string) string {
	sum := md5.Sum([]byte(dir))
	return "podunit-harness-" + hex.EncodeToString(sum[:])[:10]
}

// RunDir is the host path of the harness' /run.
func (h *Harness) RunDir() string { return filepath.Join(h.Dir, "run") }

// JournalDir is the host path of the harness' volatile journal.
func (h *Harness) JournalDir() string { return filepath.Join(h.Dir, "run", "log", "journal") }

// BusAddress is a DBUS_SYSTEM_BUS_ADDRESS that reaches the harness' system bus
// from the host.
func (h *Harness) BusAddress() string {
	return "unix:path=" + filepath.Join(h.Dir, "run", "dbus", "system_bus_socket")
}

func (h *Harness) script1(timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{h.script}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s %s: timed out after %s", h.script, args[0], timeout)
	}
	return out.Bytes(), err
}

// Exec runs argv inside the harness' namespaces and returns its combined
// output. A non-zero exit is an *exec.ExitError (see ExitCode).
func (h *Harness) Exec(argv ...string) (string, error) {
	return h.ExecTimeout(2*time.Minute, argv...)
}

// RepoEnv names the repository root in the environment of what
// ExecTimeout runs (for a test binary re-run inside, RepoRoot).
const RepoEnv = "PODUNIT_TEST_REPO"

// ExecTimeout is Exec with an explicit deadline.
func (h *Harness) ExecTimeout(timeout time.Duration, argv ...string) (string, error) {
	out, err := h.script1(timeout, append([]string{"exec", h.Dir, "env", RepoEnv + "=" + h.Repo}, argv...)...)
	return string(out), err
}

// MustExec is Exec that fails the test on error.
func (h *Harness) MustExec(argv ...string) string {
	h.t.Helper()
	out, err := h.Exec(argv...)
	if err != nil {
		h.t.Fatalf("harness exec %q: %v\n%s", argv, err, out)
	}
	return out
}

// ExitCode returns the exit status carried by an error from Exec, 0 for nil,
// -1 for an error that is not an exit status.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// Journal returns the journal of unit (e.g. "podunit.service"), read on the
// host with journalctl -D.
func (h *Harness) Journal(unit string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "journalctl", "-D", h.JournalDir(), "--no-pager",
		"-o", "short-precise", "-u", unit).CombinedOutput()
	return string(out), err
}

// teardown stops podunit and the harness, then checks for leftovers.
func (h *Harness) teardown() {
	t := h.t
	if t.Failed() && h.Name != "" {
		h.dumpDiagnostics()
	}
	h.closePodunit()
	if _, err := os.Stat(h.Dir); err == nil {
		// a clean podunit shutdown first, so its own stop path is exercised
		// and its containers' units are stopped by it rather than by poweroff
		if h.podunitStarted() {
			if st := h.UnitActiveState(UnitName); st == "active" || st == "activating" {
				if out, err := h.ExecTimeout(45*time.Second, "systemctl", "stop", UnitName); err != nil {
					t.Errorf("harness: systemctl stop %s: %v\n%s", UnitName, err, out)
				}
			}
		}
		if out, err := h.script1(time.Minute, "stop", h.Dir); err != nil {
			t.Errorf("harness: stop: %v\n%s", err, out)
		}
	}
	// after stop: net-cleanup.sh leaves the host network alone while any
	// host-net harness runs, this one included
	if err := h.cleanupHostNet(); err != nil {
		t.Errorf("harness: %v", err)
	}
	leaks := h.Leaks()
	for _, l := range leaks {
		t.Errorf("harness left behind: %s", l)
	}
	if len(leaks) == 0 {
		if err := os.RemoveAll(h.Base); err != nil {
			t.Errorf("harness: %v", err)
		}
	}
}

func (h *Harness) dumpDiagnostics() {
	t := h.t
	if _, err := os.Stat(h.JournalDir()); err != nil {
		return
	}
	if j, err := h.Journal(UnitName); err == nil {
		t.Logf("journal of %s (harness %s):\n%s", UnitName, h.Dir, j)
	} else {
		t.Logf("journal of %s: %v\n%s", UnitName, err, j)
	}
	if out, err := h.ExecTimeout(20*time.Second, "systemctl", "list-units", "--all", "--no-legend", "--plain",
		"--type=service,slice,scope", "--state=active,activating,deactivating,failed"); err == nil {
		t.Logf("units in the harness:\n%s", out)
	}
}

// Leaks lists what this harness left on the host: mounts under Base, its
// cgroups, processes in those cgroups. Empty once the harness is stopped.
func (h *Harness) Leaks() []string {
	var leaks []string
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && (f[4] == h.Base || strings.HasPrefix(f[4], h.Base+"/")) {
				leaks = append(leaks, "mount "+f[4])
			}
		}
	}
	for _, cg := range h.cgroups {
		if _, err := os.Stat(cg); err == nil {
			leaks = append(leaks, "cgroup "+cg)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("/"+h.Name)) {
			continue
		}
		pid := filepath.Base(filepath.Dir(p))
		if n, err := strconv.Atoi(pid); err == nil {
			if st, err := procstat.Read("/proc", n); err == nil && st.Exited() {
				continue // reaped lazily by the host init; no longer running
			}
		}
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		leaks = append(leaks, fmt.Sprintf("process %s (%s)", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return leaks
}

// RepoRoot finds the repository root: the directory holding go.mod, walking
// up from the working directory (go test runs in the package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	// A test binary re-run inside the harness starts in its root, with the
	// environment ExecTimeout gives it; the repository is bound at the
	// same path there. (Not this file's compile-time path: with -trimpath,
	// as the Makefile builds, that is the module path.)
	if repo := os.Getenv(RepoEnv); repo != "" {
		if _, err := os.Stat(filepath.Join(repo, "go.mod")); err == nil {
			return repo, nil
		}
	}
	return "", errors.New("no go.mod above the working directory, and no " + RepoEnv + " naming a directory with one")
}
