// Package unitcgroup finds the processes of a systemd unit from its
// cgroup directory: the log relay looks for a live process of a container's
// unit to send its output as, and the exit recorder kills what is left of
// a container.
package unitcgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Dir is the directory of the unit's cgroup (unitPath, e.g.
// "/a.slice/u.service") under root where it exists: the unified hierarchy
// on v2, systemd's named hierarchy on v1 and hybrid, else hybrid's
// unified one. "" when none has it.
func Dir(root, unitPath string) string {
	if unitPath == "" {
		return ""
	}
	for _, c := range []string{
		filepath.Join(root, unitPath),
		filepath.Join(root, "systemd", unitPath),
		filepath.Join(root, "unified", unitPath),
	} {
		if _, err := os.Stat(filepath.Join(c, "cgroup.procs")); err == nil {
			return c
		}
	}
	return ""
}

// EachPID calls fn for every process in dir's cgroup and its descendants
// (the container's own cgroup lies below the unit's) until fn returns
// false.
func EachPID(dir string, fn func(pid int) bool) {
	if dir == "" {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !fn(pid) {
				return filepath.SkipAll
			}
		}
		return nil
	})
}
