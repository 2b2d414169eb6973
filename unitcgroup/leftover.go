package unitcgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// RemoveLeftover removes the directory path (a unit's or a slice's cgroup
// path, e.g. "/a.slice/u.service") and the empty directories below it from
// every cgroup v1 hierarchy under root but systemd's own. Call it once the
// unit is gone.
//
// Why: on v1 systemd creates and deletes a unit's directory only in the
// hierarchies of the controllers it manages (and its named one). The OCI
// runtime, given a cgroups path below the unit, creates it in every mounted
// hierarchy (cpuset, freezer, net_cls, …), parents included, and on delete
// removes only its own leaf: without this every container would leave its
// unit's directory behind in those. On the unified hierarchy (v2) systemd
// removes the unit's whole subtree itself, so there is nothing to do.
//
// A directory that does not exist is fine; one that still holds a process
// (rmdir: EBUSY) is left and reported.
func RemoveLeftover(root, path string) error {
	clean := filepath.Clean("/" + path)
	if path == "" || clean == "/" || clean != path {
		return fmt.Errorf("cgroup path %q: not a unit's path", path)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", root, err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return nil
	}
	hiers, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("cgroup hierarchies: %w", err)
	}
	var errs []error
	for _, h := range hiers {
		// Symlinks (cpu -> cpu,cpuacct) name a hierarchy listed anyway.
		if !h.IsDir() || h.Name() == "systemd" || h.Name() == "unified" {
			continue
		}
		if err := removeTree(filepath.Join(root, h.Name(), clean)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeTree removes dir and the directories below it, deepest first
// (rmdir is the only way to delete a cgroup; its control files go with it).
func removeTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
	}
	return nil
}
