package oci

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/podunit/podunit/errdefs"
)

// CDIInjector applies CDI devices' edits to a spec (CDIRegistry).
type CDIInjector interface {
	InjectDevices(s *specs.Spec, names ...string) error
}

// CDIDeviceNames lists the CDI devices cfg requests: the CRI cdi_devices
// field, then the devices of its cdi.k8s.io/* annotations (how device
// plugins asked before the field existed; containerd and CRI-O accept
// both), each once, in that order. A name that is not fully qualified
// (vendor.com/class=name) is ErrInvalid.
func CDIDeviceNames(cfg *runtimeapi.ContainerConfig) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, d := range cfg.GetCDIDevices() {
		if _, _, _, err := parser.ParseQualifiedName(d.GetName()); err != nil {
			return nil, fmt.Errorf("cdi_devices %q: %w: %w", d.GetName(), errdefs.ErrInvalid, err)
		}
		add(d.GetName())
	}
	// One key at a time, in sorted order: the library walks the map in
	// random order, and the injection order decides which of two devices
	// wins an environment variable or a path.
	a := cfg.GetAnnotations()
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if !strings.HasPrefix(k, cdi.AnnotationPrefix) {
			continue
		}
		_, devs, err := cdi.ParseAnnotations(map[string]string{k: a[k]})
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w: %w", k, errdefs.ErrInvalid, err)
		}
		for _, d := range devs {
			add(d)
		}
	}
	return names, nil
}

// withCDIDevices injects the CDI devices the config requests. It runs
// after the CRI devices and mounts, so a CDI node or mount at the same
// container path replaces the CRI one, and after the user, who owns the
// injected nodes; privileged mode afterwards keeps CDI's nodes.
func withCDIDevices(cfg *runtimeapi.ContainerConfig, inj CDIInjector) SpecOpt {
	return func(s *specs.Spec) error {
		names, err := CDIDeviceNames(cfg)
		if err != nil || len(names) == 0 {
			return err
		}
		if inj == nil {
			return invalid("cdi devices", "CDI is disabled ([cdi] enabled = false), cannot inject %s", strings.Join(names, ", "))
		}
		return inj.InjectDevices(s, names...)
	}
}
