package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/test/harness"
)

// The test binary stands in for podunit as the exec helper. An init, not
// TestMain: the integration build has its own TestMain.
func init() {
	if os.Getenv("OCI_TEST_EXEC_HELPER") == "1" {
		os.Exit(ExecHelperMain(os.Args[1:]))
	}
}

// terminalCtr runs a busybox container (`sleep 1000`, no terminal of its
// own) with runc and returns a CLI whose exec helper is this test binary,
// and the container's process.
func terminalCtr(t *testing.T) (*CLI, string, specs.Process) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runc needs root")
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	script, err := harness.BusyboxBundleScript()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, bundle, "--", "sleep", "1000").CombinedOutput(); err != nil {
		t.Fatalf("make-busybox-bundle: %v\n%s", err, out)
	}
	spec, err := ReadBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	spec.Process.Env = []string{"PATH=/bin", "TERM=xterm", "MARK=from-spec"}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rt := NewRunc(CLIConfig{Binary: "runc", Root: filepath.Join(dir, "root"), ExecDir: filepath.Join(dir, "exec"),
		ExecHelper: []string{"/usr/bin/env", "OCI_TEST_EXEC_HELPER=1", self}})
	id := fmt.Sprintf("octty-%d", os.Getpid())
	// Detached, the container keeps the runtime's stdio: never a pipe
	// this test would wait on.
	errf, err := os.Create(filepath.Join(dir, "run.err"))
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	run := exec.Command("runc", "--root", rt.cfg.Root, "run", "--detach", "-b", bundle, id)
	run.Stdout, run.Stderr = errf, errf
	if err := run.Run(); err != nil {
		out, _ := os.ReadFile(errf.Name())
		t.Fatalf("runc run: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), id) })
	p := *spec.Process
	p.Cwd = "/"
	return rt, id, p
}

func TestTerminalExec(t *testing.T) {
	rt, id, proc := terminalCtr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tty := func(args ...string) specs.Process {
		p := proc
		p.Args = args
		p.Terminal = true
		return p
	}

	// The first size is the terminal's from the start.
	var out bytes.Buffer
	rs := make(chan console.WinSize, 1)
	rs <- console.WinSize{Width: 100, Height: 40}
	code, err := rt.Exec(ctx, id, ExecProcess{Process: tty("sh", "-c", "echo hello $MARK; stty size"), Stdout: &out, Resize: rs})
	if err != nil || code != 0 || out.String() != "hello from-spec\r\n40 100\r\n" {
		t.Fatalf("tty: code %d err %v stdout %q", code, err, out.String())
	}

	// An interactive shell resized mid-session.
	rs = make(chan console.WinSize, 2)
	rs <- console.WinSize{Width: 80, Height: 24}
	inR, inW := io.Pipe()
	sb := &syncBuffer{}
	res := make(chan error, 1)
	go func() {
		code, err := rt.Exec(ctx, id, ExecProcess{Process: tty("sh"), Stdin: inR, Stdout: sb, Resize: rs})
		if err == nil && code != 5 {
			err = fmt.Errorf("exit code %d, want 5", code)
		}
		res <- err
	}()
	io.WriteString(inW, "stty size\n")
	waitFor(t, sb, "24 80")
	rs <- console.WinSize{Width: 132, Height: 43}
	time.Sleep(200 * time.Millisecond)
	io.WriteString(inW, "stty size; exit 5\n")
	waitFor(t, sb, "43 132")
	if err := <-res; err != nil {
		t.Fatalf("interactive: %v: %q", err, sb.String())
	}
	inW.Close()

	// A command the runtime cannot start is an error.
	if _, err := rt.Exec(ctx, id, ExecProcess{Process: tty("/no/such/binary"), Stdout: io.Discard}); err == nil {
		t.Fatal("exec of a missing binary succeeded")
	}

	// A deadline kills the process as it kills a piped one (by its PID,
	// so a process that ignores the terminal's hangup goes too) and wraps
	// ErrDeadline.
	dctx, dcancel := context.WithTimeout(ctx, time.Second)
	defer dcancel()
	start := time.Now()
	_, err = rt.Exec(dctx, id, ExecProcess{Process: tty("sh", "-c", "trap '' HUP; exec sleep 4323"), Stdout: io.Discard})
	if !errors.Is(err, errdefs.ErrDeadline) {
		t.Fatalf("timed-out terminal exec: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timed-out terminal exec took %v", d)
	}
	out.Reset()
	if _, err := rt.Exec(ctx, id, ExecProcess{Process: tty("sh", "-c", "pgrep -f 'sleep 4323' || echo gone"), Stdout: &out}); err != nil || !strings.Contains(out.String(), "gone") {
		t.Errorf("timed-out process still there: %q %v", out.String(), err)
	}

	// Every exec's scratch files go.
	if left, _ := filepath.Glob(filepath.Join(rt.cfg.ExecDir, "exec-*")); len(left) > 0 {
		t.Errorf("scratch files left: %v", left)
	}

	// Without an exec helper a terminal exec is refused.
	bare := NewRunc(CLIConfig{Binary: "runc", Root: rt.cfg.Root, ExecDir: rt.cfg.ExecDir})
	if _, err := bare.Exec(ctx, id, ExecProcess{Process: tty("true")}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("terminal exec without a helper: %v", err)
	}
}

func TestParseHelperArgs(t *testing.T) {
	h, err := parseHelperArgs([]string{"--console-socket=/x/s", "--pid-file=/x/p", "--size=40x100", "--", "runc", "exec", "--size=1x1"})
	if err != nil || h.sock != "/x/s" || h.pidFile != "/x/p" || *h.size != (console.WinSize{Height: 40, Width: 100}) || strings.Join(h.argv, " ") != "runc exec --size=1x1" {
		t.Fatalf("got %+v, %v", h, err)
	}
	for _, bad := range [][]string{
		{"--pid-file=/x/p", "--", "runc"},
		{"--console-socket=/x/s", "--pid-file=/x/p", "--"},
		{"--console-socket=/x/s", "--pid-file=/x/p", "runc"},
		{"--console-socket=/x/s", "--pid-file=/x/p", "--size=big", "--", "runc"},
	} {
		if _, err := parseHelperArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, s *syncBuffer, want string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if strings.Contains(s.String(), want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("output %q never contained %q", s.String(), want)
}
