package fdstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"lr.abc.out.p": true, "": false, "a:b": false, "a\nb": false,
		strings.Repeat("x", 255): true, strings.Repeat("x", 256): false,
	} {
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v", name, got)
		}
	}
}

// What systemd receives: the state text and the descriptor.
func TestStoreAndRemoveMessages(t *testing.T) {
	sock, fd := notifySocket(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	s := Notify{Socket: sock}
	if err := s.Store("p1", r); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 256), make([]byte, 64)
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "FDSTORE=1\nFDPOLL=0\nFDNAME=p1" {
		t.Fatalf("state %q", got)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %v %v", msgs, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights %v %v", fds, err)
	}
	// The received descriptor is the same pipe.
	got := os.NewFile(uintptr(fds[0]), "got")
	defer got.Close()
	w.WriteString("x")
	b := make([]byte, 1)
	if _, err := got.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("read through stored fd: %q %v", b, err)
	}
	if err := s.Remove("p1"); err != nil {
		t.Fatal(err)
	}
	n, _, _, _, _ = unix.Recvmsg(fd, buf, oob, 0)
	if got := string(buf[:n]); got != "FDSTOREREMOVE=1\nFDNAME=p1" {
		t.Fatalf("state %q", got)
	}
	if err := s.Store("a:b", r); err == nil {
		t.Fatal("name with a colon accepted")
	}
	if err := (Notify{}).Remove("x"); os.Getenv("NOTIFY_SOCKET") == "" && !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("without NOTIFY_SOCKET: %v, want ErrUnavailable", err)
	}
}

// Available follows the same socket as the messages: Socket, else
// $NOTIFY_SOCKET.
func TestAvailable(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if (Notify{}).Available() {
		t.Error("available without a socket")
	}
	if !(Notify{Socket: "/x"}).Available() {
		t.Error("Socket set but not available")
	}
	t.Setenv("NOTIFY_SOCKET", "@sd")
	if !(Notify{}).Available() {
		t.Error("$NOTIFY_SOCKET set but not available")
	}
}

// MainPID returns only once "systemd" closed the barrier's pipe: until
// then an exit of the new main PID could be seen before the message.
func TestMainPIDWaitsForTheBarrier(t *testing.T) {
	sock, fd := notifySocket(t)
	processed := make(chan string, 2)
	var closedAt atomic.Int64 // unix nanoseconds
	go func() {
		buf, oob := make([]byte, 256), make([]byte, 64)
		for i := 0; i < 2; i++ {
			n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			if err != nil {
				processed <- "recv: " + err.Error()
				return
			}
			msg := string(buf[:n])
			if oobn > 0 {
				msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
				fds, _ := unix.ParseUnixRights(&msgs[0])
				time.Sleep(50 * time.Millisecond)
				closedAt.Store(time.Now().UnixNano())
				for _, f := range fds {
					unix.Close(f)
				}
				msg += " +fd"
			}
			processed <- msg
		}
	}()
	if err := (Notify{Socket: sock}).MainPID(1234, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := closedAt.Load(); c == 0 || time.Now().UnixNano() < c {
		t.Fatal("MainPID returned before the barrier's pipe was closed")
	}
	if got := <-processed; got != "MAINPID=1234" {
		t.Errorf("first message %q", got)
	}
	if got := <-processed; got != "BARRIER=1 +fd" {
		t.Errorf("second message %q", got)
	}
}

// A systemd that never gets to the barrier: MainPID gives up.
func TestMainPIDBarrierTimeout(t *testing.T) {
	sock, _ := notifySocket(t)
	err := (Notify{Socket: sock}).MainPID(1234, 100*time.Millisecond)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if err := (Notify{Socket: sock}).MainPID(1, time.Second); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("pid 1: got %v", err)
	}
}

// notifySocket is a datagram socket bound where a service's
// $NOTIFY_SOCKET would point, closed at the test's end.
func notifySocket(t *testing.T) (path string, fd int) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	return path, fd
}
