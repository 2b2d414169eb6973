package console

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console/consoletest"
)

func TestSetWinSize(t *testing.T) {
	m, s, err := consoletest.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer s.Close()
	if err := SetWinSize(m, 33, 120); err != nil {
		t.Fatal(err)
	}
	var ws *unix.Winsize
	if err := Control(s, func(fd int) error { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); return err }); err != nil || ws.Col != 120 || ws.Row != 33 {
		t.Fatalf("size %+v %v", ws, err)
	}
}

// A master sent over the console socket arrives as a working terminal:
// what is written to the slave is read from the received master.
func TestReceiveMaster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil { // a stale file is replaced
		t.Fatal(err)
	}
	lis, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", st, err)
	}
	m, s, err := consoletest.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return
		}
		defer c.Close()
		_ = Send(c, "master", m)
		m.Close()
	}()
	got, err := ReceiveMaster(lis)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if _, err := s.WriteString("hi\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := got.Read(buf)
	if err != nil || string(buf[:n]) != "hi\r\n" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
}

func TestRecvWithoutDescriptor(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := net.FileConn(os.NewFile(uintptr(fds[0]), "a"))
	b, _ := net.FileConn(os.NewFile(uintptr(fds[1]), "b"))
	defer a.Close()
	defer b.Close()
	if _, err := a.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, f, err := Recv(b.(*net.UnixConn), "x"); err == nil || f != nil {
		t.Fatalf("no descriptor: %v %v", f, err)
	}
}

// One receiver serves every descriptor count: the relay's REGISTER sends
// four, a terminal one.
func TestRecvFDs(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := net.FileConn(os.NewFile(uintptr(fds[0]), "a"))
	b, _ := net.FileConn(os.NewFile(uintptr(fds[1]), "b"))
	defer a.Close()
	defer b.Close()
	var sent []int
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		sent = append(sent, int(r.Fd()))
	}
	if _, _, err := a.(*net.UnixConn).WriteMsgUnix([]byte("REGISTER x"), unix.UnixRights(sent...), nil); err != nil {
		t.Fatal(err)
	}
	msg, got, err := RecvFDs(b.(*net.UnixConn), 8)
	if err != nil || string(msg) != "REGISTER x" || len(got) != 3 {
		t.Fatalf("got %q %v %v", msg, got, err)
	}
	for _, fd := range got {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("fd %d: flags %#x %v (want close-on-exec)", fd, flags, err)
		}
		unix.Close(fd)
	}
	// Recv keeps the first and closes the rest.
	if _, _, err := a.(*net.UnixConn).WriteMsgUnix([]byte("pty"), unix.UnixRights(sent...), nil); err != nil {
		t.Fatal(err)
	}
	msgS, f, err := Recv(b.(*net.UnixConn), "first")
	if err != nil || msgS != "pty" || f == nil {
		t.Fatalf("Recv: %q %v %v", msgS, f, err)
	}
	f.Close()
}
