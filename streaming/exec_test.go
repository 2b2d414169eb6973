package streaming

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/oci"
)

func TestMain(m *testing.M) {
	if os.Getenv("STREAMING_TEST_EXEC_HELPER") == "1" {
		os.Exit(ExecHelperMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func testHelper() []string {
	return []string{"/usr/bin/env", "STREAMING_TEST_EXEC_HELPER=1", os.Args[0]}
}

// busyboxBundle writes an OCI bundle with a static busybox as rootfs.
func busyboxBundle(t *testing.T, runtime string, args []string, terminal bool) string {
	t.Helper()
	return busyboxBundleIn(t, t.TempDir(), runtime, args, terminal)
}

func busyboxBundleIn(t *testing.T, parent, runtime string, args []string, terminal bool) string {
	t.Helper()
	bin, err := exec.LookPath(runtime)
	if err != nil {
		t.Fatalf("%s is required: %v", runtime, err)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox is required: %v", err)
	}
	bundle := filepath.Join(parent, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"sh", "echo", "cat", "sleep", "stty", "wc", "head", "tty"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", c)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "spec")
	cmd.Dir = bundle
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s spec: %v %s", runtime, err, out)
	}
	cfgPath := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = terminal
	proc["args"] = args
	proc["env"] = []string{"PATH=/bin", "TERM=xterm", "MARK=from-spec"}
	raw, _ = json.Marshal(spec)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return bundle
}

var ctrSeq atomic.Int32

// testCtr is a container runcRun started.
type testCtr struct {
	rt       *oci.CLI
	root, id string
	bundle   string
}

// runcRun starts the bundle detached; the container inherits stdin and
// stdout (nil: /dev/null).
func runcRun(t *testing.T, bundle string, extra []string, stdin, stdout *os.File) testCtr {
	t.Helper()
	c := testCtr{id: fmt.Sprintf("st-%d-%d", os.Getpid(), ctrSeq.Add(1)), root: filepath.Join(t.TempDir(), "state"), bundle: bundle}
	c.rt = oci.NewRunc(oci.CLIConfig{Binary: "runc", Root: c.root, ExecDir: t.TempDir()})
	args := append([]string{"--root", c.root, "run", "--detach", "-b", bundle}, extra...)
	run := exec.Command("runc", append(args, c.id)...)
	if stdin != nil {
		run.Stdin = stdin
	}
	if stdout != nil {
		run.Stdout = stdout
	}
	// The detached container inherits the runtime's stdio: never give
	// it a pipe this test would wait on.
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	run.Stderr = errf
	if err := run.Run(); err != nil {
		msg, _ := os.ReadFile(errf.Name())
		t.Fatalf("runc run: %v: %s", err, msg)
	}
	t.Cleanup(func() {
		del := c.rt.DeleteArgv(c.id)
		exec.Command(del[0], del[1:]...).Run()
	})
	return c
}

// status is the runtime's status of the container.
func (c testCtr) status() string {
	out, err := exec.Command("runc", "--root", c.root, "state", c.id).Output()
	if err != nil {
		return "gone"
	}
	var st struct {
		Status string `json:"status"`
	}
	json.Unmarshal(out, &st)
	return st.Status
}

// terminal runs args in the container on a terminal the way
// container.Manager.Exec does: the container's process with new
// arguments.
func (c testCtr) terminal(ctx context.Context, p ExecProcess) (int, error) {
	spec, err := oci.ReadBundle(c.bundle)
	if err != nil {
		return -1, err
	}
	proc := *spec.Process
	proc.Args = p.Args
	proc.Terminal = true
	return RunTerminal(ctx, testHelper(), p, func(size *WinSize) (*oci.TerminalExec, error) {
		if size != nil {
			proc.ConsoleSize = &specs.Box{Height: uint(size.Height), Width: uint(size.Width)}
		}
		return c.rt.TerminalExec(c.id, proc)
	})
}

func TestRunTerminalRealRuntime(t *testing.T) {
	c := runcRun(t, busyboxBundle(t, "runc", []string{"sleep", "1000"}, false), nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var out bytes.Buffer
	rs := make(chan WinSize, 1)
	rs <- WinSize{Width: 100, Height: 40}
	code, err := c.terminal(ctx, ExecProcess{Args: []string{"sh", "-c", "echo hello $MARK; stty size"}, TTY: true, Stdout: &out, Resize: rs})
	if err != nil || code != 0 || out.String() != "hello from-spec\r\n40 100\r\n" {
		t.Fatalf("tty: code %d err %v stdout %q", code, err, out.String())
	}

	// An interactive shell resized mid-session.
	rs = make(chan WinSize, 2)
	rs <- WinSize{Width: 80, Height: 24}
	inR, inW := io.Pipe()
	sb := &syncBuffer{}
	res := make(chan error, 1)
	go func() {
		code, err := c.terminal(ctx, ExecProcess{Args: []string{"sh"}, TTY: true, Stdin: inR, Stdout: sb, Resize: rs})
		if err == nil && code != 5 {
			err = fmt.Errorf("exit code %d, want 5", code)
		}
		res <- err
	}()
	io.WriteString(inW, "stty size\n")
	waitFor(t, sb, "24 80")
	rs <- WinSize{Width: 132, Height: 43}
	time.Sleep(200 * time.Millisecond)
	io.WriteString(inW, "stty size; exit 5\n")
	waitFor(t, sb, "43 132")
	if err := <-res; err != nil {
		t.Fatalf("interactive: %v: %q", err, sb.String())
	}
	inW.Close()

	// A command the runtime cannot start is an error, and the exec's
	// scratch files go.
	_, err = c.terminal(ctx, ExecProcess{Args: []string{"/no/such/binary"}, TTY: true, Stdout: io.Discard})
	if err == nil {
		t.Fatal("exec of a missing binary succeeded")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(c.root)), "*", "exec-*")); len(left) > 0 {
		t.Errorf("scratch files left: %v", left)
	}
}

func TestParseHelperArgs(t *testing.T) {
	h, err := parseHelperArgs([]string{"--console-socket=/x/s", "--pid-file=/x/p", "--size=40x100", "--", "runc", "exec", "--size=1x1"})
	if err != nil || h.sock != "/x/s" || h.pidFile != "/x/p" || *h.size != (WinSize{Height: 40, Width: 100}) || strings.Join(h.argv, " ") != "runc exec --size=1x1" {
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
