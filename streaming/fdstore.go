package streaming

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

// Names of the descriptors podunit parks in its own fd store. systemd
// hands them back after a restart in LISTEN_FDS/LISTEN_FDNAMES, next to
// the socket-activation sockets.
const (
	fdPrefix      = "podunit-"
	stdinFDPrefix = fdPrefix + "stdin-"
	ptyFDPrefix   = fdPrefix + "pty-"
)

// IsStoredFD reports whether an fd name from LISTEN_FDNAMES belongs to
// streaming (a container's stdin or terminal) rather than to a socket.
func IsStoredFD(name string) bool {
	return strings.HasPrefix(name, stdinFDPrefix) || strings.HasPrefix(name, ptyFDPrefix)
}

// SplitActivationFiles separates the files of activation.Files (whose
// Name() is the fd name) into streaming's stored descriptors and the
// rest (sockets for the CRI listener).
func SplitActivationFiles(files []*os.File) (stored, rest []*os.File) {
	for _, f := range files {
		if IsStoredFD(f.Name()) {
			stored = append(stored, f)
		} else {
			rest = append(rest, f)
		}
	}
	return stored, rest
}

// FDStore keeps descriptors across restarts of podunit.
type FDStore interface {
	Store(name string, f *os.File) error
	Remove(name string) error
}

// NotifyFDStore is systemd's fd store of the service podunit runs in,
// reached through $NOTIFY_SOCKET (FileDescriptorStoreMax= must be set on
// podunit.service). go-systemd's SdNotify cannot pass descriptors, hence
// this small sender.
type NotifyFDStore struct {
	// Socket overrides $NOTIFY_SOCKET (tests).
	Socket string
}

// Store sends FDSTORE=1 with FDPOLL=0: systemd must not drop a FIFO whose
// reader has not opened it yet, or a terminal whose container has exited
// but not been removed; Remove drops them explicitly.
func (s NotifyFDStore) Store(name string, f *os.File) error {
	var ferr error
	err := control(f, func(fd int) error {
		ferr = s.send("FDSTORE=1\nFDPOLL=0\nFDNAME="+name, []int{fd})
		return nil
	})
	if err != nil {
		return err
	}
	return ferr
}

func (s NotifyFDStore) Remove(name string) error {
	return s.send("FDSTOREREMOVE=1\nFDNAME="+name, nil)
}

func (s NotifyFDStore) send(state string, fds []int) error {
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

// adopt re-wraps a descriptor (from systemd or a console socket) as a
// non-blocking file served by the runtime poller, so reads and writes can
// be interrupted by Close.
func adopt(f *os.File, name string) (*os.File, error) {
	var nfd int
	err := control(f, func(fd int) error {
		var err error
		nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		return err
	})
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("non-blocking %s: %w", name, err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}
