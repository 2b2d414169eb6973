package layerunpack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// PruneStaging removes the overlay driver's staging directories under
// graphRoot that no process holds: layers a Differ unpacked for a pull
// that died with its process before storing them. Storage prunes them
// only when it shuts down cleanly. A directory whose lock another
// process holds (a tool sharing the store, staging now) is left alone.
// Call it before this process stages anything: POSIX locks are the
// process's, so it would not see its own.
func PruneStaging(graphRoot string) error {
	dir := filepath.Join(graphRoot, "overlay", "staging")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing staged layers: %w", err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		// The lock the overlay driver takes on every staging directory
		// (storage's staging_lockfile: an fcntl write lock on
		// staging.lock).
		f, err := os.OpenFile(filepath.Join(p, "staging.lock"), os.O_RDWR, 0)
		if err == nil {
			lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
			err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
			if err != nil {
				_ = f.Close()
				continue // held: in use
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if rerr := os.RemoveAll(p); rerr != nil {
			errs = append(errs, fmt.Errorf("removing staged layer %s: %w", p, rerr))
		}
		if f != nil {
			_ = f.Close()
		}
	}
	return errors.Join(errs...)
}
