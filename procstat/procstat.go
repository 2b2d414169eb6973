// Package procstat parses /proc/<pid>/stat, the one place podunit reads
// a process's state, parent and start time from.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podunit/podunit/rawfile"
)

// Stat is the part of /proc/<pid>/stat podunit uses. Field numbers are
// those of proc(5).
type Stat struct {
	PID   int
	Comm  string // field 2, without its parentheses
	State byte   // field 3: R, S, D, Z, X, ...
	PPID  int    // field 4
	UTime uint64 // field 14, clock ticks
	STime uint64 // field 15, clock ticks
	// Start (field 22) is in clock ticks since boot: with the PID it
	// identifies a process, since a recycled PID cannot share it.
	Start uint64
}

// ErrMalformed is wrapped by Parse for a line that is not a stat line.
var ErrMalformed = errors.New("malformed /proc/<pid>/stat")

// Read reads and parses the stat of pid under procRoot ("/proc" unless
// a test or another PID namespace's /proc says otherwise).
func Read(procRoot string, pid int) (Stat, error) {
	b, err := rawfile.Read(filepath.Join(procRoot, strconv.Itoa(pid), "stat"), statMax)
	if err != nil {
		return Stat{}, err
	}
	return Parse(b)
}

// statMax bounds a stat line: 52 fields of at most 20 digits and a
// 16-byte comm.
const statMax = 2048

// Parse parses "pid (comm) state ppid ...". comm is chosen by the process
// and may hold spaces and parentheses, so it ends at the last ')'.
func Parse(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, ErrMalformed
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: pid: %w", ErrMalformed, err)
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3, so field n is f[n-3]; starttime (22) is the last used.
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, ErrMalformed
	}
	s := Stat{PID: pid, Comm: string(b[open+1 : end]), State: f[0][0]}
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("%w: ppid: %w", ErrMalformed, err)
	}
	for _, u := range []struct {
		dst *uint64
		i   int
	}{{&s.UTime, 11}, {&s.STime, 12}, {&s.Start, 19}} {
		if *u.dst, err = strconv.ParseUint(f[u.i], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("%w: field %d: %w", ErrMalformed, u.i+3, err)
		}
	}
	return s, nil
}

// Exited reports whether the process has ended: a zombie whose parent has
// not collected it yet is as gone as one that is being reaped.
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }
