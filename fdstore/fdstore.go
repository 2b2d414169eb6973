// Package fdstore parks descriptors in systemd's file descriptor store of
// the service the process runs in (sd_notify FDSTORE=1, needs
// FileDescriptorStoreMax= on the unit). systemd hands them back after a
// restart in LISTEN_FDS/LISTEN_FDNAMES. go-systemd's SdNotify cannot pass
// descriptors, hence this small sender.
package fdstore

import (
	"fmt"
	"os"
	"strings"

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

func (s Notify) send(state string, fds []int) error {
	path := s.Socket
	if path == "" {
		path = os.Getenv("NOTIFY_SOCKET")
	}
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
