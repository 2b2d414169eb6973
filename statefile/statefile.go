// Package statefile stores small JSON state files so that a crash at any
// point leaves either the old or the new content on disk, never a torn file.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/podunit/podunit/errdefs"
)

// ErrNotFound is returned (wrapped) by Read when the file does not exist.
var ErrNotFound = errdefs.ErrNotFound

// Write encodes v as JSON and replaces path atomically: temp file in the same
// directory, fsync, rename, fsync of the directory so the rename itself is
// durable. Parent directories are created (0700).
func Write(path string, v any) (retErr error) {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode state %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("state temp file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if retErr != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write state %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync state %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close state %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("commit state %s: %w", path, err)
	}
	return syncDir(dir)
}

// Read decodes the JSON in path into v. A missing file is ErrNotFound.
func Read(path string, v any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("read state %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode state %s: %w", path, err)
	}
	return nil
}

// Remove deletes path durably; a missing file is not an error.
func Remove(path string) error {
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove state %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// Move renames oldpath (a file or a whole directory) to newpath durably:
// one rename(2), atomic, so a crash leaves it at exactly one of the two
// places, then an fsync of the new parent and, when it differs, the old
// one, so the move survives a power loss once Move returns. Both must be
// on one filesystem (a cross-device move is an error, never a copy);
// newpath's parent must exist and newpath must not (a directory there that
// is empty would be replaced). A missing oldpath is ErrNotFound.
func Move(oldpath, newpath string) error {
	err := os.Rename(oldpath, newpath)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(oldpath); errors.Is(serr, fs.ErrNotExist) {
			return fmt.Errorf("move state %s: %w", oldpath, ErrNotFound)
		}
	}
	if err != nil {
		return fmt.Errorf("move state %s: %w", oldpath, err)
	}
	if err := syncDir(filepath.Dir(newpath)); err != nil {
		return err
	}
	if filepath.Dir(oldpath) != filepath.Dir(newpath) {
		return syncDir(filepath.Dir(oldpath))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open state dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state dir %s: %w", dir, err)
	}
	return nil
}
