//go:build integration

package streaming

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/test/harness"
)

// fdStoreService is the body of a Type=notify service in the harness: on
// first start it prepares a stdin FIFO (parking the write end in its fd
// store); after a restart it writes through the descriptor systemd gave
// back.
func init() { fdStoreService = runFDStoreService }

func runFDStoreService() int {
	out := os.Getenv("STREAMING_OUT")
	stored, _ := SplitActivationFiles(activation.Files(true))
	stdio := NewStdio(StdioConfig{SocketDir: filepath.Join(out, "sock"), Restored: stored})
	if len(stored) == 0 {
		if _, err := stdio.Prepare(PrepareRequest{ID: "x", Dir: out, Stdin: true}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.WriteFile(filepath.Join(out, "prepared"), nil, 0o644)
	} else {
		w := stdio.stdinWriter("x")
		if w == nil {
			fmt.Fprintln(os.Stderr, "no stdin restored")
			return 1
		}
		fmt.Fprintf(w, "restored-%d\n", os.Getpid())
	}
	daemon.SdNotify(false, daemon.SdNotifyReady)
	select {}
}

func TestFDStoreKeepsStdinAcrossRestart(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "stfd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "svc"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	h := harness.Start(t, harness.Options{Binds: []string{dir}})
	h.MustExec("systemd-run", "--unit=fdtest", "-p", "Type=notify", "-p", "FileDescriptorStoreMax=16",
		"-p", "Restart=always", "-p", "RestartSec=200ms",
		"--setenv=STREAMING_FDSTORE_SERVICE=1", "--setenv=STREAMING_OUT="+dir,
		filepath.Join(dir, "svc"), "-test.run=^$")
	t.Cleanup(func() { h.Exec("systemctl", "stop", "fdtest.service") })
	waitFile(t, filepath.Join(dir, "prepared"))
	// The container's side: the FIFO's reader.
	in, err := OpenStdin(filepath.Join(dir, "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	lines := make(chan string, 4)
	go func() {
		br := bufio.NewReader(in)
		for {
			l, err := br.ReadString('\n')
			if l != "" {
				lines <- l
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	expect := func(how string) {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, "restored-") {
				t.Fatalf("%s: read %q (open %v): the stdin write end was not handed back", how, l, ok)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: nothing written through the restored descriptor\n%s", how, unitJournal(h))
		}
	}
	h.MustExec("systemctl", "restart", "fdtest.service")
	expect("systemctl restart")
	h.MustExec("systemctl", "kill", "--signal=SIGKILL", "fdtest.service")
	expect("crash and Restart=always")
}

func unitJournal(h *harness.Harness) string {
	j, _ := h.Journal("fdtest.service")
	return j
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

// JournalFollower against a real journald: only output written after
// Follow returns, split by priority like the unit wrapper's two streams.
func TestJournalFollower(t *testing.T) {
	h := harness.Start(t, harness.Options{})
	id := "jf1"
	h.MustExec("systemd-run", "--unit=jftest", "-p", "LogExtraFields=CONTAINER_ID="+id,
		"sh", "-c", "echo before; sleep 3; echo after; echo '<3>err-after'; exec sleep 600")
	t.Cleanup(func() { h.Exec("systemctl", "stop", "jftest.service") })
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, _ := h.Journal("jftest.service")
		if strings.Contains(j, "before") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output in the journal:\n%s", j)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errb := &syncBuffer{}, &syncBuffer{}
	wait, err := JournalFollower{Args: []string{"-D", h.JournalDir()}}.Follow(ctx, Target{ID: id}, out, errb)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wait() }()
	for out.String() != "after\n" || errb.String() != "err-after\n" {
		if ctx.Err() != nil {
			t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done

	// A container that has not written anything yet: no cursor.
	h.MustExec("systemd-run", "--unit=jftest2", "-p", "LogExtraFields=CONTAINER_ID=jf2",
		"sh", "-c", "sleep 2; echo first; exec sleep 600")
	t.Cleanup(func() { h.Exec("systemctl", "stop", "jftest2.service") })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	out2 := &syncBuffer{}
	wait, err = JournalFollower{Args: []string{"-D", h.JournalDir()}}.Follow(ctx2, Target{ID: "jf2"}, out2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	go wait()
	for out2.String() != "first\n" {
		if ctx2.Err() != nil {
			t.Fatalf("stdout %q", out2.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A TTY container as podunit runs it: a Type=forking transient unit whose
// ExecStart is `runc run --detach --console-socket`, the master received by
// podunit's Stdio, attach with resize, then a restart from the fd store.
func TestTTYContainerUnitAttach(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "sttu-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	h := harness.Start(t, harness.Options{Binds: []string{dir}})
	bundle := busyboxBundleIn(t, dir, "runc", []string{"sh"}, true)
	store := &memStore{}
	sink := &recSink{}
	stdio := NewStdio(StdioConfig{SocketDir: filepath.Join(dir, "sock"), Store: store, Sink: sink})
	id := "ttyunit"
	setup, err := stdio.Prepare(PrepareRequest{ID: id, TTY: true, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	root := "/run/sttu-runc"
	pid := filepath.Join(dir, "pid")
	h.MustExec("systemd-run", "--unit=ttyctr", "-p", "Type=forking", "-p", "PIDFile="+pid,
		"runc", "--root", root, "run", "--detach", "--pid-file", pid, "--console-socket", setup.ConsoleSocket, "-b", bundle, id)
	t.Cleanup(func() {
		h.Exec("systemctl", "stop", "ttyctr.service")
		h.Exec("runc", "--root", root, "delete", "--force", id)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stdio.Started(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := h.UnitActiveState("ttyctr.service"); st != "active" {
		t.Fatalf("unit %s", st)
	}
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: id, Running: true, TTY: true, Stdin: true})
	for i, s := range []*Stdio{stdio, nil} {
		if s == nil {
			// podunit restarts: the old master is closed, the stored one
			// comes back.
			restored := store.restart()
			stdio.terminal(id).close()
			s = NewStdio(StdioConfig{SocketDir: filepath.Join(dir, "sock"), Store: store, Sink: sink, Restored: restored})
		}
		srv := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Stdio: s})
		resp, err := srv.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Tty: true})
		if err != nil {
			t.Fatal(err)
		}
		st := remoteCommand(t, resp.Url, true, true, false, true)
		st.sendSize(t, 100+i, 30+i)
		time.Sleep(100 * time.Millisecond)
		io.WriteString(st.stdin, "stty size\n")
		readUntil(t, st.stdout, fmt.Sprintf("%d %d", 30+i, 100+i), 10*time.Second)
		st.stdin.Close()
		st.status(t, 10*time.Second)
		srv.Close()
	}
	if st := h.UnitActiveState("ttyctr.service"); st != "active" {
		t.Fatalf("unit %s after attach sessions", st)
	}
	if !strings.Contains(sink.String(), "31 101") {
		t.Fatalf("sink %q", sink.String())
	}
}
