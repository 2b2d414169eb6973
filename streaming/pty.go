package streaming

import (
	"os"

	"golang.org/x/sys/unix"
)

// setWinSize sets a terminal's size; on a master the kernel signals
// SIGWINCH to the foreground process group of the slave.
func setWinSize(f *os.File, s WinSize) error {
	return control(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: s.Height, Col: s.Width})
	})
}

// control runs fn on f's descriptor without f.Fd(), which would switch a
// pollable file to blocking mode.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
