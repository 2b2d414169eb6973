package stats

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// FSInfo is the capacity of the filesystem holding path.
func FSInfo(path string) (totalBytes, totalInodes, freeInodes uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Blocks * uint64(st.Bsize), st.Files, st.Ffree, nil
}
