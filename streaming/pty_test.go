package streaming

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSetWinSize(t *testing.T) {
	m, s, err := openPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer s.Close()
	if err := setWinSize(m, WinSize{Width: 120, Height: 33}); err != nil {
		t.Fatal(err)
	}
	var ws *unix.Winsize
	control(s, func(fd int) error { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); return err })
	if err != nil || ws.Col != 120 || ws.Row != 33 {
		t.Fatalf("size %+v %v", ws, err)
	}
}

// openPTY returns a new pseudo-terminal pair, the master non-blocking as
// the exec helper's is.
func openPTY() (master, slave *os.File, retErr error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	defer func() {
		if retErr != nil {
			master.Close()
		}
	}()
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(int(n))
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	return master, os.NewFile(uintptr(sfd), name), nil
}
