package streaming

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/procstat"
)

type fakeExecTargets struct{}

func (fakeExecTargets) ExecTarget(_ context.Context, id string) (ExecTarget, error) {
	return ExecTarget{ID: id}, nil
}

// startSessionProcess runs the session process's control socket and
// server in this process, with a Registry as its Deps as `_stream` has.
func startSessionProcess(t *testing.T) (socket string, reg *Registry) {
	t.Helper()
	reg = NewRegistry()
	srv := startServer(t, Deps{Containers: reg, Pods: reg, Exec: reg})
	socket = filepath.Join(t.TempDir(), "stream.sock")
	l, err := ListenControl(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &Control{Srv: srv, Reg: reg, Listen: "k", Logger: srv.log}
	go c.Serve(ctx, l)
	return socket, reg
}

// Requests through podunit's Remote get the in-process server's errors
// (so the same gRPC codes), whether podunit or the session process finds
// them; a good one gets a URL and registers the container.
func TestRemoteRequests(t *testing.T) {
	socket, reg := startSessionProcess(t)
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "run", Running: true})
	ctrs.set(Target{ID: "stopped"})
	ensured := 0
	r := &Remote{Socket: socket, Containers: ctrs, Execs: fakeExecTargets{}, Pods: fakePods{"pod": ""},
		Ensure: func(context.Context) error { ensured++; return nil }}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		call func() error
		want error
	}{
		{"exec unknown", func() error {
			_, err := r.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "nope", Cmd: []string{"true"}, Stdout: true})
			return err
		}, errdefs.ErrNotFound},
		{"exec stopped", func() error {
			_, err := r.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "stopped", Cmd: []string{"true"}, Stdout: true})
			return err
		}, errdefs.ErrPrecondition},
		{"exec no command", func() error {
			_, err := r.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "run", Stdout: true})
			return err
		}, errdefs.ErrInvalid},
		{"exec tty and stderr", func() error {
			_, err := r.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "run", Cmd: []string{"sh"}, Tty: true, Stdout: true, Stderr: true})
			return err
		}, errdefs.ErrInvalid},
		{"attach no streams", func() error {
			_, err := r.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "run"})
			return err
		}, errdefs.ErrInvalid},
		{"attach unknown", func() error {
			_, err := r.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "nope", Stdout: true})
			return err
		}, errdefs.ErrNotFound},
		{"port-forward bad port", func() error {
			_, err := r.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "pod", Port: []int32{70000}})
			return err
		}, errdefs.ErrInvalid},
		{"port-forward unknown pod", func() error {
			_, err := r.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "nope", Port: []int32{80}})
			return err
		}, errdefs.ErrNotFound},
		// The session process's own checks come back with their kind.
		{"registration without container", func() error {
			_, err := r.register(ctx, request{Op: opExec, ID: "x"})
			return err
		}, errdefs.ErrInvalid},
	} {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := reg.StreamTarget(ctx, "run"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused request registered its container: %v", err)
	}
	for _, call := range []func() (string, error){
		func() (string, error) {
			resp, err := r.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "run", Cmd: []string{"true"}, Stdout: true})
			return resp.GetUrl(), err
		},
		func() (string, error) {
			resp, err := r.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "run", Stdout: true})
			return resp.GetUrl(), err
		},
		func() (string, error) {
			resp, err := r.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "pod", Port: []int32{80}})
			return resp.GetUrl(), err
		},
	} {
		u, err := call()
		if err != nil || !strings.HasPrefix(u, "http://127.0.0.1:") {
			t.Fatalf("URL %q, %v", u, err)
		}
	}
	if tg, err := reg.StreamTarget(ctx, "run"); err != nil || !tg.Running {
		t.Errorf("registered container: %+v, %v", tg, err)
	}
	if p, err := reg.NetNSPath(ctx, "pod"); err != nil || p != "" {
		t.Errorf("registered pod: %q, %v", p, err)
	}
	if ensured != 0 {
		t.Errorf("Ensure called %d times with the session process up", ensured)
	}

	// No session process: Remote starts one (here: Ensure fails) and
	// says the service is unavailable.
	r.Socket = filepath.Join(t.TempDir(), "none.sock")
	r.Ensure = func(context.Context) error { ensured++; return fmt.Errorf("no systemd") }
	if _, err := r.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "run", Cmd: []string{"true"}, Stdout: true}); !errors.Is(err, errdefs.ErrUnavailable) || ensured != 1 {
		t.Errorf("without a session process: %v (Ensure called %d times)", err, ensured)
	}
}

// The registry tells a stopped container by its exit record or its init.
func TestRegistryRuns(t *testing.T) {
	reg := NewRegistry()
	st, err := procstat.Read("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exit := filepath.Join(t.TempDir(), "exit")
	ctx := context.Background()
	check := func(what string, tg Target, want bool) {
		t.Helper()
		reg.putContainer(tg, nil)
		got, err := reg.StreamTarget(ctx, tg.ID)
		if err != nil || got.Running != want {
			t.Errorf("%s: running %v (%v), want %v", what, got.Running, err, want)
		}
	}
	check("init alive", Target{ID: "a", Running: true, InitPID: os.Getpid(), InitStart: st.Start, ExitFile: exit}, true)
	check("init recycled", Target{ID: "b", Running: true, InitPID: os.Getpid(), InitStart: st.Start + 1, ExitFile: exit}, false)
	check("init unknown", Target{ID: "c", Running: true, ExitFile: exit}, true)
	if err := os.WriteFile(exit, []byte(strconv.Itoa(0)), 0o600); err != nil {
		t.Fatal(err)
	}
	check("exit recorded", Target{ID: "d", Running: true, InitPID: os.Getpid(), InitStart: st.Start, ExitFile: exit}, false)
	// Stopped containers are forgotten at the next registration.
	reg.putContainer(Target{ID: "e", Running: true}, nil)
	if _, err := reg.StreamTarget(ctx, "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stopped container still registered: %v", err)
	}
}
