package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ConsoleSocket receives a pty master from runc/crun (--console-socket): the
// runtime connects and sends the fd with SCM_RIGHTS.
type ConsoleSocket struct {
	path string
	l    *net.UnixListener
}

// NewConsoleSocket listens on path (which must not exist).
func NewConsoleSocket(path string) (*ConsoleSocket, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	return &ConsoleSocket{path: path, l: l}, nil
}

// Path is the socket's path, for --console-socket.
func (s *ConsoleSocket) Path() string { return s.path }

// Close stops listening and removes the socket file.
func (s *ConsoleSocket) Close() error { return s.l.Close() }

// ReceiveMaster waits for the runtime's connection and returns the pty master.
func (s *ConsoleSocket) ReceiveMaster(ctx context.Context) (*os.File, error) {
	stop := context.AfterFunc(ctx, func() { _ = s.l.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn, err := s.l.AcceptUnix()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("console socket: %w", ctx.Err())
		}
		return nil, fmt.Errorf("console socket: %w", err)
	}
	defer conn.Close()
	stopConn := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stopConn()
	name := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(name, oob)
	if err != nil {
		return nil, fmt.Errorf("console socket: receive: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("console socket: expected one control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("console socket: expected exactly one fd")
	}
	return os.NewFile(uintptr(fds[0]), string(name[:n])), nil
}

// ResizeConsole sets a pty's window size.
func ResizeConsole(master *os.File, size TerminalSize) error {
	return unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
}
