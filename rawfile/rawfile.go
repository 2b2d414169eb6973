// Package rawfile reads small files with plain system calls, for the
// reads on a status call's path. os.Open also registers every descriptor
// with the runtime's poller (fcntl, epoll_ctl) and fstats it: on
// /proc/<pid>/stat and a bundle's config.json that doubled the cost of
// the read (container.BenchmarkVerboseStatus).
package rawfile

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// ErrTooLarge is returned for a file longer than the caller's limit.
var ErrTooLarge = errors.New("file larger than expected")

// Read returns the contents of path, at most limit bytes; a longer file is
// ErrTooLarge rather than truncated. Errors are *fs.PathError, so
// errors.Is(err, fs.ErrNotExist) works as with os.ReadFile.
func Read(path string, limit int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, min(limit+1, 4096))
	n := 0
	for {
		if n == len(buf) {
			if n > limit {
				return nil, &fs.PathError{Op: "read", Path: path, Err: ErrTooLarge}
			}
			buf = append(buf, make([]byte, min(len(buf), limit+1-len(buf)))...)
		}
		m, err := unix.Read(fd, buf[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case m == 0:
			return buf[:n], nil
		}
		n += m
		if n > limit {
			return nil, &fs.PathError{Op: "read", Path: path, Err: ErrTooLarge}
		}
	}
}
