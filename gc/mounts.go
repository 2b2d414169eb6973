package gc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mounts collects mount points under Root (namespace pins, shm tmpfs,
// rootfs mounts) whose owner — the path element OwnerDepth levels below
// Root, e.g. the sandbox or container ID — is not known.
type Mounts struct {
	Root      string
	Known     func(owner string) bool
	MountInfo string // defaults to /proc/self/mountinfo
	// MinAge spares owners whose directory changed more recently: an
	// object being created right now has mounts before it has a record.
	MinAge time.Duration
}

func (m Mounts) Name() string { return "mounts:" + m.Root }

func (m Mounts) Collect(ctx context.Context, dryRun bool) ([]string, error) {
	info := m.MountInfo
	if info == "" {
		info = "/proc/self/mountinfo"
	}
	points, err := MountPointsUnder(info, m.Root)
	if err != nil {
		return nil, err
	}
	// Deepest first, so nested mounts go before their parents.
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var out []string
	var errs []error
	for _, p := range points {
		rel, _ := filepath.Rel(m.Root, p)
		owner := strings.Split(rel, string(filepath.Separator))[0]
		if owner == "." || m.Known(owner) || young(filepath.Join(m.Root, owner), m.MinAge) {
			continue
		}
		out = append(out, p)
		if dryRun {
			continue
		}
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return out, errors.Join(errs...)
}

// MountPointsUnder lists mount points strictly below root from a
// mountinfo file.
func MountPointsUnder(mountinfo, root string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	root = filepath.Clean(root) + "/"
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if strings.HasPrefix(p, root) {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Dirs collects entries of Dir (bundles, state dirs) whose name is not a
// known owner. Mounts below them must have been collected first.
type Dirs struct {
	Dir   string
	Known func(name string) bool
	// MinAge spares entries changed more recently (see Mounts.MinAge).
	MinAge time.Duration
}

func (d Dirs) Name() string { return "dirs:" + d.Dir }

func (d Dirs) Collect(ctx context.Context, dryRun bool) ([]string, error) {
	entries, err := os.ReadDir(d.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(d.Dir, name)
		if young(p, d.MinAge) {
			continue
		}
		if strings.HasPrefix(name, ".") {
			// Hidden entries are not records, except the temp files of
			// a statefile.Write that a crash cut short: nothing renames
			// them any more.
			if !isStateTemp(name) {
				continue
			}
		} else if d.Known(strings.TrimSuffix(name, ".json")) {
			continue
		}
		if pts, err := MountPointsUnder("/proc/self/mountinfo", p); err != nil || len(pts) > 0 {
			// os.RemoveAll would descend into the mount: a container's
			// root filesystem, or the host's own files behind a clone
			// made for a bidirectional mount.
			errs = append(errs, fmt.Errorf("%s: not removed, mounts below it: %q %v", p, pts, err))
			continue
		}
		out = append(out, p)
		if !dryRun {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return out, errors.Join(errs...)
}

// isStateTemp matches statefile.Write's temp names, "."+base+".tmp-"+random.
func isStateTemp(name string) bool {
	i := strings.Index(name, ".tmp-")
	return i > 1 && name[0] == '.'
}

// young reports whether p changed within age (a missing p is not young).
func young(p string, age time.Duration) bool {
	if age <= 0 {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && time.Since(fi.ModTime()) < age
}
