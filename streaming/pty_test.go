package streaming

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestPTYRawAndSize(t *testing.T) {
	m, s, err := openPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer s.Close()
	if err := setRaw(s); err != nil {
		t.Fatal(err)
	}
	var tio *unix.Termios
	control(s, func(fd int) error { tio, err = unix.IoctlGetTermios(fd, unix.TCGETS); return err })
	if err != nil || tio.Oflag&unix.OPOST != 0 || tio.Lflag&unix.ECHO != 0 {
		t.Fatalf("slave not raw: %+v %v", tio, err)
	}
	if err := setWinSize(m, WinSize{Width: 120, Height: 33}); err != nil {
		t.Fatal(err)
	}
	var ws *unix.Winsize
	control(s, func(fd int) error { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); return err })
	if err != nil || ws.Col != 120 || ws.Row != 33 {
		t.Fatalf("size %+v %v", ws, err)
	}
}
