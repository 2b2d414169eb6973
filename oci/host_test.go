package oci

import (
	"errors"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

func syscallMkfifo(p string) error { return unix.Mkfifo(p, 0o644) }

func TestCapabilitiesFromStatus(t *testing.T) {
	f := filepath.Join(t.TempDir(), "status")
	// bounding lacks bit 24 (CAP_SYS_RESOURCE), as on the CI machines.
	if err := os.WriteFile(f, []byte("Name:\tx\nCapPrm:\t000001ffffffffff\nCapBnd:\t000001fffeffffff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	caps, err := capabilitiesFromStatus(f)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(caps, "CAP_SYS_RESOURCE") || !slices.Contains(caps, "CAP_SYS_ADMIN") || len(caps) != len(KnownCapabilities)-1 {
		t.Errorf("caps = %v", caps)
	}
	if err := os.WriteFile(f, []byte("CapBnd:\tzz\nCapPrm:\t0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := capabilitiesFromStatus(f); err == nil {
		t.Error("bad hex accepted")
	}
}

func TestResolveDevices(t *testing.T) {
	devs, err := ResolveDevices([]*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/mynull", Permissions: "rw"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Path != "/dev/mynull" || devs[0].Type != "c" || devs[0].Major != 1 || devs[0].Minor != 3 || devs[0].Permissions != "rw" {
		t.Errorf("devices = %+v", devs)
	}
	if _, err := ResolveDevices([]*runtimeapi.Device{{HostPath: "/dev/does-not-exist", ContainerPath: "/dev/x"}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing device: %v", err)
	}
	if _, err := ResolveDevices([]*runtimeapi.Device{{HostPath: "/etc/hostname", ContainerPath: "/dev/x"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("regular file: %v", err)
	}
	if _, err := ResolveDevices([]*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/../x"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("hostile path: %v", err)
	}
}

func TestLoadSeccompLocalhost(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(p, []byte(blockHostname), 0o644); err != nil {
		t.Fatal(err)
	}
	local := func(ref string) *runtimeapi.LinuxContainerSecurityContext {
		return &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}}
	}
	if b, err := LoadSeccompLocalhost(local(p)); err != nil || string(b) != blockHostname {
		t.Errorf("load: %q %v", b, err)
	}
	if b, err := LoadSeccompLocalhost(&runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "localhost/" + p}); err != nil || len(b) == 0 {
		t.Errorf("legacy path: %v", err)
	}
	if b, err := LoadSeccompLocalhost(nil); err != nil || b != nil {
		t.Errorf("no profile: %q %v", b, err)
	}
	if _, err := LoadSeccompLocalhost(local(p + ".missing")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if _, err := LoadSeccompLocalhost(local("rel.json")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("relative: %v", err)
	}
}

func TestHostDevices(t *testing.T) {
	devs, err := HostDevices()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(devs, func(d specsDevice) bool { return d.Path == "/dev/null" }) {
		t.Errorf("/dev/null missing from %d host devices", len(devs))
	}
	if slices.ContainsFunc(devs, func(d specsDevice) bool { return filepath.Dir(d.Path) == "/dev/pts" }) {
		t.Error("pts devices listed")
	}
}

type specsDevice = specs.LinuxDevice
