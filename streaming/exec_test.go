package streaming

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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

func TestExecArgv(t *testing.T) {
	got := ExecArgv([]string{"/usr/sbin/runc", "--root", "/run/r"}, "c1", []string{"ls", "-la"}, true)
	want := []string{"/usr/sbin/runc", "--root", "/run/r", "exec", "--tty", "c1", "ls", "-la"}
	if !slices.Equal(got, want) {
		t.Fatalf("tty argv = %q, want %q", got, want)
	}
	got = ExecArgv([]string{"crun"}, "c1", []string{"true"}, false)
	want = []string{"crun", "exec", "c1", "true"}
	if !slices.Equal(got, want) {
		t.Fatalf("argv = %q, want %q", got, want)
	}
}

// runcContainer starts a busybox container with runc (detached, no
// terminal) and returns the runtime command to reach it.
func runcContainer(t *testing.T, runtime string) []string {
	t.Helper()
	bin, err := exec.LookPath(runtime)
	if err != nil {
		t.Fatalf("%s is required: %v", runtime, err)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox is required: %v", err)
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
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
	if out, err := exec.Command(bin, "spec", "-b", bundle).CombinedOutput(); err != nil {
		// crun has no -b for spec; run it in the bundle.
		cmd := exec.Command(bin, "spec")
		cmd.Dir = bundle
		if out2, err2 := cmd.CombinedOutput(); err2 != nil {
			t.Fatalf("%s spec: %v %s %s", runtime, err2, out, out2)
		}
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
	proc["terminal"] = false
	proc["args"] = []string{"sleep", "1000"}
	proc["env"] = []string{"PATH=/bin", "TERM=xterm", "MARK=from-spec"}
	raw, _ = json.Marshal(spec)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	id := "st-" + strings.ReplaceAll(filepath.Base(dir), "/", "")
	rt := []string{bin, "--root", filepath.Join(dir, "state")}
	if runtime == "crun" {
		// crun refuses cgroup v1 hybrid hosts unless it leaves cgroups
		// alone (DESIGN.md).
		rt = append(rt, "--cgroup-manager=disabled")
	}
	run := exec.Command(rt[0], append(rt[1:], "run", "--detach", "-b", bundle, id)...)
	// The detached container inherits the runtime's stdio: give it
	// nothing this test would wait on.
	if err := run.Run(); err != nil {
		t.Fatalf("%s run: %v", runtime, err)
	}
	t.Cleanup(func() {
		exec.Command(rt[0], append(rt[1:], "delete", "--force", id)...).Run()
	})
	return append(rt, "\x00"+id)
}

// splitRT undoes runcContainer's packing of the ID at the end.
func splitRT(v []string) ([]string, string) {
	return v[:len(v)-1], strings.TrimPrefix(v[len(v)-1], "\x00")
}

func TestCLIExecutorRealRuntime(t *testing.T) {
	for _, runtime := range []string{"runc"} {
		t.Run(runtime, func(t *testing.T) {
			rt, id := splitRT(runcContainer(t, runtime))
			tgt := Target{ID: id, Running: true, RuntimeCmd: rt}
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
		})
	}
}
