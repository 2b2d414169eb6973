package oci

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// ResolveUser computes the container's identity from the security context and
// the image's User, looking names and group memberships up in the rootfs's
// /etc/passwd and /etc/group. Paths are resolved inside rootfs, so an image
// whose /etc/passwd is a symlink to the host's cannot leak host accounts.
//
// Supplemental groups: the primary GID, then (policy Merge) the groups the
// image's /etc/group lists the user in, then the requested ones.
func ResolveUser(rootfs string, sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) (*User, error) {
	if err := validateRunAs(sc); err != nil {
		return nil, err
	}
	users, err := readColonFile(rootfs, "/etc/passwd", 7)
	if err != nil {
		return nil, err
	}
	groups, err := readColonFile(rootfs, "/etc/group", 4)
	if err != nil {
		return nil, err
	}
	var userSpec, groupSpec string
	switch {
	case sc.GetRunAsUser() != nil:
		userSpec = strconv.FormatInt(sc.GetRunAsUser().GetValue(), 10)
	case sc.GetRunAsUsername() != "":
		userSpec = sc.GetRunAsUsername()
	default:
		userSpec, groupSpec, _ = strings.Cut(imageUser, ":")
	}
	if userSpec == "" {
		userSpec = "0"
	}

	u := &User{}
	if id, ok := parseID(userSpec); ok {
		u.UID = id
		if e := findEntry(users, 2, userSpec); e != nil {
			u.Username = e[0]
			u.GID, _ = parseID(e[3])
		}
	} else {
		e := findEntry(users, 0, userSpec)
		if e == nil {
			return nil, fmt.Errorf("user %q: %w: not found in the image's /etc/passwd", userSpec, errdefs.ErrInvalid)
		}
		var ok1, ok2 bool
		u.UID, ok1 = parseID(e[2])
		u.GID, ok2 = parseID(e[3])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("user %q: %w: malformed /etc/passwd entry", userSpec, errdefs.ErrInvalid)
		}
		u.Username = e[0]
	}

	switch {
	case sc.GetRunAsGroup() != nil:
		u.GID = uint32(sc.GetRunAsGroup().GetValue())
	case groupSpec != "":
		if id, ok := parseID(groupSpec); ok {
			u.GID = id
		} else if e := findEntry(groups, 0, groupSpec); e != nil {
			if u.GID, ok = parseID(e[2]); !ok {
				return nil, fmt.Errorf("group %q: %w: malformed /etc/group entry", groupSpec, errdefs.ErrInvalid)
			}
		} else {
			return nil, fmt.Errorf("group %q: %w: not found in the image's /etc/group", groupSpec, errdefs.ErrInvalid)
		}
	}

	gids := []uint32{u.GID}
	if sc.GetSupplementalGroupsPolicy() == runtimeapi.SupplementalGroupsPolicy_Merge && u.Username != "" {
		for _, g := range groups {
			if slices.Contains(strings.Split(g[3], ","), u.Username) {
				if id, ok := parseID(g[2]); ok {
					gids = append(gids, id)
				}
			}
		}
	}
	for _, g := range sc.GetSupplementalGroups() {
		gids = append(gids, uint32(g))
	}
	slices.Sort(gids)
	u.AdditionalGids = slices.Compact(gids)
	return u, nil
}

func parseID(s string) (uint32, bool) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v > maxID {
		return 0, false
	}
	return uint32(v), true
}

func findEntry(entries [][]string, field int, v string) []string {
	for _, e := range entries {
		if e[field] == v {
			return e
		}
	}
	return nil
}

// readColonFile parses a passwd/group style file inside rootfs; a missing file
// is empty (scratch images have none), malformed lines are skipped like libc
// does.
func readColonFile(rootfs, name string, fields int) ([][]string, error) {
	f, err := OpenInRoot(rootfs, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s in %s: %w", name, rootfs, err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, 16<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ":")
		if len(parts) < fields {
			continue
		}
		out = append(out, parts[:fields])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s in %s: %w", name, rootfs, err)
	}
	return out, nil
}

// OpenInRoot opens name for reading with every path component, symlinks
// included, resolved as if rootfs were "/": openat2(RESOLVE_IN_ROOT), or
// filepath-securejoin on kernels without openat2.
func OpenInRoot(rootfs, name string) (*os.File, error) {
	dirfd, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rootfs, Err: err}
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat2(dirfd, strings.TrimPrefix(filepath.Clean("/"+name), "/"), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	var f *os.File
	switch {
	case errors.Is(err, unix.ENOSYS):
		p, jerr := securejoin.SecureJoin(rootfs, name)
		if jerr != nil {
			return nil, jerr
		}
		if f, err = os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: filepath.Join(rootfs, name), Err: err}
	default:
		f = os.NewFile(uintptr(fd), filepath.Join(rootfs, name))
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	// A FIFO or device planted as /etc/passwd would block or read the host.
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: f.Name(), Err: fmt.Errorf("%w: not a regular file", errdefs.ErrInvalid)}
	}
	return f, nil
}
