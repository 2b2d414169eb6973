package streaming

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/console/consoletest"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/logrelay"
)

// fakeTerminals plays the log relay: it holds one master, hands out
// copies and records hangups.
type fakeTerminals struct {
	mu      sync.Mutex
	master  *os.File
	hangups int
}

func (f *fakeTerminals) Terminal(id string) (*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.master == nil || id != "tty" {
		return nil, fmt.Errorf("no terminal: %w", errdefs.ErrNotFound)
	}
	var nfd int
	if err := console.Control(f.master, func(fd int) error {
		var err error
		nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		return err
	}); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), "pty"), nil
}

func (f *fakeTerminals) Hangup(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.master == nil || id != "tty" {
		return fmt.Errorf("no terminal: %w", errdefs.ErrNotFound)
	}
	f.hangups++
	f.master.Close()
	f.master = nil
	return nil
}

// Attach to a tty container: output (echo included) from the relay's
// stdout tap, input and resizes through the master; with stdin_once the
// end of the client's stdin hangs the terminal up, after which attach is
// FailedPrecondition.
func TestAttachTerminal(t *testing.T) {
	master, slave, err := consoletest.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	dir := t.TempDir()
	tap := logrelay.NewTap(filepath.Join(dir, logrelay.TapOut))
	defer tap.Close()
	relayed := make(chan struct{})
	go func() { // the relay: the master's output to the tap
		defer close(relayed)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			if n > 0 {
				tap.Send(b[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	terms := &fakeTerminals{master: master}
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "tty", Running: true, Stdin: true, StdinOnce: true, TTY: true, TapDir: dir})
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Terminals: terms})
	resp, err := s.Attach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "tty", Stdin: true, Stdout: true, Tty: true})
	if err != nil {
		t.Fatal(err)
	}
	st := remoteCommand(t, resp.Url, true, true, false, true)
	if _, err := io.WriteString(st.resize, `{"Width":81,"Height":27}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ws *unix.Winsize
		_ = console.Control(slave, func(fd int) error { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); return err })
		if ws != nil && ws.Col == 81 && ws.Row == 27 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal size %+v", ws)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the tap takes the session in
	io.WriteString(st.stdin, "typed\n")
	in := make([]byte, 64)
	if n, err := slave.Read(in); err != nil || string(in[:n]) != "typed\n" {
		t.Fatalf("container read %q %v", in[:n], err)
	}
	slave.WriteString("answer\n")
	readUntil(t, st.stdout, "typed\r\nanswer\r\n", 5*time.Second)

	st.stdin.Close()
	if msg := st.status(t, 10*time.Second); !strings.Contains(msg, "Success") {
		t.Fatalf("session status %q", msg)
	}
	terms.mu.Lock()
	hangups := terms.hangups
	terms.mu.Unlock()
	if hangups != 1 {
		t.Fatalf("%d hangups, want 1 (stdin_once)", hangups)
	}
	select {
	case <-relayed: // the master is closed: the relay's read ended
	case <-time.After(5 * time.Second):
		t.Fatal("the relay's master is still open after the hangup")
	}
	if _, err := slave.WriteString("x"); err == nil {
		t.Error("the container's terminal is still writable after the hangup")
	}

	resp, err = s.Attach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "tty", Stdin: true, Stdout: true, Tty: true})
	if err != nil {
		t.Fatal(err)
	}
	st = remoteCommand(t, resp.Url, true, true, false, true)
	if msg := st.status(t, 10*time.Second); !strings.Contains(msg, "terminal is closed") {
		t.Fatalf("attach after the hangup: %q", msg)
	}
}
