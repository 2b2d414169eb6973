//go:build integration

package oci

// Real runc and crun, as root on the host. Run with
//   go test -tags integration -run Integration ./oci/
// crun refuses hosts whose unified cgroup hierarchy has controllers in hybrid
// mode (this machine: hugetlb); TestMain then re-runs the tests in a private
// mount namespace where that file reads empty, which is what crun sees inside
// podunit's systemd harness.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/podunit/podunit/test/harness"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/statefile"
)

const unifiedControllers = "/sys/fs/cgroup/unified/cgroup.controllers"

func TestMain(m *testing.M) {
	if os.Getenv("PODUNIT_OCI_MNTNS") == "" {
		if b, err := os.ReadFile(unifiedControllers); err == nil && len(bytes.TrimSpace(b)) > 0 {
			cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "--", os.Args[0]}, os.Args[1:]...)...)
			cmd.Env = append(os.Environ(), "PODUNIT_OCI_MNTNS=1")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					os.Exit(ee.ExitCode())
				}
				fmt.Fprintln(os.Stderr, "unshare:", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	} else {
		empty := filepath.Join(os.TempDir(), fmt.Sprintf("podunit-empty-%d", os.Getpid()))
		if err := os.WriteFile(empty, nil, 0o444); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		err := unix.Mount(empty, unifiedControllers, "", unix.MS_BIND, "")
		// The mount keeps the inode; the name can go now.
		os.Remove(empty)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bind empty controllers:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

type rig struct {
	t        *testing.T
	rt       *CLI
	dir      string
	rootfs   string
	cgParent string
}

func newRig(t *testing.T, flavor Flavor) *rig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root")
	}
	dir := t.TempDir()
	bb := filepath.Join(dir, "bb")
	script, err := harness.BusyboxBundleScript()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, bb).CombinedOutput()
	if err != nil {
		t.Fatalf("make-busybox-bundle: %v\n%s", err, out)
	}
	cfg := CLIConfig{Binary: "runc", Root: filepath.Join(dir, "root"), ExecDir: filepath.Join(dir, "exec")}
	rt := NewRunc(cfg)
	if flavor == FlavorCrun {
		cfg.Binary = "crun"
		rt = NewCrun(cfg)
	}
	r := &rig{t: t, rt: rt, dir: dir, rootfs: filepath.Join(bb, "rootfs"),
		cgParent: fmt.Sprintf("/podunit-octest-%d-%s", os.Getpid(), rt.Name())}
	t.Cleanup(r.cleanup)
	return r
}

// cleanup removes every container the test left and the test's cgroups.
func (r *rig) cleanup() {
	ctx := context.Background()
	var states []runtimeState
	if out, err := r.rt.command(ctx, append(r.rt.global(), "list", "--format", "json")); err == nil {
		_ = json.Unmarshal(out, &states)
	}
	for _, s := range states {
		_ = r.rt.Delete(ctx, s.ID)
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + r.cgParent)
	for _, d := range dirs {
		subs, _ := filepath.Glob(d + "/*/")
		for _, s := range subs {
			_ = os.Remove(s)
		}
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.t.Errorf("cgroup cleanup: %v", err)
		}
	}
}

// start generates a spec for cfg, writes the bundle and runs the unit's
// create and start argv directly.
func (r *rig) start(id string, cfg *runtimeapi.ContainerConfig, mutate func(*SpecInput)) *specs.Spec {
	r.t.Helper()
	bundle := filepath.Join(r.dir, "bundles", id)
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		r.t.Fatal(err)
	}
	files := PodFiles{}
	for name, content := range map[string]string{"hosts": "127.0.0.1 localhost\n", "resolv.conf": "nameserver 127.0.0.53\n", "hostname": "pod\n"} {
		p := filepath.Join(r.dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
		switch name {
		case "hosts":
			files.Hosts = p
		case "resolv.conf":
			files.ResolvConf = p
		default:
			files.Hostname = p
		}
	}
	sc := cfg.GetLinux().GetSecurityContext()
	user, err := ResolveUser(r.rootfs, sc, "")
	if err != nil {
		r.t.Fatal(err)
	}
	caps, err := HostCapabilities()
	if err != nil {
		r.t.Fatal(err)
	}
	adj, err := CurrentOOMScoreAdj()
	if err != nil {
		r.t.Fatal(err)
	}
	features, err := r.rt.Features(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	in := SpecInput{
		ContainerID:   id,
		Config:        cfg,
		SandboxConfig: &runtimeapi.PodSandboxConfig{Hostname: "pod"},
		RootfsPath:    r.rootfs,
		CgroupsPath:   r.cgParent + "/" + id,
		PodFiles:      files,
		ResolvedUser:  user,
		Host:          Host{Capabilities: caps, OOMScoreAdjMin: &adj},

		DefaultCapabilities: testDefaultCaps,
		Runtime:             features,
	}
	if mutate != nil {
		mutate(&in)
	}
	spec, err := GenerateSpec(in)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := statefile.Write(filepath.Join(bundle, "config.json"), spec); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The container inherits the runtime's stdio (journald under systemd):
	// a file here, since a pipe would stay open for the container's life.
	logf, err := os.Create(filepath.Join(bundle, "output.log"))
	if err != nil {
		r.t.Fatal(err)
	}
	defer logf.Close()
	// As the unit's wrapper runs them: create, then start.
	runtimeLog := filepath.Join(bundle, "runtime.log")
	for _, argv := range [][]string{
		r.rt.CreateArgv(id, bundle, filepath.Join(bundle, "pid"), runtimeLog, ""),
		r.rt.StartArgv(id, runtimeLog),
	} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Run(); err != nil {
			out, _ := os.ReadFile(logf.Name())
			rlog, _ := os.ReadFile(runtimeLog)
			r.t.Fatalf("%v: %v\n%s\n%s", argv, err, out, rlog)
		}
	}
	return spec
}

func sleeper(sc *runtimeapi.LinuxContainerSecurityContext, mounts ...*runtimeapi.Mount) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "t"},
		Command:  []string{"sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait"},
		Mounts:   mounts,
		Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: sc},
	}
}

// runtimeState is the part of `runc state` / `crun state` the tests check.
type runtimeState struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
}

func (r *rig) state(ctx context.Context, id string) (*runtimeState, error) {
	out, err := r.rt.command(ctx, append(r.rt.global(), "state", id))
	if err != nil {
		return nil, err
	}
	var st runtimeState
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("state %s: %w", id, err)
	}
	return &st, nil
}

type execResult struct {
	ExitCode       int
	Stdout, Stderr []byte
}

// execSync runs args the way container.Manager.ExecSync does: the
// container's own process with new arguments.
func (r *rig) execSync(id string, timeout time.Duration, args ...string) (*execResult, error) {
	spec, err := ReadBundle(filepath.Join(r.dir, "bundles", id))
	if err != nil {
		r.t.Fatal(err)
	}
	proc := *spec.Process
	proc.Args = args
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code, err := r.rt.Exec(ctx, id, ExecProcess{Process: proc, Stdout: &stdout, Stderr: &stderr})
	return &execResult{ExitCode: code, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, err
}

func (r *rig) mustExec(id string, args ...string) string {
	r.t.Helper()
	res, err := r.execSync(id, 10*time.Second, args...)
	if err != nil || res.ExitCode != 0 {
		r.t.Fatalf("exec %q: code %d err %v stdout %q stderr %q", args, res.ExitCode, err, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

func TestIntegrationRunc(t *testing.T) { testLifecycle(t, FlavorRunc) }
func TestIntegrationCrun(t *testing.T) { testLifecycle(t, FlavorCrun) }

func testLifecycle(t *testing.T, flavor Flavor) {
	r := newRig(t, flavor)
	ctx := context.Background()
	r.start("life", sleeper(nil), nil)

	st, err := r.state(ctx, "life")
	if err != nil {
		t.Fatal(err)
	}
	pidFile, _ := os.ReadFile(filepath.Join(r.dir, "bundles", "life", "pid"))
	if st.Status != "running" || strconv.Itoa(st.Pid) != strings.TrimSpace(string(pidFile)) || st.ID != "life" {
		t.Fatalf("state = %+v, pid file %q", st, pidFile)
	}

	t.Run("exec captures output and exit code", func(t *testing.T) {
		res, err := r.execSync("life", 10*time.Second, "sh", "-c", "echo out; echo err >&2; exit 3")
		if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Fatalf("res = %+v (%q/%q), err %v", res, res.Stdout, res.Stderr, err)
		}
	})
	t.Run("exec timeout kills the process", func(t *testing.T) {
		start := time.Now()
		_, err := r.execSync("life", time.Second, "sleep", "4321")
		if !errors.Is(err, errdefs.ErrDeadline) {
			t.Fatalf("err = %v, want ErrDeadline", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("timeout took %v", d)
		}
		if out := r.mustExec("life", "sh", "-c", "pgrep -f 'sleep 4321' || true"); strings.TrimSpace(out) != "" {
			t.Errorf("timed-out process still running: %q", out)
		}
	})
	t.Run("exec of a missing binary is an error", func(t *testing.T) {
		res, err := r.execSync("life", 10*time.Second, "/no/such/binary")
		if err == nil && res.ExitCode == 0 {
			t.Fatalf("res = %+v", res)
		}
	})
	t.Run("exec with a terminal needs the exec helper", func(t *testing.T) {
		spec, _ := ReadBundle(filepath.Join(r.dir, "bundles", "life"))
		p := *spec.Process
		p.Args, p.Terminal = []string{"tty"}, true
		if _, err := r.rt.Exec(ctx, "life", ExecProcess{Process: p}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
	t.Run("exec stdin without a terminal", func(t *testing.T) {
		spec, _ := ReadBundle(filepath.Join(r.dir, "bundles", "life"))
		p := *spec.Process
		p.Args = []string{"cat"}
		var out bytes.Buffer
		code, err := r.rt.Exec(ctx, "life", ExecProcess{Process: p, Stdin: strings.NewReader("piped\n"), Stdout: &out})
		if err != nil || code != 0 || out.String() != "piped\n" {
			t.Fatalf("code %d err %v output %q", code, err, out.String())
		}
	})
	t.Run("exec ends with its process, not with its stdin", func(t *testing.T) {
		spec, _ := ReadBundle(filepath.Join(r.dir, "bundles", "life"))
		p := *spec.Process
		p.Args = []string{"sh", "-c", "echo started; exit 4"}
		// A client whose stdin never ends must not keep the exec open.
		stdin, hold := io.Pipe()
		defer hold.Close()
		var out bytes.Buffer
		start := time.Now()
		code, err := r.rt.Exec(ctx, "life", ExecProcess{Process: p, Stdin: stdin, Stdout: &out})
		if err != nil || code != 4 || out.String() != "started\n" {
			t.Fatalf("code %d err %v output %q", code, err, out.String())
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("exec took %v", d)
		}
	})
	t.Run("a timed-out exec ends though a daemon it left holds its output", func(t *testing.T) {
		defer r.mustExec("life", "sh", "-c", "pkill -f 'sleep 432[23]' || true")
		done := make(chan error, 1)
		go func() {
			_, err := r.execSync("life", 2*time.Second, "sh", "-c", "sleep 4322 & sleep 4323")
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, errdefs.ErrDeadline) {
				t.Fatalf("err = %v, want ErrDeadline", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("exec still running 20 s after its 2 s timeout")
		}
	})
	t.Run("exec in unknown container", func(t *testing.T) {
		_, err := r.rt.Exec(ctx, "nope", ExecProcess{Process: specs.Process{Args: []string{"true"}, Cwd: "/"}})
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})

	// systemd's stop kills the unit's whole cgroup; here the init is enough
	// (the end of a PID namespace's init ends the namespace).
	if err := syscall.Kill(st.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = r.state(ctx, "life")
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == "stopped" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.Status != "stopped" {
		procStatus, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.Pid))
		t.Fatalf("status after kill = %+v\n%s", st, procStatus)
	}
	if err := r.rt.Delete(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.state(ctx, "life"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("state after delete: %v", err)
	}
	if err := r.rt.Delete(ctx, "life"); err != nil {
		t.Errorf("second delete: %v", err)
	}

	t.Run("force delete of a running container", func(t *testing.T) {
		r.start("force", sleeper(nil), nil)
		if err := r.rt.Delete(ctx, "force"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.state(ctx, "force"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("state: %v", err)
		}
	})
	t.Run("generated security settings hold", func(t *testing.T) { testSecurity(t, r) })
}
