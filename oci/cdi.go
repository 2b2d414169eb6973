package oci

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/podunit/podunit/errdefs"
)

// CDIRegistry is the node's CDI devices (Container Device Interface,
// tags.cncf.io/container-device-interface): the spec files vendors and
// device plugins put in the configured directories.
type CDIRegistry struct {
	cache *cdi.Cache
}

// NewCDIRegistry reads the spec files in dirs (a later directory's device
// overrides an earlier one's of the same name). It starts no watcher:
// a watcher's refresh arrives asynchronously, so a spec file written just
// before a CreateContainer could still be missed; Refresh, called in the
// request, cannot miss it.
func NewCDIRegistry(dirs []string) (*CDIRegistry, error) {
	if len(dirs) == 0 {
		// The library would fall back to its own defaults.
		return nil, fmt.Errorf("cdi registry: no spec directories: %w", errdefs.ErrInvalid)
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("cdi registry: %w", err)
	}
	return &CDIRegistry{cache: c}, nil
}

// Refresh re-reads the spec directories. Its error names spec files that
// failed to load or define a device twice: those devices are unknown until
// the files are fixed, while every other device still resolves, so the
// caller logs it and goes on (as containerd does).
func (r *CDIRegistry) Refresh() error {
	if r.cache.Refresh() != nil {
		// The library's errors do not name their files; GetErrors has them
		// by file.
		return fmt.Errorf("cdi spec files: %w", r.specErrors())
	}
	return nil
}

// InjectDevices applies the named devices' edits, and the common edits of
// their spec files, to s: device nodes with their device cgroup rules,
// mounts, environment, hooks, additional groups. An unknown device, or
// edits that cannot be applied (a device node the host lacks), is
// ErrInvalid; the message lists the spec files that failed to load, the
// usual reason a device is unknown.
//
// The library stats device nodes whose type or numbers the spec leaves
// out, so this is the one host read inside spec generation: splitting it
// out would mean re-implementing CDI's edits.
func (r *CDIRegistry) InjectDevices(s *specs.Spec, names ...string) error {
	unresolved, err := r.cache.InjectDevices(s, names...)
	if err == nil {
		return nil
	}
	if len(unresolved) > 0 {
		err = fmt.Errorf("cdi devices: %w: unknown device %s (spec dirs %s)", errdefs.ErrInvalid,
			strings.Join(unresolved, ", "), strings.Join(r.cache.GetSpecDirectories(), ", "))
		if se := r.specErrors(); se != nil {
			err = fmt.Errorf("%w; spec files with errors: %w", err, se)
		}
		return err
	}
	return fmt.Errorf("cdi devices %s: %w: %w", strings.Join(names, ", "), errdefs.ErrInvalid, err)
}

// specErrors are the last refresh's errors, each prefixed with its file,
// sorted by file; nil without any.
func (r *CDIRegistry) specErrors() error {
	byFile := r.cache.GetErrors()
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(byFile)) {
		for _, e := range byFile[path] {
			errs = append(errs, fmt.Errorf("%s: %w", path, e))
		}
	}
	return errors.Join(errs...)
}
