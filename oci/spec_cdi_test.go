package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// cdiSpec is a CDI spec for harmless devices: "one" and "two" are the
// host's /dev/null under other names, with an environment variable and a
// bind mount of src; the spec's common edits add CDI_VENDOR.
func cdiSpec(src string) string {
	return fmt.Sprintf(`{
  "cdiVersion": "0.6.0",
  "kind": "podunit.test/null",
  "devices": [
    {"name": "one", "containerEdits": {
      "deviceNodes": [{"path": "/dev/cdi-null", "hostPath": "/dev/null"}],
      "env": ["CDI_TEST=one"],
      "mounts": [{"hostPath": %q, "containerPath": "/etc/cdi-test", "type": "bind", "options": ["ro", "bind"]}]}},
    {"name": "two", "containerEdits": {
      "deviceNodes": [{"path": "/dev/cdi-null2", "hostPath": "/dev/null", "permissions": "rw"}],
      "env": ["CDI_TEST=two"]}},
    {"name": "gone", "containerEdits": {
      "deviceNodes": [{"path": "/dev/cdi-gone", "hostPath": "/dev/does-not-exist"}]}}
  ],
  "containerEdits": {"env": ["CDI_VENDOR=podunit"]}
}`, src)
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cdiRegistry is a registry over a temporary spec directory holding
// cdiSpec as podunit-test.json.
func cdiRegistry(t *testing.T) (*CDIRegistry, string) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "cdi-test")
	writeFile(t, src, "mounted\n")
	writeFile(t, filepath.Join(dir, "podunit-test.json"), cdiSpec(src))
	r, err := NewCDIRegistry([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func TestCDIDeviceNames(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg     *runtimeapi.ContainerConfig
		want    []string
		invalid bool
	}{
		"none": {cfg: &runtimeapi.ContainerConfig{Annotations: map[string]string{"other": "x=y"}}},
		"field then annotations, sorted by key, each once": {
			cfg: &runtimeapi.ContainerConfig{
				CDIDevices: []*runtimeapi.CDIDevice{{Name: "b.com/gpu=1"}, {Name: "a.com/gpu=0"}, {Name: "b.com/gpu=1"}},
				Annotations: map[string]string{
					"cdi.k8s.io/z":      "c.com/net=eth1",
					"cdi.k8s.io/a":      "a.com/gpu=0,d.com/fpga=f0",
					"io.kubernetes.foo": "not=a device",
				},
			},
			want: []string{"b.com/gpu=1", "a.com/gpu=0", "d.com/fpga=f0", "c.com/net=eth1"},
		},
		"malformed field name": {
			cfg:     &runtimeapi.ContainerConfig{CDIDevices: []*runtimeapi.CDIDevice{{Name: "gpu0"}}},
			invalid: true,
		},
		"empty field name": {
			cfg:     &runtimeapi.ContainerConfig{CDIDevices: []*runtimeapi.CDIDevice{{}}},
			invalid: true,
		},
		"malformed annotation": {
			cfg:     &runtimeapi.ContainerConfig{Annotations: map[string]string{"cdi.k8s.io/x": "a.com/gpu=0,,"}},
			invalid: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := CDIDeviceNames(tc.cfg)
			if tc.invalid {
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// recordingInjector stands in for the registry: the option's own rules.
type recordingInjector struct{ got [][]string }

func (r *recordingInjector) InjectDevices(_ *specs.Spec, names ...string) error {
	r.got = append(r.got, names)
	return nil
}

func TestWithCDIDevices(t *testing.T) {
	want := &runtimeapi.ContainerConfig{CDIDevices: []*runtimeapi.CDIDevice{{Name: "a.com/gpu=0"}}}
	none := &runtimeapi.ContainerConfig{}

	inj := &recordingInjector{}
	if err := withCDIDevices(none, inj)(&specs.Spec{}); err != nil || len(inj.got) != 0 {
		t.Fatalf("no devices: %v, injector called with %q", err, inj.got)
	}
	if err := withCDIDevices(want, inj)(&specs.Spec{}); err != nil || len(inj.got) != 1 || !slices.Equal(inj.got[0], []string{"a.com/gpu=0"}) {
		t.Fatalf("devices: %v, injector called with %q", err, inj.got)
	}
	if err := withCDIDevices(none, nil)(&specs.Spec{}); err != nil {
		t.Fatalf("disabled, nothing requested: %v", err)
	}
	err := withCDIDevices(want, nil)(&specs.Spec{})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "CDI is disabled") {
		t.Fatalf("disabled with a request: %v", err)
	}
}

func TestGenerateSpecInjectsCDIDevices(t *testing.T) {
	reg, _ := cdiRegistry(t)
	in := baseInput()
	in.Config.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podunit.test/null=one"}}
	in.Config.Annotations = map[string]string{"cdi.k8s.io/test": "podunit.test/null=two"}
	in.CDI = reg
	s, err := GenerateSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, d := range s.Linux.Devices {
		uid := "-"
		if d.UID != nil {
			uid = fmt.Sprint(*d.UID)
		}
		devs = append(devs, fmt.Sprintf("%s %s %d:%d uid=%s", d.Path, d.Type, d.Major, d.Minor, uid))
	}
	// The nodes belong to the container's user (1000 in baseInput).
	if want := []string{"/dev/cdi-null c 1:3 uid=1000", "/dev/cdi-null2 c 1:3 uid=1000"}; !slices.Equal(devs, want) {
		t.Errorf("devices %q, want %q", devs, want)
	}
	var rules []string
	for _, r := range s.Linux.Resources.Devices {
		rules = append(rules, fmt.Sprintf("%v %s %s", r.Allow, r.Type, r.Access))
	}
	// Deny everything first (withDevices), then allow the CDI nodes.
	if want := []string{"false  rwm", "true c rwm", "true c rw"}; !slices.Equal(rules, want) {
		t.Errorf("device cgroup %q, want %q", rules, want)
	}
	// The field's device comes first, so the annotation's wins CDI_TEST.
	for _, e := range []string{"CDI_VENDOR=podunit", "CDI_TEST=two", "A=1"} {
		if !slices.Contains(s.Process.Env, e) {
			t.Errorf("env %q lacks %s", s.Process.Env, e)
		}
	}
	if m := findMount(s, "/etc/cdi-test"); m == nil || m.Type != "bind" || !strings.HasSuffix(m.Source, "/cdi-test") || !slices.Contains(m.Options, "ro") {
		t.Errorf("cdi mount = %+v", m)
	}
	if findMount(s, "/data") == nil || findMount(s, "/etc/resolv.conf") == nil {
		t.Error("CDI's mounts replaced the CRI and pod mounts")
	}
}

func TestCDIDeviceErrorsAreInvalid(t *testing.T) {
	reg, dir := cdiRegistry(t)
	// A broken spec file: x is not a device cgroup permission.
	writeFile(t, filepath.Join(dir, "broken.json"),
		`{"cdiVersion": "0.6.0", "kind": "podunit.test/broken", "devices": [{"name": "x", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "permissions": "rwx"}]}}]}`)
	if err := reg.Refresh(); err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Fatalf("refresh with a broken spec file: %v", err)
	}
	for name, tc := range map[string]struct {
		device, msg string
	}{
		"unknown device":        {"podunit.test/null=three", "unknown device podunit.test/null=three"},
		"unknown vendor":        {"nosuch.example/gpu=0", "unknown device nosuch.example/gpu=0"},
		"device of broken spec": {"podunit.test/broken=x", "broken.json"},
		"host node missing":     {"podunit.test/null=gone", "/dev/does-not-exist"},
		"malformed name":        {"podunit.test/null", "podunit.test/null"},
	} {
		t.Run(name, func(t *testing.T) {
			in := baseInput()
			in.Config.CDIDevices = []*runtimeapi.CDIDevice{{Name: tc.device}}
			in.CDI = reg
			_, err := GenerateSpec(in)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.msg)
			}
			t.Log(err)
		})
	}
	// The broken file does not keep the good one's devices from resolving.
	in := baseInput()
	in.Config.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podunit.test/null=one"}}
	in.CDI = reg
	if _, err := GenerateSpec(in); err != nil {
		t.Fatalf("good device next to a broken spec: %v", err)
	}
}

func TestCDIRegistrySeesNewSpecFilesOnRefresh(t *testing.T) {
	reg, dir := cdiRegistry(t)
	writeFile(t, filepath.Join(dir, "late.yaml"), `cdiVersion: "0.6.0"
kind: podunit.test/late
devices:
- name: l0
  containerEdits:
    env: ["LATE=1"]
`)
	s := &specs.Spec{Process: &specs.Process{}}
	if err := reg.InjectDevices(s, "podunit.test/late=l0"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("before refresh: %v, want unknown (no watcher, no implicit refresh)", err)
	}
	if err := reg.Refresh(); err != nil {
		t.Fatal(err)
	}
	if err := reg.InjectDevices(s, "podunit.test/late=l0"); err != nil || !slices.Contains(s.Process.Env, "LATE=1") {
		t.Fatalf("after refresh: %v, env %q", err, s.Process.Env)
	}
}

func TestNewCDIRegistryNeedsDirs(t *testing.T) {
	if _, err := NewCDIRegistry(nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("no dirs: %v", err)
	}
}
