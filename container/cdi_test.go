package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testCDISpec is a CDI spec for harmless devices: podunit.test/null=one
// and =two are the host's /dev/null under other names, one with an
// environment variable and a read-only bind mount of mountSrc.
func testCDISpec(mountSrc string) string {
	return fmt.Sprintf(`{
  "cdiVersion": "0.6.0",
  "kind": "podunit.test/null",
  "devices": [
    {"name": "one", "containerEdits": {
      "deviceNodes": [{"path": "/dev/cdi-null", "hostPath": "/dev/null"}],
      "env": ["CDI_TEST=one"],
      "mounts": [{"hostPath": %q, "containerPath": "/etc/cdi-test", "type": "bind", "options": ["ro", "bind"]}]}},
    {"name": "two", "containerEdits": {
      "deviceNodes": [{"path": "/dev/cdi-null2", "hostPath": "/dev/null"}],
      "env": ["CDI_TWO=2"]}}
  ]
}`, mountSrc)
}

// withCDI enables CDI over an empty temporary spec directory, as the
// manager's configuration would, and returns the directory.
func (e *env) withCDI() string {
	e.t.Helper()
	dir := e.t.TempDir()
	if err := e.opts.SetCDI(config.CDI{Enabled: true, SpecDirs: []string{filepath.Join(e.t.TempDir(), "none"), dir}}); err != nil {
		e.t.Fatal(err)
	}
	e.m = e.newManager()
	return dir
}

func TestCreateInjectsCDIDevices(t *testing.T) {
	e := newEnv(t)
	dir := e.withCDI()
	// Written after the manager (and its registry) started: the create
	// must re-read the directory.
	src := filepath.Join(t.TempDir(), "cdi-test")
	if err := os.WriteFile(src, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "podunit-test.json"), []byte(testCDISpec(src)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := containerConfig("gpu")
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podunit.test/null=one"}}
	cfg.Annotations = map[string]string{"cdi.k8s.io/podunit-test": "podunit.test/null=two"}
	id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
	if err != nil {
		t.Fatal(err)
	}
	s := e.bundleSpec(id)
	var devs []string
	for _, d := range s.Linux.Devices {
		devs = append(devs, fmt.Sprintf("%s %s %d:%d", d.Path, d.Type, d.Major, d.Minor))
	}
	if want := []string{"/dev/cdi-null c 1:3", "/dev/cdi-null2 c 1:3"}; !slices.Equal(devs, want) {
		t.Errorf("devices %q, want %q", devs, want)
	}
	for _, env := range []string{"CDI_TEST=one", "CDI_TWO=2"} {
		if !slices.Contains(s.Process.Env, env) {
			t.Errorf("env %q lacks %s", s.Process.Env, env)
		}
	}
	if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/etc/cdi-test" && m.Source == src }) {
		t.Errorf("no CDI mount in %+v", s.Mounts)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.assertClean()
}

func TestCreateWithBadCDIDevicesCreatesNothing(t *testing.T) {
	e := newEnv(t)
	dir := e.withCDI()
	if err := os.WriteFile(filepath.Join(dir, "podunit-test.json"), []byte(testCDISpec("/etc/hostname")), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mut func(*runtimeapi.ContainerConfig)
		msg string
	}{
		"unknown device": {
			func(c *runtimeapi.ContainerConfig) {
				c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podunit.test/null=one"}, {Name: "podunit.test/null=nine"}}
			},
			"unknown device podunit.test/null=nine",
		},
		"malformed name": {
			func(c *runtimeapi.ContainerConfig) { c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "null=one"}} },
			`"null=one"`,
		},
		"unknown device in an annotation": {
			func(c *runtimeapi.ContainerConfig) {
				c.Annotations = map[string]string{"cdi.k8s.io/x": "other.example/gpu=0"}
			},
			"unknown device other.example/gpu=0",
		},
		"malformed annotation": {
			func(c *runtimeapi.ContainerConfig) { c.Annotations = map[string]string{"cdi.k8s.io/x": "gpu0"} },
			"cdi.k8s.io/x",
		},
	} {
		cfg := containerConfig("x")
		tc.mut(cfg)
		_, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %s", name, err, tc.msg)
		}
	}
	e.assertClean()
	// The failed creates released the name.
	e.create("pod1", "x")
}

func TestCreateCDIDisabled(t *testing.T) {
	e := newEnv(t)
	if err := e.opts.SetCDI(config.CDI{Enabled: false, SpecDirs: []string{"/etc/cdi"}}); err != nil || e.opts.CDI != nil {
		t.Fatalf("SetCDI(disabled): %v, registry %v", err, e.opts.CDI)
	}
	e.m = e.newManager()
	cfg := containerConfig("x")
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podunit.test/null=one"}}
	if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "CDI is disabled") {
		t.Errorf("create with CDI disabled: %v", err)
	}
	e.assertClean()
	// Without a request, CDI being off changes nothing.
	id := e.create("pod1", "x")
	if s := e.bundleSpec(id); len(s.Linux.Devices) != 0 {
		t.Errorf("devices %v", s.Linux.Devices)
	}
}
