package streaming

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

// A TTY container started with podunit's console socket: attach, resize,
// then a podunit "restart" that gets the master back from the fd store.
func TestAttachTTYAcrossRestart(t *testing.T) {
	store := &memStore{}
	sink := &recSink{}
	stdio1 := NewStdio(StdioConfig{SocketDir: t.TempDir(), Store: store, Sink: sink})
	bundle := busyboxBundle(t, "runc", []string{"sh"}, true)
	id := "tty1"
	setup, err := stdio1.Prepare(PrepareRequest{ID: id, TTY: true, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if setup.ConsoleSocket == "" || setup.StdinPath != "" {
		t.Fatalf("setup %+v", setup)
	}
	rt, rid := runcRun(t, bundle, []string{"--console-socket", setup.ConsoleSocket}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stdio1.Started(ctx, id); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(store.entries(), "store podunit-pty-"+id) {
		t.Fatalf("terminal not parked: %q", store.entries())
	}
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: id, Running: true, TTY: true, Stdin: true, RuntimeCmd: rt})

	attach := func(s *Server, cmd, want string) {
		t.Helper()
		resp, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Tty: true})
		if err != nil {
			t.Fatal(err)
		}
		st := remoteCommand(t, resp.Url, true, true, false, true)
		st.sendSize(t, 91, 31)
		time.Sleep(100 * time.Millisecond)
		if _, err := io.WriteString(st.stdin, cmd); err != nil {
			t.Fatal(err)
		}
		readUntil(t, st.stdout, want, 10*time.Second)
		st.stdin.Close()
		if s := st.status(t, 10*time.Second); s != "" && !strings.Contains(s, "Success") {
			t.Fatalf("status %q", s)
		}
	}
	s1 := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Stdio: stdio1})
	attach(s1, "stty size\n", "31 91")
	if !strings.Contains(sink.String(), "31 91") {
		t.Fatalf("terminal output did not reach the log sink: %q", sink.String())
	}

	// podunit dies: its copy of the master goes away, the store keeps one.
	restored := store.restart()
	stdio1.terminal(id).close()
	s1.Close()
	sink2 := &recSink{}
	stdio2 := NewStdio(StdioConfig{SocketDir: t.TempDir(), Store: store, Sink: sink2, Restored: restored})
	s2 := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Stdio: stdio2})
	attach(s2, "echo again-$MARK\n", "again-from-spec")
	if !strings.Contains(sink2.String(), "again-from-spec") {
		t.Fatalf("restored terminal output did not reach the sink: %q", sink2.String())
	}

	if got := runcStatus(rt, rid); got != "running" {
		t.Fatalf("container %s after attach sessions", got)
	}
	// Releasing the last master hangs the terminal up (the shell gets
	// SIGHUP): that is for removal only.
	stdio2.Release(id)
	if !slices.Contains(store.entries(), "remove podunit-pty-"+id) {
		t.Fatalf("release did not drop the stored terminal: %q", store.entries())
	}
}

// pipeOutput is an OutputSource fed by the container's stdout pipe; one
// reader goroutine hands chunks to whichever session follows.
type pipeOutput struct {
	r    *os.File
	once sync.Once
	c    chan []byte
}

func (p *pipeOutput) Follow(ctx context.Context, _ Target, stdout, _ io.Writer) (func() error, error) {
	p.once.Do(func() {
		p.c = make(chan []byte)
		go func() {
			defer close(p.c)
			for {
				b := make([]byte, 4096)
				n, err := p.r.Read(b)
				if n > 0 {
					p.c <- b[:n]
				}
				if err != nil {
					return
				}
			}
		}()
	})
	return func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case b, ok := <-p.c:
				if !ok {
					return nil
				}
				stdout.Write(b)
			}
		}
	}, nil
}

// A non-TTY stdin_once container: attach input goes through the FIFO,
// the end of the first session closes the container's stdin.
func TestAttachStdinOnceFIFO(t *testing.T) {
	store := &memStore{}
	stdio := NewStdio(StdioConfig{SocketDir: t.TempDir(), Store: store})
	id := "fifo1"
	setup, err := stdio.Prepare(PrepareRequest{ID: id, Dir: t.TempDir(), Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if setup.StdinPath == "" || setup.ConsoleSocket != "" {
		t.Fatalf("setup %+v", setup)
	}
	in, err := OpenStdin(setup.StdinPath)
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	bundle := busyboxBundle(t, "runc", []string{"sh"}, false)
	rt, rid := runcRun(t, bundle, nil, in, outW)
	in.Close()
	outW.Close()

	ctrs := &fakeContainers{}
	tgt := Target{ID: id, Running: true, Stdin: true, StdinOnce: true, RuntimeCmd: rt}
	ctrs.set(tgt)
	go func() {
		// The fake container manager notices the exit.
		for runcStatus(rt, rid) == "running" {
			time.Sleep(100 * time.Millisecond)
		}
		tgt.Running = false
		ctrs.set(tgt)
	}()
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Stdio: stdio, Output: &pipeOutput{r: outR}})
	ctx := context.Background()
	resp, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	st := remoteCommand(t, resp.Url, true, true, true, false)
	io.WriteString(st.stdin, "echo hello\n")
	if got := readUntil(t, st.stdout, "hello\n", 10*time.Second); got != "hello\n" {
		t.Fatalf("stdout %q", got)
	}
	// The container still runs: its stdin stays open between writes.
	if got := runcStatus(rt, rid); got != "running" {
		t.Fatalf("container %s before stdin closed", got)
	}
	st.stdin.Close()
	if s := st.status(t, 20*time.Second); s != "" && !strings.Contains(s, "Success") {
		t.Fatalf("status %q", s)
	}
	if got := runcStatus(rt, rid); got == "running" {
		t.Fatal("stdin_once: the shell did not see EOF")
	}
	if !slices.Contains(store.entries(), "remove podunit-stdin-"+id) {
		t.Fatalf("closed stdin still parked: %q", store.entries())
	}
	// The fake manager polls runc: give it time to notice the exit.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if tg, _ := ctrs.StreamTarget(ctx, id); !tg.Running {
			break
		}
	}
	if _, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true}); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("attach to a stopped container: %v, want FailedPrecondition", err)
	}
}

// The unit's wrapper opened the FIFO read-write itself (no Prepare):
// input still arrives, and a session ends with the client's stdin even
// for stdin_once, since nothing can close the container's stdin.
func TestAttachUnheldFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "stdin")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	rt, rid := runcRun(t, busyboxBundle(t, "runc", []string{"sh"}, false), nil, in, outW)
	in.Close()
	outW.Close()
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "unheld", Running: true, Stdin: true, StdinOnce: true, StdinPath: fifo, RuntimeCmd: rt})
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Stdio: NewStdio(StdioConfig{Store: &memStore{}}), Output: &pipeOutput{r: outR}})
	for i, word := range []string{"one", "two"} {
		resp, err := s.Attach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "unheld", Stdin: true, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		st := remoteCommand(t, resp.Url, true, true, false, false)
		io.WriteString(st.stdin, "echo "+word+"\n")
		readUntil(t, st.stdout, word+"\n", 10*time.Second)
		st.stdin.Close()
		st.status(t, 10*time.Second)
		if got := runcStatus(rt, rid); got != "running" {
			t.Fatalf("session %d: container %s", i, got)
		}
	}
}
