package systemd

import (
	"fmt"
	"path"
	"strings"

	"github.com/podunit/podunit/errdefs"
)

// TransientDir is where the system manager keeps transient units' files
// (systemd.unit(5), "Units created using the dynamic API"). systemd writes
// a unit's file there when the unit is created and unlinks it when it
// frees the unit; a reload loads the units back from it.
const TransientDir = "/run/systemd/transient"

// SliceName accepts a cgroup parent as the kubelet sends it with the systemd
// driver, either a bare slice name ("kubepods-pod1.slice") or its path form
// ("/kubepods.slice/kubepods-pod1.slice"), and returns the leaf slice name.
// Anything else is ErrInvalid, so a hostile parent never reaches systemd.
func SliceName(parent string) (string, error) {
	if parent == "" {
		return "", fmt.Errorf("empty cgroup parent: %w", errdefs.ErrInvalid)
	}
	p := parent
	if strings.HasPrefix(p, "/") {
		if path.Clean(p) != p {
			return "", fmt.Errorf("cgroup parent %q is not a clean path: %w", parent, errdefs.ErrInvalid)
		}
		elems := strings.Split(strings.TrimPrefix(p, "/"), "/")
		for _, e := range elems {
			if err := validSlice(e); err != nil {
				return "", fmt.Errorf("cgroup parent %q: %w", parent, err)
			}
		}
		p = elems[len(elems)-1]
		// systemd derives a slice's parents from its name; a path whose
		// hierarchy disagrees with the leaf's name is not what it claims.
		if want := SlicePath(p); want != parent && len(elems) > 1 {
			return "", fmt.Errorf("cgroup parent %q does not match slice hierarchy %q: %w", parent, want, errdefs.ErrInvalid)
		}
		return p, nil
	}
	if err := validSlice(p); err != nil {
		return "", fmt.Errorf("cgroup parent %q: %w", parent, err)
	}
	return p, nil
}

func validSlice(name string) error {
	if !strings.HasSuffix(name, ".slice") {
		return fmt.Errorf("%q is not a slice name: %w", name, errdefs.ErrInvalid)
	}
	base := strings.TrimSuffix(name, ".slice")
	if base == "" {
		return fmt.Errorf("%q is not a slice name: %w", name, errdefs.ErrInvalid)
	}
	if base == "-" {
		return nil // the root slice
	}
	if strings.HasPrefix(base, "-") || strings.HasSuffix(base, "-") || strings.Contains(base, "--") {
		return fmt.Errorf("%q is not a valid slice name: %w", name, errdefs.ErrInvalid)
	}
	if len(name) > 255 {
		return fmt.Errorf("slice name too long: %w", errdefs.ErrInvalid)
	}
	for _, r := range base {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == ':' || r == '_' || r == '.' || r == '-' || r == '\\'
		if !ok {
			return fmt.Errorf("%q contains %q, not allowed in a unit name: %w", name, r, errdefs.ErrInvalid)
		}
	}
	return nil
}

// SlicePath expands a slice name into the cgroup path systemd gives it:
// "a-b-c.slice" lives at "/a.slice/a-b.slice/a-b-c.slice".
func SlicePath(slice string) string {
	base := strings.TrimSuffix(slice, ".slice")
	if base == "-" || base == "" {
		return "/"
	}
	var b strings.Builder
	parts := strings.Split(base, "-")
	for i := range parts {
		b.WriteString("/")
		b.WriteString(strings.Join(parts[:i+1], "-"))
		b.WriteString(".slice")
	}
	return b.String()
}

// UnitCgroupPath is the cgroup path of unit in slice:
// "/a.slice/a-b.slice/u.service" for unit "u.service" in "a-b.slice".
func UnitCgroupPath(slice, unit string) string {
	return path.Join(SlicePath(slice), unit)
}
