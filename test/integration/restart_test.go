//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRestartLeavesContainersAlone runs podunit from the shipped unit files
// (contrib/systemd, ExecStart pointed at the binary under test) and a pod
// with a counting busybox container, then restarts podunit three ways: a
// clean `systemctl restart`, SIGKILL (systemd's Restart=always brings it
// back) and an upgrade (a new binary at a new path, daemon-reload, restart).
// Each time the container's unit, its invocation, main PID and the PID's
// start time must be unchanged, the counter must keep reaching the CRI log
// file, and at the end the container must still stop and be removed through
// CRI. The log file must hold every tick exactly once, in order: lines
// written to the journal while podunit was down are relayed when it is back.
func TestRestartLeavesContainersAlone(t *testing.T) {
	h := harness.Start(t, harness.Options{HostNet: true}) // the test registry is on the host's loopback
	bin := harness.Binary(t)
	if err := os.WriteFile(filepath.Join(h.ConfigDir, "podunit.toml"), []byte(h.TestConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, rt, img := serveInstalled(t, h, bin)

	ctx := harness.Context(t, 10*time.Minute)
	pulled, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.37.0"}})
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	meta := &runtimeapi.PodSandboxMetadata{Name: "restart", Namespace: "default", Uid: "restart-uid-1"}
	logDir := filepath.Join(harness.PodLogDirInside, "default_restart_restart-uid-1")
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: meta, Hostname: "restart", LogDirectory: logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{}}
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "counter"},
			Image:    &runtimeapi.ImageSpec{Image: pulled.ImageRef},
			Command:  []string{"sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.1; done"},
			LogPath:  "counter/0.log",
			Linux:    &runtimeapi.LinuxContainerConfig{},
		},
		SandboxConfig: podCfg,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	id := ctr.ContainerId
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	logFile := filepath.Join(h.PodLogDir, "default_restart_restart-uid-1", "counter", "0.log")
	restartWaitTicks(t, logFile, 5)
	before := restartSnapshot(t, h, rt, id)
	t.Logf("container %s: unit %s, main PID %d, invocation %s", id, before.unit, before.mainPID, before.invocation)

	upgraded := filepath.Join(harness.StateDirInside, "upgrade", "podunit")
	for _, step := range []struct {
		name string
		do   func(t *testing.T, oldPID int)
	}{
		{"systemctl-restart", func(t *testing.T, _ int) {
			h.MustExec("systemctl", "restart", "podunit.service")
		}},
		{"sigkill", func(t *testing.T, oldPID int) {
			h.MustExec("systemctl", "kill", "-s", "KILL", "podunit.service")
			// Restart=always (RestartSec=2s) is what brings it back
			restartWaitPodunitReplaced(t, h, oldPID, 60*time.Second)
		}},
		{"upgrade", func(t *testing.T, _ int) {
			hostCopy := filepath.Join(h.StateDir, "upgrade", "podunit")
			if err := restartCopyFile(bin, hostCopy); err != nil {
				t.Fatal(err)
			}
			restartWriteExecStart(t, h, upgraded)
			h.MustExec("systemctl", "daemon-reload")
			h.MustExec("systemctl", "restart", "podunit.service")
			pid := restartPodunitPID(t, h)
			if exe := strings.TrimSpace(h.MustExec("readlink", fmt.Sprintf("/proc/%d/exe", pid))); exe != upgraded {
				t.Fatalf("podunit runs %s after the upgrade, want %s", exe, upgraded)
			}
		}},
	} {
		t.Run(step.name, func(t *testing.T) {
			oldPID := restartPodunitPID(t, h)
			ticksBefore := restartMaxTick(t, logFile)
			step.do(t, oldPID)
			if st := h.UnitActiveState("podunit.service"); st != "active" {
				t.Fatalf("podunit.service is %q", st)
			}
			if pid := restartPodunitPID(t, h); pid == oldPID {
				t.Fatalf("podunit.service main PID still %d: it was not restarted", pid)
			}
			after := restartSnapshot(t, h, rt, id)
			if after != before {
				t.Fatalf("the container changed across the podunit %s:\nbefore %+v\nafter  %+v", step.name, before, after)
			}
			// the counter goes on and reaches the CRI log file
			restartWaitTicks(t, logFile, ticksBefore+20)
		})
	}

	t.Run("log-complete", func(t *testing.T) {
		restartCheckTicksContiguous(t, logFile)
	})

	t.Run("stop-and-remove", func(t *testing.T) {
		ctx := harness.Context(t, 2*time.Minute)
		// a short grace period: sh as PID 1 may ignore SIGTERM
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 2}); err != nil {
			t.Fatalf("StopContainer: %v", err)
		}
		if err := h.WaitUnitGone(before.unit, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Fatalf("state after stop = %v", st.Status.State)
		}
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("RemoveContainer: %v", err)
		}
		if _, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); status.Code(err) != codes.NotFound {
			t.Fatalf("ContainerStatus after remove: %v, want NotFound", err)
		}
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
			t.Fatalf("RemovePodSandbox: %v", err)
		}
	})
}

// serveInstalled installs the shipped units (restartInstallUnits), starts
// podunit from them, stops it and the session unit it starts at the end of
// the test, and returns its connection and clients on it.
func serveInstalled(t *testing.T, h *harness.Harness, bin string) (*grpc.ClientConn, runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	t.Helper()
	restartInstallUnits(t, h, bin)
	t.Cleanup(func() {
		if out, err := h.ExecTimeout(45*time.Second, "systemctl", "stop", "podunit.service", "podunit.socket", "podunit-stream.service"); err != nil {
			t.Errorf("systemctl stop podunit: %v\n%s", err, out)
		}
	})
	h.MustExec("systemctl", "start", "podunit.socket", "podunit.service")
	sock := filepath.Join(h.RunDir(), "podunit", "podunit.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
}

// restartInstallUnits installs contrib/systemd's units in the harness' /etc (its
// overlay) with ExecStart pointed at bin, as a package would with /usr/bin.
func restartInstallUnits(t *testing.T, h *harness.Harness, bin string) {
	t.Helper()
	for _, u := range []string{"podunit.service", "podunit.socket"} {
		h.MustExec("install", "-D", "-m", "0644", filepath.Join(h.Repo, "contrib", "systemd", u), "/etc/systemd/system/"+u)
	}
	restartWriteExecStart(t, h, bin)
	h.MustExec("systemctl", "daemon-reload")
}

func restartWriteExecStart(t *testing.T, h *harness.Harness, bin string) {
	t.Helper()
	conf := fmt.Sprintf("[Service]\nExecStart=\nExecStart=%[1]s serve --config %[2]s/podunit.toml\nExecReload=\nExecReload=%[1]s reload --config %[2]s/podunit.toml --pid $MAINPID\n", bin, harness.ConfigDirInside)
	h.MustExec("sh", "-c", `mkdir -p /etc/systemd/system/podunit.service.d && printf '%s' "$1" > /etc/systemd/system/podunit.service.d/binary.conf`, "sh", conf)
}

// restartCtrState is what must not change when podunit restarts.
type restartCtrState struct {
	unit, invocation, execMainStart string
	mainPID                         int
	pidStartTime                    string // field 22 of /proc/PID/stat
	nRestarts                       string
}

func restartSnapshot(t *testing.T, h *harness.Harness, rt runtimeapi.RuntimeServiceClient, id string) restartCtrState {
	t.Helper()
	ctx := harness.Context(t, 30*time.Second)
	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	if st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container state %v, want RUNNING", st.Status.State)
	}
	var info struct {
		Unit string `json:"unit"`
		PID  any    `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Unit == "" {
		t.Fatalf("ContainerStatus verbose info has no unit (err %v): %s", err, st.Info["info"])
	}
	props := restartShowProps(t, h, info.Unit, "MainPID", "InvocationID", "ExecMainStartTimestampMonotonic", "NRestarts", "ActiveState")
	if props["ActiveState"] != "active" {
		t.Fatalf("%s is %s", info.Unit, props["ActiveState"])
	}
	pid, err := strconv.Atoi(props["MainPID"])
	if err != nil || pid <= 0 {
		t.Fatalf("%s MainPID=%q", info.Unit, props["MainPID"])
	}
	if fmt.Sprint(info.PID) != props["MainPID"] {
		t.Fatalf("CRI says the container's PID is %v, systemd says %s", info.PID, props["MainPID"])
	}
	return restartCtrState{
		unit: info.Unit, invocation: props["InvocationID"], execMainStart: props["ExecMainStartTimestampMonotonic"],
		mainPID: pid, pidStartTime: restartProcStartTime(t, h, pid), nRestarts: props["NRestarts"],
	}
}

func restartShowProps(t *testing.T, h *harness.Harness, unit string, names ...string) map[string]string {
	t.Helper()
	argv := []string{"systemctl", "show", unit}
	for _, n := range names {
		argv = append(argv, "-p", n)
	}
	props := map[string]string{}
	for _, line := range strings.Split(h.MustExec(argv...), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			props[k] = v
		}
	}
	return props
}

func restartProcStartTime(t *testing.T, h *harness.Harness, pid int) string {
	t.Helper()
	stat := h.MustExec("cat", fmt.Sprintf("/proc/%d/stat", pid))
	// fields after the command name, which is in parentheses and may hold spaces
	i := strings.LastIndexByte(stat, ')')
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		t.Fatalf("short /proc/%d/stat: %q", pid, stat)
	}
	return f[19] // field 22 overall: starttime
}

func restartPodunitPID(t *testing.T, h *harness.Harness) int {
	t.Helper()
	pid, _ := strconv.Atoi(restartShowProps(t, h, "podunit.service", "MainPID")["MainPID"])
	return pid
}

func restartWaitPodunitReplaced(t *testing.T, h *harness.Harness, oldPID int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if pid := restartPodunitPID(t, h); pid != 0 && pid != oldPID && h.UnitActiveState("podunit.service") == "active" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("podunit.service not back (active with a new PID) %s after SIGKILL", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var restartTickLine = regexp.MustCompile(`^\S+ stdout F tick (\d+)$`)

// restartTicks returns the counter values in the CRI log file, in file order.
func restartTicks(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := restartTickLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("%s: unexpected line %q", path, sc.Text())
		}
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func restartMaxTick(t *testing.T, path string) int {
	t.Helper()
	m := -1
	for _, n := range restartTicks(t, path) {
		m = max(m, n)
	}
	return m
}

func restartWaitTicks(t *testing.T, path string, atLeast int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for restartMaxTick(t, path) < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("%s: counter at %d after 30s, want at least %d", path, restartMaxTick(t, path), atLeast)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func restartCheckTicksContiguous(t *testing.T, path string) {
	t.Helper()
	got := restartTicks(t, path)
	if len(got) == 0 {
		t.Fatalf("%s: no ticks", path)
	}
	for i, n := range got {
		if n != i {
			lo, hi := max(0, i-3), min(len(got), i+3)
			t.Fatalf("%s: line %d holds tick %d, want %d (a gap or duplicate; around it: %v); %d lines, last tick %d",
				path, i+1, n, i, got[lo:hi], len(got), got[len(got)-1])
		}
	}
	t.Logf("%s: ticks 0..%d, each once, in order", path, len(got)-1)
}

func restartCopyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
