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

// runcRun starts the bundle detached; the container inherits stdin and
// stdout (nil: /dev/null). It returns the runtime and the ID.
func runcRun(t *testing.T, bundle string, extra []string, stdin, stdout *os.File) (*oci.CLI, string) {
	t.Helper()
	id := fmt.Sprintf("st-%d-%d", os.Getpid(), ctrSeq.Add(1))
	root := filepath.Join(t.TempDir(), "state")
	rt := oci.NewRunc(oci.CLIConfig{Binary: "runc", Root: root})
	args := append([]string{"--root", root, "run", "--detach", "-b", bundle}, extra...)
	run := exec.Command("runc", append(args, id)...)
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
		del := rt.DeleteArgv(id)
		exec.Command(del[0], del[1:]...).Run()
	})
	return rt, id
}

// runcStatus is the runtime's status of the container.
func runcStatus(rt *oci.CLI, id string) string {
	argv := rt.StateArgv(id)
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		return "gone"
	}
	var st struct {
		Status string `json:"status"`
	}
	json.Unmarshal(out, &st)
	return st.Status
}

func TestCLIExecutorRealRuntime(t *testing.T) {
	for _, runtime := range []string{"runc"} {
		t.Run(runtime, func(t *testing.T) {
			rt, id := runcRun(t, busyboxBundle(t, runtime, []string{"sleep", "1000"}, false), nil, nil, nil)
			tgt := Target{ID: id, Running: true, Runtime: rt}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e := CLIExecutor{Helper: testHelper()}

			var out, errb bytes.Buffer
			code, err := e.Exec(ctx, tgt, ExecProcess{Args: []string{"sh", "-c", "echo hello $MARK; echo oops >&2; exit 3"}, Stdout: &out, Stderr: &errb})
			if err != nil || code != 3 || out.String() != "hello from-spec\n" || errb.String() != "oops\n" {
				t.Fatalf("pipes: code %d err %v stdout %q stderr %q", code, err, out.String(), errb.String())
			}

			out.Reset()
			code, err = e.Exec(ctx, tgt, ExecProcess{Args: []string{"wc", "-c"}, Stdin: strings.NewReader(strings.Repeat("x", 100000)), Stdout: &out})
			if err != nil || code != 0 || strings.TrimSpace(out.String()) != "100000" {
				t.Fatalf("stdin: code %d err %v stdout %q", code, err, out.String())
			}

			out.Reset()
			rs := make(chan WinSize, 1)
			rs <- WinSize{Width: 100, Height: 40}
			code, err = e.Exec(ctx, tgt, ExecProcess{Args: []string{"sh", "-c", "echo hello; stty size"}, TTY: true, Stdout: &out, Resize: rs})
			if err != nil || code != 0 || out.String() != "hello\r\n40 100\r\n" {
				t.Fatalf("tty: code %d err %v stdout %q", code, err, out.String())
			}

			// An interactive shell resized mid-session.
			rs = make(chan WinSize, 2)
			rs <- WinSize{Width: 80, Height: 24}
			inR, inW := io.Pipe()
			sb := &syncBuffer{}
			res := make(chan error, 1)
			go func() {
				code, err := e.Exec(ctx, tgt, ExecProcess{Args: []string{"sh"}, TTY: true, Stdin: inR, Stdout: sb, Resize: rs})
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
		})
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
