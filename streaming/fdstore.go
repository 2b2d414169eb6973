package streaming

import (
	"log/slog"
	"os"
	"strings"

	"github.com/podunit/podunit/fdstore"
)

// Names of the descriptors older podunit versions parked in their fd store
// (containers' stdin FIFOs and terminals). systemd hands them back after a
// restart in LISTEN_FDS/LISTEN_FDNAMES, next to the socket-activation
// sockets.
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

// ReleaseStored drops the stored descriptors from the fd store and closes
// them: attach now writes to the FIFO the container's unit holds, and
// closing alone would not do, systemd would hand them back at every start.
func ReleaseStored(files []*os.File, store FDStore, log *slog.Logger) {
	for _, f := range files {
		if err := store.Remove(f.Name()); err != nil {
			log.Warn("cannot remove a descriptor from systemd's fd store", "name", f.Name(), "err", err)
		}
		f.Close()
	}
}

// FDStore keeps descriptors across restarts of podunit.
type FDStore = fdstore.Store

// NotifyFDStore is systemd's fd store of the service podunit runs in
// (FileDescriptorStoreMax= must be set on podunit.service).
type NotifyFDStore = fdstore.Notify

// adopt is fdstore.Adopt.
var adopt = fdstore.Adopt
