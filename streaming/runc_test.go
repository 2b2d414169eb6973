package streaming

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/podunit/podunit/oci"
)

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
