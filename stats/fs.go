package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/podunit/podunit/errdefs"
	"golang.org/x/sys/unix"
)

// DirUsage returns the disk space (allocated blocks) and inodes used below
// dir, counting each inode once (hard links) and staying on dir's
// filesystem. It is what a container's writable layer (the overlay upper
// directory) costs. ErrNotFound if dir does not exist.
func DirUsage(dir string) (bytes, inodes uint64, err error) {
	root, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, fmt.Errorf("%s: %w", dir, errdefs.ErrNotFound)
		}
		return 0, 0, err
	}
	dev := root.Sys().(*syscall.Stat_t).Dev
	seen := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Dev != dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		inodes++
		bytes += uint64(st.Blocks) * 512
		return nil
	})
	return bytes, inodes, err
}

// FSInfo is the capacity of the filesystem holding path.
func FSInfo(path string) (totalBytes, totalInodes, freeInodes uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Blocks * uint64(st.Bsize), st.Files, st.Ffree, nil
}
