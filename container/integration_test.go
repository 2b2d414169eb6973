//go:build integration

package container

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/logrelay/relayunit"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/test/harness"
	"github.com/podunit/podunit/unitprops"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The integration tests run in two halves. On the host, TestInHarness boots
// a real systemd (test/harness), copies this test binary into it and runs
// itself there with PODUNIT_IN_HARNESS=1: PIDs, cgroup paths and bundle
// paths systemd and runc hand back only make sense inside. The binary is
// also the units' `_stdio` wrapper and `_exitrec` recorder (TestMain).
const (
	inHarnessEnv = "PODUNIT_IN_HARNESS"
	itestDir     = harness.StateDirInside + "/itest"
	itestSlice   = "podunit-itest.slice"
	runcRoot     = "/run/podunit/runc"
	crunRoot     = "/run/podunit/crun"
)

func TestInHarness(t *testing.T) {
	if os.Getenv(inHarnessEnv) == "" {
		runInHarness(t)
		return
	}
	ctx := context.Background()
	ie := newInside(t)
	t.Run("LifecycleLimitsAndJournal", func(t *testing.T) { ie.lifecycle(ctx, t) })
	t.Run("StdinShellAndTTY", func(t *testing.T) { ie.stdinShell(ctx, t) })
	t.Run("TTYContainer", func(t *testing.T) { ie.ttyContainer(ctx, t) })
	t.Run("StopTimeoutKills", func(t *testing.T) { ie.stopTimeout(ctx, t) })
	t.Run("StopFromOutsideIsAnExit", func(t *testing.T) { ie.stopFromOutside(ctx, t) })
	t.Run("ExitWhilePodunitDown", func(t *testing.T) { ie.exitWhileDown(ctx, t) })
	t.Run("ImmediateExit", func(t *testing.T) { ie.immediateExit(ctx, t) })
	t.Run("StartFailure", func(t *testing.T) { ie.startFailure(ctx, t) })
	t.Run("OOMKilled", func(t *testing.T) { ie.oom(ctx, t) })
	t.Run("OwnCgroupLimits", func(t *testing.T) { ie.ownLimits(ctx, t) })
	t.Run("CrunHandler", func(t *testing.T) { ie.crun(ctx, t) })
	t.Run("LogRelayKilled", func(t *testing.T) { ie.relayKilled(ctx, t) })
	t.Run("LogCRIFile", func(t *testing.T) { ie.criFile(ctx, t) })
	t.Run("LogBurst100k", func(t *testing.T) { ie.burst(ctx, t) })
	t.Run("LogRelayKilledMidBurst", func(t *testing.T) { ie.relayKilledMidBurst(ctx, t) })
	t.Run("LogReopenMidBurst", func(t *testing.T) { ie.reopenMidBurst(ctx, t) })
	t.Run("JournalRateLimit", func(t *testing.T) { ie.journalRateLimit(ctx, t) })
	t.Run("LogDiskFull", func(t *testing.T) { ie.logDiskFull(ctx, t) })
	t.Run("FastPaths", func(t *testing.T) { ie.fastPaths(ctx, t) })
	t.Run("CDIDevices", func(t *testing.T) { ie.cdiDevices(ctx, t) })
	t.Run("BindMountOptions", func(t *testing.T) { ie.bindMountOptions(ctx, t) })
	t.Run("PluginAdjust", func(t *testing.T) { ie.pluginAdjust(ctx, t) })
	t.Run("CheckpointRestore", func(t *testing.T) { ie.checkpointRestore(ctx, t) })
	t.Run("Lifecycle200", func(t *testing.T) { ie.churn(ctx, t, 200) })
}

func runInHarness(t *testing.T) {
	h := harness.Start(t, harness.Options{})
	dir := filepath.Join(h.StateDir, "itest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "container.test")
	if out, err := exec.Command("cp", self, bin).CombinedOutput(); err != nil {
		t.Fatalf("copy test binary: %v %s", err, out)
	}
	// ITEST_RUN narrows the inner run, e.g. ITEST_RUN=TestInHarness/OOM.
	run := "^TestInHarness$"
	if r := os.Getenv("ITEST_RUN"); r != "" {
		run = r
	}
	inner := fmt.Sprintf("exec env %s=1 %s/container.test -test.run '%s' -test.v -test.timeout 8m -test.short=%v >%s/out.log 2>&1",
		inHarnessEnv, itestDir, run, testing.Short(), itestDir)
	_, err = h.ExecTimeout(10*time.Minute, "sh", "-c", inner)
	out, _ := os.ReadFile(filepath.Join(dir, "out.log"))
	t.Log("inside the harness:\n" + string(out))
	if err != nil {
		t.Fatalf("tests inside the harness failed: %v", err)
	}
}

// inside is the test environment within the harness.
type inside struct {
	sd     systemd.Conn
	imgs   *dirImages
	opts   Options
	deps   Deps
	logDir string
}

func newInside(t *testing.T) *inside {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := config.Default()
	sd, err := systemd.New(systemd.Options{CallTimeout: d.Systemd.CallTimeout.D(), MaxParallelJobs: d.Systemd.MaxParallelJobs})
	if err != nil {
		t.Fatal(err)
	}
	ie := &inside{sd: sd, logDir: filepath.Join(itestDir, "logs")}
	os.RemoveAll(ie.logDir)
	t.Cleanup(ie.sd.Close)
	ie.imgs = newDirImages(t, filepath.Join(itestDir, "rootfs"))
	_, err = os.Stat("/sys/fs/cgroup/cgroup.controllers")
	host := oci.Host{}
	if adj, err := oci.CurrentOOMScoreAdj(); err == nil {
		host.OOMScoreAdjMin = &adj
	}
	if caps, err := oci.HostCapabilities(); err == nil {
		host.Capabilities = caps
	}
	// The node's log relay, as podunit.service starts it.
	relaySock := "/run/podunit/logrelay.sock"
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := relayunit.Ensure(rctx, ie.sd, self, relaySock, "/run/podunit/logrelay"); err != nil {
		t.Fatal(err)
	}
	ie.opts = Options{
		LogRelaySocket: relaySock,
		StateDir:       filepath.Join(itestDir, "containers"), RunDir: "/run/podunit/containers", Self: self,
		Caps: unitprops.Caps{SystemdVersion: 252, CgroupV2: err == nil}, Host: host, CgroupRoot: "/sys/fs/cgroup",
	}
	if err := ie.opts.SetRuntime(config.Default().Runtime); err != nil {
		t.Fatal(err)
	}
	execDir := filepath.Join(d.Paths.RunDir, "exec") // as cmd/podunit wires it
	rt := oci.NewRunc(oci.CLIConfig{Binary: "/usr/sbin/runc", Root: runcRoot, ExecDir: execDir})
	crun := oci.NewCrun(oci.CLIConfig{Binary: "/usr/bin/crun", Root: crunRoot, ExecDir: execDir})
	// The relay writes the CRI log files `kubectl logs` reads; podunit
	// only asks it to flush.
	lm := logrelay.Client{Socket: relaySock}
	runtimes := map[string]oci.Runtime{"runc": rt, "crun": crun}
	ie.deps = Deps{Systemd: ie.sd, Images: ie.imgs, Pods: itestPods{logDir: ie.logDir}, Runtimes: runtimes, Logs: lm,
		Features: ProbeFeatures(context.Background(), runtimes, slog.Default())}
	return ie
}

func (ie *inside) manager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(ie.opts, ie.deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

type itestPods struct{ logDir string }

func (p itestPods) Pod(ctx context.Context, id string) (*Pod, error) {
	handler := ""
	if strings.HasPrefix(id, "pod-crun") {
		handler = "crun"
	}
	return &Pod{ID: id, Slice: itestSlice, LogDirectory: p.logDir, RuntimeHandler: handler, Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "itest-" + id, Namespace: "itest", Uid: "uid-" + id},
		Hostname: "itest",
	}}, nil
}

func shConfig(name, script string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sh", "-c", script},
		LogPath:  name + ".log",
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{}},
	}
}

// trapTerm exits 7 on SIGTERM. A signal that arrives before the trap is
// set is ignored (the shell is PID 1), so callers wait for /tmp/ready.
const trapTerm = `trap 'echo got-term; exit 7' TERM; touch /tmp/ready; echo started; sleep 1000 & wait`

// waitReady waits until the container's script has set its trap.
func waitReady(ctx context.Context, m *Manager, id string) error {
	deadline := time.Now().Add(60 * time.Second) // emulated VMs are slow
	for time.Now().Before(deadline) {
		if _, _, code, err := m.ExecSync(ctx, id, []string{"test", "-e", "/tmp/ready"}, 5); err == nil && code == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("container %s not ready", id)
}

func (ie *inside) run(ctx context.Context, t *testing.T, m *Manager, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	id, err := m.Create(ctx, "pod-"+cfg.Metadata.Name, cfg, nil)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := m.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	return id
}

func cgroupFile(ctrl, unit, file string) string {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, systemd.SlicePath(itestSlice), unit, file))
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

func (ie *inside) lifecycle(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	cfg := shConfig("life", `echo out-line > /dev/stdout; echo err-line > /dev/stderr; `+trapTerm)
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuQuota: 20000, CpuPeriod: 100000, CpuShares: 512}
	id := ie.run(ctx, t, m, cfg)
	unit := unitName(id)
	st, info, err := m.Status(ctx, id, true)
	if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("status %v %v", st, err)
	}
	props, err := ie.sd.UnitProperties(ctx, unit, "Service")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := props["MainPID"].(uint32)
	if props["Slice"] != itestSlice || pid == 0 {
		t.Errorf("unit slice %v main pid %v", props["Slice"], props["MainPID"])
	}
	if !strings.Contains(info["info"], `"pid":`) {
		t.Errorf("verbose info without pid: %s", info["info"])
	}
	// The main PID is the container's init, inside the unit's cgroup.
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if !strings.Contains(string(cg), systemd.SlicePath(itestSlice)+"/"+unit+"/container") {
		t.Errorf("container init cgroups:\n%s", cg)
	}
	// The node's log relay carries the output: no relay process in the
	// unit (or anywhere per container), and the relay has the container.
	if _, err := os.Stat(filepath.Join(ie.opts.RunDir, id, "pid.relay")); err == nil {
		t.Errorf("a per-unit relay was started although the node relay runs")
	}
	if err := logrelay.Wait(ie.opts.LogRelaySocket, id, 50*time.Millisecond); err == nil || errors.Is(err, logrelay.ErrUnknown) {
		t.Errorf("node relay for a running container: %v, want a timeout (still relaying)", err)
	}
	// `runc start` returns once the init was told to exec; the exec
	// itself may land a moment later.
	var comm []byte
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		comm, _ = os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) == "sh" || time.Now().After(deadline) {
			break
		}
	}
	if strings.TrimSpace(string(comm)) != "sh" {
		t.Errorf("main pid %d is %q, not the container's sh", pid, comm)
	}
	want := [][3]string{
		{"memory", "memory.limit_in_bytes", "67108864"},
		{"cpu", "cpu.cfs_quota_us", "20000"},
		{"cpu", "cpu.cfs_period_us", "100000"},
		{"cpu", "cpu.shares", "512"},
	}
	if ie.opts.Caps.CgroupV2 {
		want = [][3]string{
			{"", "memory.max", "67108864"},
			{"", "cpu.max", "20000 100000"},
			{"", "cpu.weight", "20"}, // SharesToWeight(512)
		}
	}
	for _, c := range want {
		if got := cgroupFile(c[0], unit, c[1]); got != c[2] {
			t.Errorf("%s/%s = %s, want %s", c[0], c[1], got, c[2])
		}
	}
	out, errOut, code, err := m.ExecSync(ctx, id, []string{"sh", "-c", "echo exec-out; echo exec-err >&2; exit 3"}, 10)
	if err != nil || string(out) != "exec-out\n" || string(errOut) != "exec-err\n" || code != 3 {
		t.Errorf("exec: %q %q %d %v", out, errOut, code, err)
	}
	start := time.Now()
	if _, _, _, err := m.ExecSync(ctx, id, []string{"sleep", "60"}, 1); !errors.Is(err, errdefs.ErrDeadline) || time.Since(start) > 10*time.Second {
		t.Errorf("exec timeout: %v after %v", err, time.Since(start))
	}
	if err := m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 48 << 20}); err != nil {
		t.Fatal(err)
	}
	memFile := [2]string{"memory", "memory.limit_in_bytes"}
	if ie.opts.Caps.CgroupV2 {
		memFile = [2]string{"", "memory.max"}
	}
	if got := cgroupFile(memFile[0], unit, memFile[1]); got != "50331648" {
		t.Errorf("after update %s = %s", memFile[1], got)
	}
	ie.checkJournal(ctx, t, unit, id)
	if err := waitReady(ctx, m, id); err != nil {
		t.Fatal(err)
	}

	if err := m.Stop(ctx, id, 5); err != nil {
		t.Fatal(err)
	}
	st, _, _ = m.Status(ctx, id, false)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 7 || st.Reason != ReasonError || st.FinishedAt <= st.StartedAt {
		t.Errorf("after stop: %v", st)
	}
	// The CRI log is complete once the container is reported EXITED.
	crilog, err := os.ReadFile(filepath.Join(ie.logDir, "life.log"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSuffix(string(crilog), "\n"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			t.Fatalf("malformed CRI log line %q", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Errorf("CRI log timestamp %q: %v", f[0], err)
		}
		got = append(got, f[1]+" "+f[2]+" "+f[3])
	}
	// the two streams are independent: compare per stream
	var stdout, stderr []string
	for _, g := range got {
		if strings.HasPrefix(g, "stderr ") {
			stderr = append(stderr, g)
		} else {
			stdout = append(stdout, g)
		}
	}
	if strings.Join(stdout, "|") != "stdout F out-line|stdout F started|stdout F got-term" || strings.Join(stderr, "|") != "stderr F err-line" {
		t.Errorf("CRI log:\n%s", crilog)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

// checkJournal: stdout and stderr arrive as separate streams with their
// priorities, attributed to the unit, with the pod/container fields.
func (ie *inside) checkJournal(ctx context.Context, t *testing.T, unit, id string) {
	deadline := time.Now().Add(10 * time.Second)
	var seen map[string]map[string]any
	for time.Now().Before(deadline) {
		seen = map[string]map[string]any{}
		out, _ := exec.CommandContext(ctx, "journalctl", "--no-pager", "-o", "json", "-u", unit).Output()
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				if msg, ok := e["MESSAGE"].(string); ok {
					seen[msg] = e
				}
			}
		}
		if seen["out-line"] != nil && seen["err-line"] != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	o, e := seen["out-line"], seen["err-line"]
	if o == nil || e == nil {
		// Where the lines went, if anywhere (another unit, no unit).
		all, _ := exec.CommandContext(ctx, "journalctl", "--no-pager", "-o", "json", "MESSAGE=out-line", "+", "MESSAGE=err-line").Output()
		t.Fatalf("container lines not in the journal of %s: %v\nthe lines in the whole journal: %s", unit, seen, all)
	}
	if o["PRIORITY"] != "6" || e["PRIORITY"] != "3" || o["_STREAM_ID"] == e["_STREAM_ID"] {
		t.Errorf("streams not distinguishable: stdout %v/%v stderr %v/%v", o["PRIORITY"], o["_STREAM_ID"], e["PRIORITY"], e["_STREAM_ID"])
	}
	for k, want := range map[string]string{
		"_SYSTEMD_UNIT": unit, "CONTAINER_ID": id, "CONTAINER_NAME": "life", "POD_NAME": "itest-pod-life",
		"POD_NAMESPACE": "itest", "POD_UID": "uid-pod-life", "CONTAINER_ATTEMPT": "0", "SYSLOG_IDENTIFIER": "life",
	} {
		if o[k] != want || e[k] != want {
			t.Errorf("journal field %s: stdout %v stderr %v, want %s", k, o[k], e[k], want)
		}
	}
}

// critest's shell container: /bin/sh with stdin=true must keep running.
func (ie *inside) stdinShell(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	cfg := shConfig("shell", "")
	cfg.Command, cfg.Stdin, cfg.StdinOnce = []string{"/bin/sh"}, true, true
	id := ie.run(ctx, t, m, cfg)
	tcfg := shConfig("tty", "echo on-tty; sleep 1000")
	tcfg.Tty = true
	tid := ie.run(ctx, t, m, tcfg)
	time.Sleep(time.Second)
	for _, c := range []string{id, tid} {
		if st, _, _ := m.Status(ctx, c, false); st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s: %v", c, st)
		}
		if out, _, _, err := m.ExecSync(ctx, c, []string{"echo", "alive"}, 5); err != nil || string(out) != "alive\n" {
			t.Errorf("exec: %q %v", out, err)
		}
		if err := m.Remove(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	ie.assertNoLeaks(ctx, t)
}

func (ie *inside) stopTimeout(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	id := ie.run(ctx, t, m, shConfig("stubborn", `trap '' TERM; sleep 1000 & wait; sleep 1000`))
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- m.Stop(ctx, id, 5) }()
	// While the grace period runs, reads answer at once (the kubelet's
	// PLEG relist lists every container each second).
	time.Sleep(300 * time.Millisecond)
	reads := time.Now()
	if _, err := m.List(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if st, _, err := m.Status(ctx, id, false); err != nil || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("status during the grace period: %v %v", st, err)
	}
	if d := time.Since(reads); d > 2500*time.Millisecond { // the grace period would be 4.7 s
		t.Errorf("list and status during a stop's grace period took %v", d)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 5*time.Second || d > 9*time.Second {
		t.Errorf("stop with a 5s timeout took %v", d)
	}
	st, _, _ := m.Status(ctx, id, false)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 {
		t.Errorf("after stop timeout: %v", st)
	}
	// timeout 0: no grace at all
	id2 := ie.run(ctx, t, m, shConfig("stubborn0", `trap '' TERM; sleep 1000 & wait; sleep 1000`))
	start = time.Now()
	if err := m.Stop(ctx, id2, 0); err != nil || time.Since(start) > 3*time.Second {
		t.Errorf("stop with timeout 0: %v after %v", err, time.Since(start))
	}
	for _, id := range []string{id, id2} {
		if err := m.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	ie.assertNoLeaks(ctx, t)
}

func (ie *inside) stopFromOutside(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	id := ie.run(ctx, t, m, shConfig("outside", trapTerm))
	if err := waitReady(ctx, m, id); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "systemctl", "stop", unitName(id)).CombinedOutput(); err != nil {
		t.Fatalf("systemctl stop: %v %s", err, out)
	}
	st, _, err := m.Status(ctx, id, false)
	if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 7 {
		t.Errorf("after systemctl stop: %v %v", st, err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

func (ie *inside) exitWhileDown(ctx context.Context, t *testing.T) {
	m1 := ie.manager(t)
	quick := ie.run(ctx, t, m1, shConfig("quick", "sleep 1; exit 5"))
	long := ie.run(ctx, t, m1, shConfig("long", trapTerm))
	// podunit is "down": nothing talks to systemd about these containers
	// while the first one exits; only the units' ExecStopPost runs.
	m1 = nil
	ok := waitFor(15*time.Second, func() bool {
		_, err := ie.sd.UnitProperties(ctx, unitName(quick), "Unit")
		return errors.Is(err, errdefs.ErrNotFound)
	})
	if !ok {
		t.Fatal("quick container's unit not collected")
	}
	m2 := ie.manager(t)
	st, _, err := m2.Status(ctx, quick, false)
	if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 5 || st.Reason != ReasonError {
		t.Errorf("exited while down: %v %v", st, err)
	}
	st, _, err = m2.Status(ctx, long, false)
	if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("running across restart: %v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(runcRoot, quick)); !os.IsNotExist(err) {
		t.Errorf("runc state of the exited container not deleted by ExecStopPost: %v", err)
	}
	for _, id := range []string{quick, long} {
		if err := m2.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	ie.assertNoLeaks(ctx, t)
}

// A container that is done before systemd could look at it: StartContainer
// succeeds, the exit code and the output are all there.
func (ie *inside) immediateExit(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	var ids []string
	for i := 0; i < 10; i++ {
		id := ie.run(ctx, t, m, shConfig(fmt.Sprintf("quick%d", i), fmt.Sprintf("echo bye%d; exit %d", i, i+1)))
		ids = append(ids, id)
	}
	for i, id := range ids {
		ctxw, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := m.Wait(ctxw, id)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		st, _, _ := m.Status(ctx, id, false)
		if st.ExitCode != int32(i+1) || st.Reason != ReasonError {
			t.Errorf("quick%d: exit %d reason %q", i, st.ExitCode, st.Reason)
		}
		b, _ := os.ReadFile(filepath.Join(ie.logDir, fmt.Sprintf("quick%d.log", i)))
		if !strings.HasSuffix(string(b), fmt.Sprintf(" stdout F bye%d\n", i)) {
			out, _ := exec.Command("journalctl", "--no-pager", "-o", "export", "--output-fields=MESSAGE,CONTAINER_ID,PODUNIT_LOG,_SYSTEMD_UNIT,_TRANSPORT,PRIORITY,_PID,SYSLOG_IDENTIFIER",
				"MESSAGE=bye"+strconv.Itoa(i), "+", "_SYSTEMD_UNIT="+UnitPrefix+id+".service", "+", "UNIT="+UnitPrefix+id+".service", "+", "SYSLOG_IDENTIFIER=podunit-exitrec").CombinedOutput()
			t.Errorf("quick%d CRI log %q; its line in the journal:\n%s", i, b, out)
		}
		if err := m.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	ie.assertNoLeaks(ctx, t)
}

func (ie *inside) startFailure(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	cfg := shConfig("nope", "")
	cfg.Command = []string{"/does-not-exist"}
	id, err := m.Create(ctx, "pod-nope", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(ctx, id)
	if err == nil || !strings.Contains(err.Error(), "does-not-exist") {
		rl, _ := os.ReadFile(filepath.Join(ie.opts.RunDir, id, "runtime.log"))
		jl, _ := exec.Command("journalctl", "--no-pager", "-u", unitName(id)).CombinedOutput()
		t.Fatalf("start error does not carry the runtime's message: %v\nruntime log:\n%s\njournal:\n%s", err, rl, jl)
	}
	t.Logf("start error: %v", err)
	st, _, _ := m.Status(ctx, id, false)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Reason != ReasonStartError {
		t.Errorf("status after failed start: %v", st)
	}
	if _, err := ie.sd.UnitProperties(ctx, unitName(id), "Unit"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("failed unit not collected: %v", err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

func (ie *inside) oom(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	cfg := shConfig("hog", "dd if=/dev/zero of=/dev/null bs=256M count=1")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}
	id := ie.run(ctx, t, m, cfg)
	ctxw, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.Wait(ctxw, id); err != nil {
		t.Fatal(err)
	}
	st, _, _ := m.Status(ctx, id, false)
	if st.ExitCode != 137 || st.Reason != ReasonOOMKilled {
		t.Errorf("hog: exit %d reason %q", st.ExitCode, st.Reason)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

// crun runs with --cgroup-manager=disabled: the container stays in the
// unit's own cgroup, under the unit's limits.
func (ie *inside) crun(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	cfg := shConfig("crun", trapTerm)
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 40 << 20}
	id := ie.run(ctx, t, m, cfg)
	if err := waitReady(ctx, m, id); err != nil {
		t.Fatal(err)
	}
	_, info, _ := m.Status(ctx, id, true)
	if !strings.Contains(info["info"], `"runtimeHandler":"crun"`) {
		t.Errorf("handler: %s", info["info"])
	}
	props, err := ie.sd.UnitProperties(ctx, unitName(id), "Service")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := props["MainPID"].(uint32)
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if !strings.Contains(string(cg), systemd.SlicePath(itestSlice)+"/"+unitName(id)) {
		t.Errorf("crun container outside its unit:\n%s", cg)
	}
	memFile := [2]string{"memory", "memory.limit_in_bytes"}
	if ie.opts.Caps.CgroupV2 {
		memFile = [2]string{"", "memory.max"}
	}
	if got := cgroupFile(memFile[0], unitName(id), memFile[1]); got != "41943040" {
		t.Errorf("%s = %s", memFile[1], got)
	}
	// In the unit's cgroup, the container reads the unit's limits as its
	// own, also after an update (systemd's alone: crun has no cgroup here).
	inFile := "/sys/fs/cgroup/" + memFile[0] + "/" + memFile[1]
	ie.checkLimitsInside(ctx, t, m, id, "crun", map[string]string{inFile: "41943040"})
	if err := m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 48 << 20}); err != nil {
		t.Fatal(err)
	}
	ie.checkLimitsInside(ctx, t, m, id, "crun update", map[string]string{inFile: "50331648"})
	if out, _, code, err := m.ExecSync(ctx, id, []string{"echo", "hi"}, 5); err != nil || code != 0 || string(out) != "hi\n" {
		t.Errorf("exec: %q %d %v", out, code, err)
	}
	if err := m.Stop(ctx, id, 5); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := m.Status(ctx, id, false); st.GetExitCode() != 7 {
		t.Errorf("after stop: %v", st)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

func (ie *inside) churn(ctx context.Context, t *testing.T, n int) {
	if testing.Short() {
		n = 20
	}
	m := ie.manager(t)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 4)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cfg := shConfig(fmt.Sprintf("churn%d", i), trapTerm)
			id, err := m.Create(ctx, "pod-churn", cfg, nil)
			if err == nil {
				err = m.Start(ctx, id)
			}
			if err == nil {
				err = waitReady(ctx, m, id)
			}
			if err == nil {
				err = m.Stop(ctx, id, 10)
			}
			if err == nil {
				if st, _, _ := m.Status(ctx, id, false); st.GetExitCode() != 7 {
					err = fmt.Errorf("container %s: exit %d, want 7", id, st.GetExitCode())
				}
			}
			if id != "" {
				if rerr := m.Remove(ctx, id); err == nil {
					err = rerr
				}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d lifecycles (create, start, stop, remove; 4 at a time) in %v", n, time.Since(start))
	ie.assertNoLeaks(ctx, t)
}

// assertNoLeaks: no container unit in any state, no rootfs mount, no
// runtime state, no bundle or state directory.
func (ie *inside) assertNoLeaks(ctx context.Context, t *testing.T) {
	t.Helper()
	// Units and the run directories' mounts are gone when Remove returns.
	units, err := ie.sd.ListUnits(ctx, UnitPrefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		t.Errorf("unit left: %s %s/%s", u.Name, u.LoadState, u.ActiveState)
	}
	for _, line := range mountLines() {
		if strings.Contains(line, ie.opts.RunDir+"/") {
			t.Errorf("mount left: %s", line)
		}
	}
	// So is the runtimes' state.
	for _, d := range []string{runcRoot, crunRoot} {
		ents, err := os.ReadDir(d)
		if err != nil && !os.IsNotExist(err) {
			t.Error(err)
		}
		for _, e := range ents {
			t.Errorf("left in %s: %s", d, e.Name())
		}
	}
	// Unmounting and deleting the root filesystems and files is the
	// managers' reapers' (the tests' managers are not at hand here to
	// Drain): they get a few seconds.
	var left []string
	waitFor(10*time.Second, func() bool { left = ie.leftFiles(); return len(left) == 0 })
	for _, l := range left {
		t.Error(l)
	}
}

// leftFiles lists what a removed container's reaper deletes: state and
// run directories (the trash directories themselves excepted, not what
// they hold), root filesystems.
func (ie *inside) leftFiles() []string {
	var out []string
	for _, d := range []string{ie.opts.StateDir, ie.opts.RunDir} {
		ents, err := os.ReadDir(d)
		if err != nil && !os.IsNotExist(err) {
			out = append(out, err.Error())
		}
		for _, e := range ents {
			if e.Name() != trashName {
				out = append(out, fmt.Sprintf("left in %s: %s", d, e.Name()))
			}
		}
		ents, _ = os.ReadDir(filepath.Join(d, trashName))
		for _, e := range ents {
			out = append(out, fmt.Sprintf("left in %s's trash: %s", d, e.Name()))
		}
	}
	ents, _ := os.ReadDir(ie.imgs.root)
	for _, e := range ents {
		if e.Name() != ".template" {
			out = append(out, "rootfs left: "+e.Name())
		}
	}
	for _, line := range mountLines() {
		if strings.Contains(line, ie.imgs.root) {
			out = append(out, "mount left: "+line)
		}
	}
	return out
}

func waitFor(d time.Duration, f func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if f() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

var _ = io.Discard
