package ocitest

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
)

func TestFakeLifecycle(t *testing.T) {
	ctx := context.Background()
	f := New("runc")
	if _, err := f.State(ctx, "c1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("state of unknown: %v", err)
	}
	if err := f.Kill(ctx, "c1", syscall.SIGTERM, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("kill unknown: %v", err)
	}
	f.SetState(oci.State{ID: "c1", Pid: 42, Status: oci.StatusRunning})
	if _, err := f.Exec(ctx, "c1", oci.ExecProcess{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, "c1", false); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("delete running: %v", err)
	}
	if err := f.Kill(ctx, "c1", syscall.SIGTERM, true); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.State(ctx, "c1"); s.Status != oci.StatusStopped {
		t.Fatalf("status = %s", s.Status)
	}
	if err := f.Kill(ctx, "c1", syscall.SIGKILL, false); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("kill stopped: %v", err)
	}
	if _, err := f.Exec(ctx, "c1", oci.ExecProcess{}); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("exec in stopped: %v", err)
	}
	if err := f.Delete(ctx, "c1", false); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, "c1", false); err != nil {
		t.Fatalf("delete is not idempotent: %v", err)
	}
	if l, _ := f.List(ctx); len(l) != 0 {
		t.Fatalf("list = %v", l)
	}
	if k := f.Calls("Kill"); len(k) != 3 || k[1].Signal != syscall.SIGTERM || !k[1].All {
		t.Fatalf("kill calls = %+v", k)
	}
	f.SetError("List", errdefs.ErrUnavailable)
	if _, err := f.List(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("scripted error: %v", err)
	}
}

func TestFakeExecFunc(t *testing.T) {
	f := New("crun")
	f.SetState(oci.State{ID: "c", Status: oci.StatusRunning})
	f.ExecFunc = func(_ context.Context, _ string, p oci.ExecProcess) (int, error) {
		_, _ = p.Stdout.Write([]byte("hi"))
		return 3, nil
	}
	res, err := oci.ExecSync(context.Background(), f, "c", oci.ExecProcessSpec(nil, []string{"echo"}, false), 0)
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "hi" {
		t.Fatalf("res = %+v, %v", res, err)
	}
	if argv := f.RunArgv("c", "/b", "/p"); argv[len(argv)-1] != "c" {
		t.Fatalf("argv = %v", argv)
	}
}
