package streaming

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/fdstore"
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
type FDStore = fdstore.Store

// NotifyFDStore is systemd's fd store of the service podunit runs in
// (FileDescriptorStoreMax= must be set on podunit.service).
type NotifyFDStore = fdstore.Notify

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
