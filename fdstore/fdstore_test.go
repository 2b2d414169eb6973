package fdstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	sock := filepath.Join(t.TempDir(), "notify")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
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
