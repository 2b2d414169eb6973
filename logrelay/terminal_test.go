package logrelay

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/console/consoletest"
	"github.com/podunit/podunit/errdefs"
)

// A tty container's terminal: the relay reads the master (CRI file as
// stdout, journald, tap), hands the master to attach sessions (input and
// resizes reach the slave) and closes it for good on HANGUP.
func TestRelayHoldsATerminal(t *testing.T) {
	s, sock, store := startServer(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "ctr.log")
	master, slave, err := consoletest.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	js, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	journal := os.NewFile(uintptr(js[1]), "journal")
	defer journal.Close()
	if err := RegisterTerminal(sock, "t1", dir, "", LogOptions{Path: logPath, UID: -1, GID: -1}, int(master.Fd()), js[0], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	master.Close()
	unix.Close(js[0])
	if got := store.names(); !slices.Equal(got, []string{"lr.t1.log.f", "lr.t1.out.p", "lr.t1.out.s"}) {
		t.Fatalf("fd store %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, TapErr)); err == nil {
		t.Error("a terminal has no stderr tap")
	}
	tap, err := net.Dial("unix", filepath.Join(dir, TapOut))
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	time.Sleep(50 * time.Millisecond) // the tap accepts asynchronously

	if _, err := slave.WriteString("prompt$ "); err != nil {
		t.Fatal(err)
	}
	if _, err := slave.WriteString("hello\n"); err != nil {
		t.Fatal(err)
	}
	// The line discipline turns \n into \r\n; the tap sees the raw bytes.
	want := "prompt$ hello\r\n"
	got := make([]byte, len(want))
	_ = tap.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(tap, got); err != nil || string(got) != want {
		t.Fatalf("tap %q %v", got, err)
	}
	jr := bufio.NewReader(journal)
	_ = journal.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := jr.ReadString('\n'); err != nil || line != want[:len(want)-1]+"\n" && line != want {
		t.Fatalf("journal %q %v", line, err)
	}

	// Attach: the master from the relay carries input and the size.
	c := Client{Socket: sock}
	m2, err := c.Terminal("t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := console.SetWinSize(m2, 24, 77); err != nil {
		t.Fatal(err)
	}
	var ws *unix.Winsize
	if err := console.Control(slave, func(fd int) error { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); return err }); err != nil || ws.Row != 24 || ws.Col != 77 {
		t.Fatalf("size %+v %v", ws, err)
	}
	if _, err := m2.WriteString("input\n"); err != nil {
		t.Fatal(err)
	}
	in := make([]byte, 64)
	n, err := slave.Read(in)
	if err != nil || string(in[:n]) != "input\n" {
		t.Fatalf("slave read %q %v", in[:n], err)
	}
	// The echo of the input is output too.
	echo := make([]byte, len("input\r\n"))
	if _, err := io.ReadFull(tap, echo); err != nil || string(echo) != "input\r\n" {
		t.Fatalf("echo %q %v", echo, err)
	}
	if _, err := c.Terminal("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("terminal of an unknown container: %v", err)
	}

	// The CRI file has the complete lines as stdout.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), " stdout F prompt$ hello\n") && strings.Contains(string(b), " stdout F input\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRI file %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// stdin_once: HANGUP closes the relay's master; with the session's
	// copy closed the slave is hung up and the stream ends.
	if err := c.Hangup("t1"); err != nil {
		t.Fatal(err)
	}
	m2.Close()
	if err := c.Hangup("t1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second hangup: %v", err)
	}
	if _, err := c.Terminal("t1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("terminal after hangup: %v", err)
	}
	if _, err := slave.WriteString("after\n"); err == nil {
		t.Error("the slave can still be written after the hangup")
	}
	if err := Wait(sock, "t1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s.Active() != 0 || len(store.names()) != 0 {
		t.Fatalf("active %d, fd store %v", s.Active(), store.names())
	}
	if left, _ := filepath.Glob(filepath.Join(s.opts.StateDir, "t1.*")); len(left) != 0 {
		t.Fatalf("state left behind: %v", left)
	}
}

// A restarted relay takes the terminal back from the fd store and goes on
// reading it and handing it to attach sessions; the container's last
// process closing the slave ends the stream.
func TestRestoreResumesATerminal(t *testing.T) {
	dir := t.TempDir()
	master, slave, err := consoletest.Open()
	if err != nil {
		t.Fatal(err)
	}
	js, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	journal := os.NewFile(uintptr(js[1]), "journal")
	defer journal.Close()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "ctr.log")
	// No "tty" in the metadata: the restored descriptor itself is a terminal.
	if err := os.WriteFile(filepath.Join(state, "t2.json"), []byte(`{"uid":-1,"gid":-1,"log_path":"`+logPath+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	slave.WriteString("while no relay ran\n")
	store := &fakeStore{stored: map[string]bool{"lr.t2.out.p": true, "lr.t2.out.s": true}}
	sock := filepath.Join(dir, "s")
	s := New(Options{Socket: sock, StateDir: state, Store: store})
	mfd, err := unix.Dup(int(master.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	master.Close()
	s.Restore([]*os.File{os.NewFile(uintptr(mfd), "lr.t2.out.p"), os.NewFile(uintptr(js[0]), "lr.t2.out.s")})
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(done); _ = s.Serve(ctx, l) }()
	defer func() { cancel(); <-done }()

	m2, err := Client{Socket: sock}.Terminal("t2")
	if err != nil {
		t.Fatal(err)
	}
	m2.WriteString("x\n")
	m2.Close()
	in := make([]byte, 8)
	if n, err := slave.Read(in); err != nil || string(in[:n]) != "x\n" {
		t.Fatalf("slave read %q %v", in[:n], err)
	}
	slave.Close() // the container's last process is gone
	if err := Wait(sock, "t2", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), " stdout F while no relay ran\n") || !strings.Contains(string(b), " stdout F x\n") {
		t.Fatalf("CRI file %q", b)
	}
	if got := store.names(); len(got) != 0 {
		t.Fatalf("fd store still holds %v", got)
	}
}
