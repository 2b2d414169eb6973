// Package console is podunit's one pseudo-terminal stack: the console
// socket on which runc and crun hand over a terminal's master
// (`--console-socket`), passing a master (or any descriptors: the log
// relay's requests too) between processes, and the master's size.
// Terminal execs (package oci) and tty containers (the unit's wrapper,
// package stdio, and the node's log relay) use it.
//
// The runtime makes the terminal inside the container (it opens the
// container's /dev/ptmx, makes the slave the process's controlling
// terminal and its stdin, stdout and stderr) and sends the master over
// the socket: the process gets a real controlling terminal, so ^C through
// the line discipline is SIGINT to its foreground process group.
package console

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Listen binds a console socket at path (mode 0600; a stale socket there
// is replaced) for the runtime to send a master to.
func Listen(path string) (*net.UnixListener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	return l, nil
}

// ReceiveMaster accepts one connection on a console socket and returns
// the descriptor the runtime sent with SCM_RIGHTS (close-on-exec, in
// blocking mode as received).
func ReceiveMaster(lis *net.UnixListener) (*os.File, error) {
	conn, err := lis.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_, f, err := Recv(conn, "pty-master")
	return f, err
}

// Send writes msg with f's descriptor attached (SCM_RIGHTS) on c.
func Send(c *net.UnixConn, msg string, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		_, _, serr = c.WriteMsgUnix([]byte(msg), unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return serr
}

// Recv reads one message from c and the one descriptor sent with it,
// named name; extra descriptors are closed. A message without one is an
// error.
func Recv(c *net.UnixConn, name string) (string, *os.File, error) {
	msg, fds, err := RecvFDs(c, 4)
	if err != nil {
		return "", nil, err
	}
	if len(fds) == 0 {
		return string(msg), nil, errors.New("no descriptor in the message")
	}
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	return string(msg), os.NewFile(uintptr(fds[0]), name), nil
}

// RecvFDs reads one message (at most 4 KiB) from c and the descriptors
// sent with it (SCM_RIGHTS), close-on-exec (Go's ReadMsgUnix asks for
// MSG_CMSG_CLOEXEC); the caller owns them. Room is
// made for max descriptors: the kernel closes any beyond that.
func RecvFDs(c *net.UnixConn, max int) (msg []byte, fds []int, err error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(max*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("control message: %w", err)
		}
		for i := range msgs {
			if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	return buf[:n], fds, nil
}

// WinSize is a terminal size in characters.
type WinSize struct{ Width, Height uint16 }

// SetWinSize sets a terminal's size; on a master the kernel signals
// SIGWINCH to the foreground process group of the slave.
func SetWinSize(f *os.File, rows, cols uint16) error {
	return Control(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

// Control runs fn on f's descriptor without f.Fd(), which would switch a
// pollable file to blocking mode.
func Control(f *os.File, fn func(fd int) error) error {
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
