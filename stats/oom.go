package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/podunit/podunit/errdefs"
)

// OOMCount returns how many OOM kills the cgroup at path saw, with
// underOOM set when a v1 cgroup is frozen in OOM (oom_kill_disable) or the
// kernel is too old to count kills.
//
// v2's memory.events counts the whole subtree. v1 counts a kill only in the
// victim's own memory cgroup, which is runc's container cgroup below the
// unit, so the v1 subtree is summed.
func (r *Reader) OOMCount(path string) (kills uint64, underOOM bool, err error) {
	if err := checkPath(path); err != nil {
		return 0, false, err
	}
	if r.v2Root != "" {
		dir := filepath.Join(r.v2Root, path)
		if err := exists(dir); err != nil {
			return 0, false, err
		}
		ev, err := optionalKeyed(filepath.Join(dir, "memory.events"))
		if err != nil {
			return 0, false, err
		}
		return ev["oom_kill"], false, nil
	}
	dir := r.v1Dir("memory", path)
	if dir == "" {
		return 0, false, fmt.Errorf("no v1 memory hierarchy: %w", errdefs.ErrUnavailable)
	}
	if err := exists(dir); err != nil {
		return 0, false, err
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		oc, err := optionalKeyed(filepath.Join(p, "memory.oom_control"))
		if err != nil {
			return err
		}
		k, under := V1OOM(oc)
		kills += k
		underOOM = underOOM || under
		return nil
	})
	return kills, underOOM, err
}

// V1OOM interprets a parsed memory.oom_control: the oom_kill counter
// (kernel 4.13+) and under_oom, which on older kernels is the only sign.
func V1OOM(oc map[string]uint64) (kills uint64, underOOM bool) {
	return oc["oom_kill"], oc["under_oom"] == 1
}

// OOMKilled reports whether the cgroup at path saw an OOM kill. It must be
// asked while the cgroup still exists: systemd removes a unit's cgroup when
// the unit stops, so the natural caller is the unit's ExecStopPost helper
// (it runs in the unit's cgroup) or the stop path before the unit is
// collected. On v2, Result=oom-kill gives the same answer from systemd.
func (r *Reader) OOMKilled(path string) (bool, error) {
	k, under, err := r.OOMCount(path)
	return k > 0 || under, err
}

var (
	hostOnce   sync.Once
	hostReader *Reader
	hostErr    error
)

// Host returns a Reader for this host's cgroup layout, detected once.
func Host() (*Reader, error) {
	hostOnce.Do(func() { hostReader, hostErr = NewReader() })
	return hostReader, hostErr
}

// OOMKilled is Reader.OOMKilled on the host's hierarchy.
func OOMKilled(cgroupPath string) (bool, error) {
	r, err := Host()
	if err != nil {
		return false, err
	}
	return r.OOMKilled(cgroupPath)
}
