//go:build integration

package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
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
		l.lines = append(l.lines, strings.TrimSuffix(sc.Text(), "\r")) // a terminal's line ends
		l.mu.Unlock()
	}
}

// lockedText is a writer several forwarders may share.
type lockedText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedText) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedText) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.b.String() }

func (l *lineLog) n() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.lines) }

func (l *lineLog) waitFor(t *testing.T, n int, timeout time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); l.n() < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d lines after %s, want %d", what, l.n(), timeout, n)
		}
	}
}

// TestSessionsOutlivePodunitRestart: an exec streamed through the URL podunit
// hands out keeps running and printing, and its exit code arrives, while
// podunit is restarted twice from the shipped unit (KillMode=mixed kills
// podunit.service's cgroup): by `systemctl restart`, then as an upgrade
// does (a new binary at a new path, daemon-reload, restart). The session and
// the runtime's exec process live in podunit-stream.service. So do an
// attach to a tty container (its lines go on, consecutive, and it ends when
// its container stops) and a port-forwarded connection (every line of the
// pod's server arrives across both restarts). Afterwards the restarted
// podunit registers new sessions with the same session process, and bad
// requests get podunit's codes.
func TestSessionsOutlivePodunitRestart(t *testing.T) {
	h := harness.Start(t, harness.Options{HostNet: true}) // the streaming URL is on the harness' loopback
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
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "sessions", Namespace: "default", Uid: "sessions-uid-1"},
		Hostname: "sessions", Linux: &runtimeapi.LinuxPodSandboxConfig{}}
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	start := func(name string, tty bool, cmd ...string) string {
		t.Helper()
		ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod.PodSandboxId,
			Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: name},
				Image:    &runtimeapi.ImageSpec{Image: pulled.ImageRef},
				Command:  cmd, Stdin: tty, Tty: tty,
				Linux: &runtimeapi.LinuxContainerConfig{},
			},
			SandboxConfig: podCfg,
		})
		if err != nil {
			t.Fatalf("CreateContainer %s: %v", name, err)
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
			t.Fatalf("StartContainer %s: %v", name, err)
		}
		return ctr.ContainerId
	}
	t.Cleanup(func() {
		ctx := harness.Context(t, 2*time.Minute)
		_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId})
		_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId})
	})
	const total, pfTotal = 150, 200
	id := start("idle", false, "sleep", "3600")
	ticker := start("ticker", true, "sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done")
	// One connection at a time on 8080, each answered with pfTotal lines.
	start("server", false, "sh", "-c", fmt.Sprintf(`printf '#!/bin/sh\ni=0; while [ $i -lt %d ]; do echo pf $i; i=$((i+1)); sleep 0.2; done\n' >/tmp/lines && chmod +x /tmp/lines && exec nc -ll -p 8080 -e /tmp/lines`, pfTotal))

	// Attach to the ticker's terminal (its output from the relay's taps).
	aresp, err := rt.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: ticker, Stdout: true, Tty: true})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	au, _ := url.Parse(aresp.Url)
	ae, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", au)
	if err != nil {
		t.Fatal(err)
	}
	apr, apw := io.Pipe()
	ticks := &lineLog{}
	go ticks.follow(apr)
	attached := make(chan error, 1)
	go func() {
		err := ae.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: apw, Tty: true})
		apw.Close()
		attached <- err
	}()

	// Port-forward to the server: a connection reading its lines. Until
	// the server listens, a connection is refused in the pod, and
	// client-go then ends the whole forward: a new one is made per try.
	tr, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pfErr := &lockedText{}
	tryForward := func() (net.Conn, func()) {
		presp, err := rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: pod.PodSandboxId, Port: []int32{8080}})
		if err != nil {
			t.Fatalf("PortForward: %v", err)
		}
		pu, _ := url.Parse(presp.Url)
		stopPF, readyPF := make(chan struct{}), make(chan struct{})
		pf, err := portforward.New(spdy.NewDialer(upgrader, &http.Client{Transport: tr}, "POST", pu), []string{"0:8080"}, stopPF, readyPF, io.Discard, pfErr)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = pf.ForwardPorts() }()
		select {
		case <-readyPF:
		case <-time.After(30 * time.Second):
			t.Fatalf("port-forward not ready: %s", pfErr.String())
		}
		ports, err := pf.GetPorts()
		if err != nil || len(ports) != 1 {
			t.Fatalf("port-forward ports %v, %v", ports, err)
		}
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
		if err != nil {
			close(stopPF)
			return nil, nil
		}
		first := make([]byte, 5)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, first); err != nil || string(first) != "pf 0\n" {
			c.Close()
			close(stopPF)
			return nil, nil
		}
		_ = c.SetReadDeadline(time.Time{})
		return c, func() { close(stopPF) }
	}
	var pconn net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		var stop func()
		if pconn, stop = tryForward(); pconn != nil {
			defer stop()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line through the port-forward: %s", pfErr.String())
		}
	}
	forwarded := &lineLog{lines: []string{"pf 0"}}
	pfDone := make(chan struct{})
	go func() { forwarded.follow(pconn); close(pfDone) }()

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
	out.waitFor(t, 3, 30*time.Second, "exec before the restart")
	ticks.waitFor(t, 3, 30*time.Second, "attach before the restart")
	forwarded.waitFor(t, 3, 30*time.Second, "port-forward before the restart")

	// The runtime's exec process is the session process's, not podunit's.
	if cg, err := h.Exec("systemd-cgls", "--no-pager", "-u", "podunit-stream.service"); err != nil || !strings.Contains(cg, " exec ") {
		t.Errorf("no runtime exec process in podunit-stream.service (%v):\n%s", err, cg)
	}
	if cg, err := h.Exec("systemd-cgls", "--no-pager", "-u", "podunit.service"); err != nil || strings.Contains(cg, " exec ") {
		t.Errorf("a runtime exec process in podunit.service (%v):\n%s", err, cg)
	}

	upgraded := filepath.Join(harness.StateDirInside, "upgrade", "podunit")
	for _, restart := range []struct {
		name string
		do   func()
	}{
		{"systemctl restart", func() { h.MustExec("systemctl", "restart", "podunit.service") }},
		{"upgrade", func() {
			if err := restartCopyFile(bin, filepath.Join(h.StateDir, "upgrade", "podunit")); err != nil {
				t.Fatal(err)
			}
			restartWriteExecStart(t, h, upgraded)
			h.MustExec("systemctl", "daemon-reload")
			h.MustExec("systemctl", "restart", "podunit.service")
		}},
	} {
		oldPID := restartPodunitPID(t, h)
		restart.do()
		if pid := restartPodunitPID(t, h); pid == oldPID || h.UnitActiveState("podunit.service") != "active" {
			t.Fatalf("%s: podunit.service not restarted (main PID %d, was %d)", restart.name, pid, oldPID)
		}
		atRestart, pfAtRestart, ticksAtRestart := out.n(), forwarded.n(), ticks.n()
		t.Logf("lines when the %s was done: exec %d, port-forward %d, attach %d", restart.name, atRestart, pfAtRestart, ticksAtRestart)
		if atRestart >= total-10 || pfAtRestart >= pfTotal-10 {
			t.Fatalf("%s took too long to prove anything: exec %d of %d lines, port-forward %d of %d already", restart.name, atRestart, total, pfAtRestart, pfTotal)
		}
		out.waitFor(t, atRestart+5, 10*time.Second, "exec after the "+restart.name)
		ticks.waitFor(t, ticksAtRestart+5, 10*time.Second, "attach after the "+restart.name)
		forwarded.waitFor(t, pfAtRestart+5, 10*time.Second, "port-forward after the "+restart.name)
	}
	if pid := restartPodunitPID(t, h); strings.TrimSpace(h.MustExec("readlink", fmt.Sprintf("/proc/%d/exe", pid))) != upgraded {
		t.Fatalf("podunit does not run %s after the upgrade", upgraded)
	}

	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
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

	// The forwarded connection got every line and ended with the server's.
	select {
	case <-pfDone:
	case <-time.After(90 * time.Second):
		t.Fatalf("the forwarded connection did not end; %d lines", forwarded.n())
	}
	forwarded.mu.Lock()
	for i, l := range forwarded.lines {
		if want := fmt.Sprintf("pf %d", i); l != want {
			t.Errorf("forwarded line %d is %q, want %q", i, l, want)
			break
		}
	}
	if len(forwarded.lines) != pfTotal {
		t.Errorf("%d forwarded lines, want %d", len(forwarded.lines), pfTotal)
	}
	forwarded.mu.Unlock()

	// The attach saw consecutive ticks, and ends when its container stops.
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ticker, Timeout: 2}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	select {
	case err := <-attached:
		if err != nil {
			t.Errorf("attach ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the attach did not end with its container; %d ticks", ticks.n())
	}
	ticks.mu.Lock()
	var first int
	if len(ticks.lines) == 0 || func() bool { _, err := fmt.Sscanf(ticks.lines[0], "tick %d", &first); return err != nil }() {
		t.Errorf("attach output %q", ticks.lines)
	}
	for i, l := range ticks.lines {
		if want := fmt.Sprintf("tick %d", first+i); l != want {
			t.Errorf("attach line %d is %q, want %q", i, l, want)
			break
		}
	}
	t.Logf("attach: %d consecutive ticks from tick %d", len(ticks.lines), first)
	ticks.mu.Unlock()

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
