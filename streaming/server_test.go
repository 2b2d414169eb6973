package streaming

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

type fakeExec struct{}

func (f *fakeExec) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	if p.Stdout != nil {
		fmt.Fprintf(p.Stdout, "ran %s in %s\n", strings.Join(p.Args, " "), id)
	}
	if p.Stdin != nil {
		b, _ := io.ReadAll(p.Stdin)
		fmt.Fprintf(p.Stdout, "stdin %q\n", b)
	}
	if len(p.Args) > 1 && p.Args[0] == "exit" {
		var code int
		fmt.Sscan(p.Args[1], &code)
		return code, nil
	}
	return 0, nil
}

func TestRequestErrors(t *testing.T) {
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "run", Running: true})
	ctrs.set(Target{ID: "stopped"})
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Exec: &fakeExec{}})
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"exec unknown", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "nope", Cmd: []string{"true"}, Stdout: true})
			return err
		}, errdefs.ErrNotFound},
		{"exec stopped", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "stopped", Cmd: []string{"true"}, Stdout: true})
			return err
		}, errdefs.ErrPrecondition},
		{"exec no command", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "run", Stdout: true})
			return err
		}, errdefs.ErrInvalid},
		{"exec tty and stderr", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "run", Cmd: []string{"sh"}, Tty: true, Stdout: true, Stderr: true})
			return err
		}, errdefs.ErrInvalid},
		{"attach no streams", func() error {
			_, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "run"})
			return err
		}, errdefs.ErrInvalid},
		{"attach unknown", func() error {
			_, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "nope", Stdout: true})
			return err
		}, errdefs.ErrNotFound},
		{"attach no id", func() error {
			_, err := s.Attach(ctx, &runtimeapi.AttachRequest{Stdout: true})
			return err
		}, errdefs.ErrInvalid},
		{"port-forward bad port", func() error {
			_, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "p", Port: []int32{70000}})
			return err
		}, errdefs.ErrInvalid},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestExecThroughServer(t *testing.T) {
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "c1", Running: true})
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Exec: &fakeExec{}})
	ctx := context.Background()

	resp, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"exit", "7"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	st := remoteCommand(t, resp.Url, false, true, true, false)
	readUntil(t, st.stdout, "ran exit 7 in c1\n", 5*time.Second)
	var status struct {
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Details struct {
			Causes []struct{ Reason, Message string } `json:"causes"`
		} `json:"details"`
	}
	raw := st.status(t, 5*time.Second)
	if err := json.Unmarshal([]byte(raw), &status); err != nil {
		t.Fatalf("status %q: %v", raw, err)
	}
	if status.Reason != "NonZeroExitCode" || len(status.Details.Causes) != 1 || status.Details.Causes[0].Message != "7" {
		t.Fatalf("exit code not reported: %s", raw)
	}

	// A token is single-use.
	u := resp.Url
	resp, err = s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"cat"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	st = remoteCommand(t, resp.Url, true, true, false, false)
	io.WriteString(st.stdin, "data")
	st.stdin.Close()
	readUntil(t, st.stdout, `stdin "data"`, 5*time.Second)
	if s := st.status(t, 5*time.Second); s != "" && !strings.Contains(s, "Success") {
		t.Fatalf("status %q", s)
	}
	if r, err := httpGet(u); err == nil && r != 404 {
		t.Fatalf("reused token answered %d", r)
	}
}

func TestAdvertised(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:10":   "127.0.0.1:10",
		"[::]:10":      "[::1]:10",
		"10.1.2.3:443": "10.1.2.3:443",
	} {
		a, _ := net.ResolveTCPAddr("tcp", in)
		if got := advertised(a); got != want {
			t.Errorf("advertised(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestSplitActivationFiles(t *testing.T) {
	mk := func(name string) *os.File {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		defer r.Close()
		// A second *os.File on r's own descriptor would close it again
		// when collected, by then maybe another test's socket.
		fd, err := unix.FcntlInt(r.Fd(), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), name)
		t.Cleanup(func() { f.Close() })
		return f
	}
	stored, rest := SplitActivationFiles([]*os.File{mk("podunit.socket"), mk("podunit-pty-a"), mk("podunit-stdin-b"), mk("LISTEN_FD_6")})
	if len(stored) != 2 || len(rest) != 2 || rest[0].Name() != "podunit.socket" {
		t.Fatalf("stored %v rest %v", stored, rest)
	}
}

func httpGet(u string) (int, error) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
