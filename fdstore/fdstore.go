// Package fdstore speaks sd_notify where descriptors travel with the
// message: it parks descriptors in systemd's file descriptor store of the
// service the process runs in (FDSTORE=1, needs FileDescriptorStoreMax=
// on the unit; systemd hands them back after a restart in
// LISTEN_FDS/LISTEN_FDNAMES), and it names a service's main process
// (MAINPID=) with a barrier (BARRIER=1 and a pipe) that returns only once
// systemd has processed it. go-systemd's SdNotify cannot pass descriptors,
// hence this small sender.
package fdstore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

// Store keeps named descriptors across restarts.
type Store interface {
	Store(name string, f *os.File) error
	Remove(name string) error
}

// Notify is the fd store of the calling service, reached through
// $NOTIFY_SOCKET.
type Notify struct {
	// Socket overrides $NOTIFY_SOCKET (tests).
	Socket string
}

// Store sends FDSTORE=1 with FDPOLL=0: systemd must not drop a descriptor
// on POLLHUP (a FIFO whose reader has not opened it yet, a pipe whose
// writers are gone but which still holds data); Remove drops it.
func (s Notify) Store(name string, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("fd store %s: %w", name, err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = s.StoreFD(name, int(fd)) }); err != nil {
		return fmt.Errorf("fd store %s: %w", name, err)
	}
	return serr
}

// StoreFD is Store for a raw descriptor.
func (s Notify) StoreFD(name string, fd int) error {
	if !ValidName(name) {
		return fmt.Errorf("fd store: bad name %q: %w", name, errdefs.ErrInvalid)
	}
	return s.send("FDSTORE=1\nFDPOLL=0\nFDNAME="+name, []int{fd})
}

// Remove drops every stored descriptor of that name.
func (s Notify) Remove(name string) error {
	if !ValidName(name) {
		return fmt.Errorf("fd store: bad name %q: %w", name, errdefs.ErrInvalid)
	}
	return s.send("FDSTOREREMOVE=1\nFDNAME="+name, nil)
}

// ValidName is systemd's rule for FDNAME= (fdname_is_valid): at most 255
// printable ASCII characters, no colon (LISTEN_FDNAMES separator).
func ValidName(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for _, c := range []byte(name) {
		if c < 0x20 || c > 0x7e || c == ':' {
			return false
		}
	}
	return true
}

// MainPID makes pid the main process of the calling service (MAINPID=;
// accepted from the main or, with NotifyAccess=exec, a control process)
// and returns once systemd has processed the message, at most timeout:
// when it returns nil, an exit of pid is the main process's exit.
func (s Notify) MainPID(pid int, timeout time.Duration) error {
	if pid <= 1 {
		return fmt.Errorf("main pid %d: %w", pid, errdefs.ErrInvalid)
	}
	if err := s.send(fmt.Sprintf("MAINPID=%d", pid), nil); err != nil {
		return err
	}
	return s.barrier(timeout)
}

// barrier is sd_notify_barrier: systemd processes notifications in order
// and closes the pipe's write end sent with BARRIER=1 when it gets there,
// so the read end's hang-up says every earlier message was processed.
// (A systemd older than 246 closes it unread, at once.)
func (s Notify) barrier(timeout time.Duration) error {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("sd_notify barrier: %w", err)
	}
	defer unix.Close(p[0])
	err := s.send("BARRIER=1", []int{p[1]})
	unix.Close(p[1])
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("sd_notify barrier: systemd did not answer within %s: %w", timeout, errdefs.ErrUnavailable)
		}
		// POLLHUP is reported whatever the requested events.
		fds := []unix.PollFd{{Fd: int32(p[0])}}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sd_notify barrier: %w", err)
		}
		if n > 0 && fds[0].Revents&unix.POLLHUP != 0 {
			return nil
		}
	}
}

// Available says whether there is a notify socket to speak to: the
// service has NotifyAccess= (or Type=notify), or Socket is set.
func (s Notify) Available() bool { return s.path() != "" }

func (s Notify) path() string {
	if s.Socket != "" {
		return s.Socket
	}
	return os.Getenv("NOTIFY_SOCKET")
}

func (s Notify) send(state string, fds []int) error {
	path := s.path()
	if path == "" {
		return fmt.Errorf("no NOTIFY_SOCKET: not running under systemd: %w", errdefs.ErrUnavailable)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer unix.Close(fd)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	// SockaddrUnix maps a leading '@' to the abstract namespace.
	if err := unix.Sendmsg(fd, []byte(state), oob, &unix.SockaddrUnix{Name: path}, 0); err != nil {
		return fmt.Errorf("sd_notify %q: %w", strings.SplitN(state, "\n", 2)[0], err)
	}
	return nil
}

// Adopt re-wraps a descriptor (from systemd's store, a console socket, a
// received message) as a non-blocking file served by Go's poller, so reads
// and writes wait without a thread and can be interrupted by Close. f is
// closed; Fd() cannot be used instead, it would make the file blocking.
func Adopt(f *os.File, name string) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3) }); err != nil {
		derr = err
	}
	f.Close()
	if derr != nil {
		return nil, fmt.Errorf("dup %s: %w", name, derr)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("non-blocking %s: %w", name, err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}
