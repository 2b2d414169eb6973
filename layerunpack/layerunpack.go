// Package layerunpack applies image layers for go.podman.io/storage's
// overlay driver inside this process. Storage confines an unpack with a
// chroot, and gets one by re-executing the whole daemon binary per layer
// (chrootarchive, "storage-untar"); that child took 63–75 ms per layer of
// the bench's image, about half of it starting the binary. Here the same
// chroot is taken by one OS thread only, so a layer costs no process.
package layerunpack

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	_ "unsafe" // go:linkname, see overlayUntar

	// Linked for overlayUntar; the store registers the driver anyway.
	_ "go.podman.io/storage/drivers/overlay"
	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/idtools"
	"go.podman.io/storage/pkg/unshare"
	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/isothread"
)

// overlayUntar is the overlay driver's package variable through which it
// applies every layer (overlay.go: `var untar = chrootarchive.UntarUncompressed`,
// its tests swap it the same way). Storage offers no option for it. Should
// a storage update rename it, the link fails and the build with it; should
// it stop calling it, TestOverlayAppliesLayersInProcess fails.
//
//go:linkname overlayUntar go.podman.io/storage/drivers/overlay.untar
var overlayUntar func(io.Reader, string, *archive.TarOptions) error

var (
	installOnce sync.Once
	// unpacked counts layers applied here, for the test that proves the
	// overlay driver calls Untar.
	unpacked atomic.Int64
)

// Install makes the overlay driver apply layers with Untar. Call it before
// the first layer is stored (imagestore does, before opening storage).
func Install() {
	installOnce.Do(func() {
		// Cached here, while /proc is this process's: the driver and
		// archive.Unpack ask it, and in the chroot there is no /proc.
		_ = unshare.IsRootless()
		overlayUntar = Untar
	})
}

// Untar is chrootarchive.UntarUncompressed without the re-execution: it
// unpacks the uncompressed layer tar r into dest with storage's own
// archive.Unpack, on a thread whose root is dest, so neither a path nor a
// symlink in the layer can reach outside it.
func Untar(r io.Reader, dest string, opts *archive.TarOptions) error {
	if r == nil {
		return errors.New("unpacking layer: empty archive")
	}
	if opts == nil {
		opts = &archive.TarOptions{InUserNS: unshare.IsRootless()}
	}
	dest = filepath.Clean(dest)
	root := idtools.NewIDMappingsFromMaps(opts.UIDMaps, opts.GIDMaps).RootPair()
	if err := idtools.MkdirAllAndChownNew(dest, 0o755, root); err != nil {
		return fmt.Errorf("unpacking layer: %w", err)
	}
	err := inRoot(dest, func() error { return archive.Unpack(r, "/", opts) })
	// Read to the end as chrootarchive's child does: storage digests the
	// whole stream, the zero padding after the tar's end included; after a
	// failure, a producer at the other end of a pipe must not block.
	if _, derr := io.Copy(io.Discard, r); err == nil && derr != nil {
		err = derr
	}
	if err != nil {
		return fmt.Errorf("unpacking layer into %s: %w", dest, err)
	}
	unpacked.Add(1)
	return nil
}

// inRoot runs fn on an OS thread of its own whose root and working
// directory are root; the rest of the process keeps its root. fn must do
// its file system work on the calling goroutine: a goroutine it starts
// runs elsewhere, outside the chroot.
func inRoot(root string, fn func() error) error {
	return isothread.Run(func() error {
		if err := unix.Chroot(root); err != nil {
			return fmt.Errorf("chroot %s: %w", root, err)
		}
		if err := unix.Chdir("/"); err != nil {
			return fmt.Errorf("chdir / in %s: %w", root, err)
		}
		return fn()
	})
}
