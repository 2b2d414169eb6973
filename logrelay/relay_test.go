package logrelay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type fakeStore struct {
	mu     sync.Mutex
	stored map[string]bool
	log    []string
}

func (f *fakeStore) Store(name string, _ *os.File) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stored[name] = true
	f.log = append(f.log, "store "+name)
	return nil
}

func (f *fakeStore) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.stored, name)
	f.log = append(f.log, "remove "+name)
	return nil
}

func (f *fakeStore) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n []string
	for k := range f.stored {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

func startServer(t *testing.T) (*Server, string, *fakeStore) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "relay.sock")
	store := &fakeStore{stored: map[string]bool{}}
	s := New(Options{Socket: sock, StateDir: filepath.Join(dir, "state"), Store: store})
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, sock, store
}

// container is what the unit's wrapper sets up: two pipes whose write
// ends the container gets, and two "journald" stream connections (here
// socket pairs whose far ends the test reads).
type container struct {
	outW, errW         *os.File
	journOut, journErr *os.File
}

func newContainer(t *testing.T, sock, id, tapDir string) *container {
	t.Helper()
	var outP, errP [2]int
	if err := unix.Pipe2(outP[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Pipe2(errP[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	outS, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	errS, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Register(sock, id, tapDir, "", LogOptions{UID: -1, GID: -1}, outP[0], outS[0], errP[0], errS[0], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{outP[0], outS[0], errP[0], errS[0]} {
		unix.Close(fd)
	}
	c := &container{
		outW: os.NewFile(uintptr(outP[1]), "out-w"), errW: os.NewFile(uintptr(errP[1]), "err-w"),
		journOut: os.NewFile(uintptr(outS[1]), "journal-out"), journErr: os.NewFile(uintptr(errS[1]), "journal-err"),
	}
	t.Cleanup(func() { c.outW.Close(); c.errW.Close(); c.journOut.Close(); c.journErr.Close() })
	return c
}

func TestRelayMovesBothStreamsAndWaitSeesTheEnd(t *testing.T) {
	s, sock, store := startServer(t)
	c := newContainer(t, sock, "c1", "")
	if got := store.names(); !slices.Equal(got, []string{"lr.c1.err.p", "lr.c1.err.s", "lr.c1.out.p", "lr.c1.out.s"}) {
		t.Fatalf("fd store %v", got)
	}
	if err := Wait(sock, "c1", 100*time.Millisecond); err == nil || errors.Is(err, ErrUnknown) {
		t.Fatalf("wait while the container runs: %v, want a timeout", err)
	}
	c.outW.WriteString("hello\n")
	c.errW.WriteString("oops\n")
	c.outW.Close()
	c.errW.Close()
	out, _ := io.ReadAll(c.journOut)
	errb, _ := io.ReadAll(c.journErr)
	if string(out) != "hello\n" || string(errb) != "oops\n" {
		t.Fatalf("journal got %q / %q", out, errb)
	}
	if err := Wait(sock, "c1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s.Active() != 0 {
		t.Fatalf("%d containers still active", s.Active())
	}
	if got := store.names(); len(got) != 0 {
		t.Fatalf("fd store still holds %v", got)
	}
	if err := Wait(sock, "nope", time.Second); !errors.Is(err, ErrUnknown) {
		t.Fatalf("wait for an unknown container: %v", err)
	}
}

// More than the socket buffer holds, read slowly: the relay waits for
// the socket (not for the pipe) while its queue has room, and what
// journald gets is in order.
func TestRelaySlowJournaldGetsOrderedBytes(t *testing.T) {
	_, sock, _ := startServer(t)
	c := newContainer(t, sock, "big", "")
	data := make([]byte, 2<<20)
	rand.Read(data)
	go func() {
		c.outW.Write(data)
		c.outW.Close()
		c.errW.Close()
	}()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := c.journOut.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
		if got.Len() < 1<<20 {
			time.Sleep(time.Millisecond) // a slow journald at first
		}
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("got %d bytes, want %d identical", got.Len(), len(data))
	}
	if err := Wait(sock, "big", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A relay that restarts gets the pipes and streams back from systemd's
// fd store (here: the same descriptors by name) and goes on, losing
// nothing that was still in the pipe.
func TestRestoreResumesStoredStreams(t *testing.T) {
	dir := t.TempDir()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := os.NewFile(uintptr(p[1]), "w")
	journal := os.NewFile(uintptr(sp[1]), "journal")
	defer journal.Close()
	w.WriteString("written while no relay ran\n")
	stray, _, _ := os.Pipe()
	store := &fakeStore{stored: map[string]bool{"lr.r1.out.p": true, "lr.r1.out.s": true}}
	s := New(Options{Socket: filepath.Join(dir, "s"), StateDir: dir, Store: store})
	s.Restore([]*os.File{os.NewFile(uintptr(p[0]), "lr.r1.out.p"), os.NewFile(uintptr(sp[0]), "lr.r1.out.s"), stray})
	if s.Active() != 1 {
		t.Fatalf("active %d", s.Active())
	}
	w.WriteString("and after\n")
	w.Close()
	got, _ := io.ReadAll(journal)
	if string(got) != "written while no relay ran\nand after\n" {
		t.Fatalf("journal got %q", got)
	}
	if r := s.wait(context.Background(), "r1", 5*time.Second, 0, false); r != replyDone {
		t.Fatalf("wait: %s", r)
	}
	if n := store.names(); len(n) != 0 {
		t.Fatalf("fd store still holds %v", n)
	}
}

func TestTapSeesOutputByteForByte(t *testing.T) {
	_, sock, _ := startServer(t)
	tapDir := t.TempDir()
	c := newContainer(t, sock, "tapped", tapDir)
	var tc net.Conn
	var err error
	for i := 0; i < 100; i++ {
		if tc, err = net.Dial("unix", filepath.Join(tapDir, "tap-out.sock")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	time.Sleep(50 * time.Millisecond) // the relay accepted the session
	c.outW.WriteString("prompt> ")
	buf := make([]byte, 64)
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := tc.Read(buf)
	if err != nil || string(buf[:n]) != "prompt> " {
		t.Fatalf("tap got %q %v", buf[:n], err)
	}
	jb := make([]byte, 64)
	n, _ = c.journOut.Read(jb)
	if string(jb[:n]) != "prompt> " {
		t.Fatalf("journal got %q", jb[:n])
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	s, sock, store := startServer(t)
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	fd := int(r.Fd())
	for _, tc := range []struct{ msg, want string }{
		{"REGISTER ../x\n", "bad container id"},
		{"REGISTER ok2\n", "want 4 descriptors"},
		{"HELLO", "unknown request"},
		{"WAIT x -5", "bad WAIT"},
		{" \nx", "empty request"},
	} {
		reply, err := call(sock, tc.msg, unix.UnixRights(fd), 2*time.Second)
		if err != nil || !strings.Contains(reply, tc.want) {
			t.Errorf("%q: %q %v, want %q", tc.msg, reply, err, tc.want)
		}
	}
	if reply, _ := call(sock, "REGISTER ok1\nrelative/dir", unix.UnixRights(fd, fd, fd, fd), 2*time.Second); !strings.Contains(reply, "clean absolute path") {
		t.Errorf("relative tap dir: %q", reply)
	}
	if s.Active() != 0 || len(store.names()) != 0 {
		t.Fatalf("bad requests changed state: active %d, store %v", s.Active(), store.names())
	}
	if err := Register(sock, "a b", "", "", LogOptions{}, 0, 0, 0, 0, time.Second); err == nil {
		t.Fatal("client accepted a bad id")
	}
	// A second relay on the same socket is refused.
	if _, err := Listen(sock); err == nil {
		t.Fatal("second listener on a live relay socket")
	}
}

func TestParseFDName(t *testing.T) {
	for name, ok := range map[string]bool{
		"lr.abc.out.p": true, "lr.a.b.c.err.s": true, "lr.abc.in.p": false, "lr.abc.out.x": false,
		"podunit-stdin-x": false, "lr..out.p": false,
	} {
		if _, _, _, got := parseFDName(name); got != ok {
			t.Errorf("parseFDName(%q) ok=%v", name, got)
		}
	}
	id, st, k, _ := parseFDName(fdName("a.b", "err", "s"))
	if id != "a.b" || st != "err" || k != "s" {
		t.Fatalf("round trip: %q %q %q", id, st, k)
	}
}

// journald takes the unit from the sender's PID: every chunk goes out as
// a live process of the container's unit, and when that one is gone, as
// the process waiting for the drain.
func TestSendsAsTheUnitsProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("naming another PID in SCM_CREDENTIALS needs root")
	}
	first, second := exec.Command("sleep", "30"), exec.Command("sleep", "30")
	for _, c := range []*exec.Cmd{first, second} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Process.Kill()
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	if err := unix.SetsockoptInt(sp[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(sp[1], true)
	sender := os.NewFile(uintptr(sp[1]), "sender")
	defer sender.Close()
	rc, _ := sender.SyscallConn()
	var waiter atomic.Int32
	waiter.Store(int32(second.Process.Pid))
	a := &anchor{pid: int32(first.Process.Pid), waiter: &waiter}
	recvPID := func() int32 {
		buf, oob := make([]byte, 16), make([]byte, unix.CmsgSpace(unix.SizeofUcred))
		_, oobn, _, _, err := unix.Recvmsg(sp[0], buf, oob, 0)
		if err != nil {
			t.Fatal(err)
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		if len(msgs) != 1 {
			t.Fatalf("no credentials")
		}
		cred, err := unix.ParseUnixCredentials(&msgs[0])
		if err != nil {
			t.Fatal(err)
		}
		return cred.Pid
	}
	if err := sendAs(rc, []byte("a"), a); err != nil {
		t.Fatal(err)
	}
	if got := recvPID(); got != int32(first.Process.Pid) {
		t.Fatalf("sent as %d, want %d", got, first.Process.Pid)
	}
	first.Process.Kill()
	first.Wait()
	if err := sendAs(rc, []byte("b"), a); err != nil {
		t.Fatal(err)
	}
	if got := recvPID(); got != int32(second.Process.Pid) {
		t.Fatalf("after the first exited: sent as %d, want the waiter %d", got, second.Process.Pid)
	}
}

func TestStatsCountsWriteFailures(t *testing.T) {
	s, sock, _ := startServer(t)
	cl := Client{Socket: sock}
	s.stats.writeFailed(&os.PathError{Op: "write", Path: "0.log", Err: unix.ENOSPC})
	s.stats.writeFailed(unix.EDQUOT)
	s.stats.writeFailed(unix.EIO)
	s.stats.failing.Add(1)
	st, err := cl.Stats(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stats{FailingStreams: 1, NoSpaceErrors: 2, OtherErrors: 1}) {
		t.Fatalf("stats %+v", st)
	}
}
