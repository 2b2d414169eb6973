//go:build integration

package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	clientexec "k8s.io/client-go/util/exec"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// lineLog collects an exec's output lines as they arrive.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) follow(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l.mu.Lock()
		l.lines = append(l.lines, sc.Text())
		l.mu.Unlock()
	}
}

func (l *lineLog) n() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.lines) }

func (l *lineLog) waitFor(t *testing.T, n int, timeout time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); l.n() < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d lines after %s, want %d", what, l.n(), timeout, n)
		}
	}
}

// TestExecOutlivesPodunitRestart: an exec streamed through the URL podunit
// hands out keeps running and printing, and its exit code arrives, while
// podunit is restarted by `systemctl restart` from the shipped unit
// (KillMode=mixed kills podunit.service's cgroup): the session and the
// runtime's exec process live in podunit-stream.service. Afterwards the
// restarted podunit registers new sessions with the same session process,
// and bad requests get podunit's codes.
func TestExecOutlivesPodunitRestart(t *testing.T) {
	h := harness.Start(t, harness.Options{HostNet: true}) // the streaming URL is on the harness' loopback
	bin := harness.Binary(t)
	if err := os.WriteFile(filepath.Join(h.ConfigDir, "podunit.toml"), []byte(h.TestConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
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
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	img := runtimeapi.NewImageServiceClient(conn)

	ctx := harness.Context(t, 10*time.Minute)
	pulled, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.37.0"}})
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "sessions", Namespace: "default", Uid: "sessions-uid-1"},
		Hostname: "sessions", Linux: &runtimeapi.LinuxPodSandboxConfig{}}
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "idle"},
			Image:    &runtimeapi.ImageSpec{Image: pulled.ImageRef},
			Command:  []string{"sleep", "3600"},
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
	t.Cleanup(func() {
		ctx := harness.Context(t, 2*time.Minute)
		_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId})
		_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId})
	})

	const total = 60
	resp, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Stdout: true, Stderr: true,
		Cmd: []string{"sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); sleep 0.2; done; exit 7", total)}})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		t.Fatal(err)
	}
	e, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	out := &lineLog{}
	followed := make(chan struct{})
	go func() { out.follow(pr); close(followed) }()
	done := make(chan error, 1)
	go func() {
		err := e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: pw, Stderr: pw})
		pw.Close()
		done <- err
	}()
	out.waitFor(t, 3, 30*time.Second, "before the restart")

	// The runtime's exec process is the session process's, not podunit's.
	if cg := h.MustExec("systemd-cgls", "--no-pager", "-u", "podunit-stream.service"); !strings.Contains(cg, " exec ") {
		t.Errorf("no runtime exec process in podunit-stream.service:\n%s", cg)
	}
	if cg := h.MustExec("systemd-cgls", "--no-pager", "-u", "podunit.service"); strings.Contains(cg, " exec ") {
		t.Errorf("a runtime exec process in podunit.service:\n%s", cg)
	}

	oldPID := restartPodunitPID(t, h)
	h.MustExec("systemctl", "restart", "podunit.service")
	if pid := restartPodunitPID(t, h); pid == oldPID || h.UnitActiveState("podunit.service") != "active" {
		t.Fatalf("podunit.service not restarted (main PID %d, was %d)", pid, oldPID)
	}
	atRestart := out.n()
	t.Logf("%d lines before podunit was restarted", atRestart)
	if atRestart >= total-10 {
		t.Fatalf("the restart took too long to prove anything: %d of %d lines already", atRestart, total)
	}
	out.waitFor(t, atRestart+5, 10*time.Second, "after the restart")

	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the exec did not end; %d lines", out.n())
	}
	<-followed
	var exit clientexec.CodeExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
		t.Errorf("exec ended with %v (%T), want exit code 7", err, err)
	}
	out.mu.Lock()
	for i, l := range out.lines {
		if want := fmt.Sprintf("line %d", i); l != want {
			t.Errorf("line %d is %q, want %q", i, l, want)
			break
		}
	}
	if len(out.lines) != total {
		t.Errorf("%d lines, want %d", len(out.lines), total)
	}
	out.mu.Unlock()

	// The restarted podunit registers new sessions with the same process.
	resp, err = rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Stdout: true, Cmd: []string{"echo", "after-restart"}})
	if err != nil {
		t.Fatalf("Exec after the restart: %v", err)
	}
	u, _ = url.Parse(resp.Url)
	if e, err = remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &b}); err != nil || b.String() != "after-restart\n" {
		t.Errorf("exec after the restart: %q, %v", b.String(), err)
	}
	// Bad requests are still podunit's to refuse.
	if _, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "0123456789abcdef", Stdout: true, Cmd: []string{"true"}}); status.Code(err) != codes.NotFound {
		t.Errorf("Exec in an unknown container: %v, want NotFound", err)
	}
	if _, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Exec without streams: %v, want InvalidArgument", err)
	}
}
