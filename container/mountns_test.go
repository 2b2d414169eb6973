package container

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/mountns"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const testPin = "/run/podunit/mntns/mnt"

// With a private mount namespace the runtime runs in it: the wrapper and
// the recorder are told the namespace (they enter it on one thread for the
// runtime's create, start and delete, no nsenter exec); the start step is
// the wrapper's, whatever hooks the spec has; without a namespace the
// commands are as they were.
func TestUnitCommandsEnterTheMountNamespace(t *testing.T) {
	type tc struct {
		pin       string
		poststart bool // a plugin adds a poststart hook
	}
	for _, tc := range []tc{{pin: ""}, {pin: testPin}, {pin: testPin, poststart: true}, {pin: "", poststart: true}} {
		e, p := newPluginEnv(t)
		if tc.poststart {
			p.createFn = func(c *Info, s *specs.Spec) (*runtimeapi.LinuxContainerResources, error) {
				s.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/true"}}}
				return c.Resources, nil
			}
		}
		e.opts.MountNS = tc.pin
		e.m = e.newManager()
		id, err := e.m.Create(ctx, "pod1", containerConfig("c"), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.m.get(id)
		if err != nil {
			t.Fatal(err)
		}
		svc := e.m.service(c.rec, e.rt)
		for what, argv := range map[string][]string{"ExecStart": svc.ExecStart.Argv, "ExecStopPost": svc.ExecStopPost.Argv} {
			if argv[0] != "/usr/bin/podunit" || slices.Contains(argv, mountns.Nsenter) {
				t.Errorf("%+v: %s is %q, want the helper itself", tc, what, argv)
			}
			end := slices.Index(argv, "--")
			if end < 0 {
				end = len(argv)
			}
			told := slices.Contains(argv[:end], "--mount-ns")
			if told != (tc.pin != "") || (told && argv[slices.Index(argv, "--mount-ns")+1] != testPin) {
				t.Errorf("%+v: %s is %q", tc, what, argv)
			}
		}
		var start []string
		argv := svc.ExecStart.Argv
		for _, a := range argv[:slices.Index(argv, "--")] {
			if v, ok := strings.CutPrefix(a, "--start-arg="); ok {
				start = append(start, v)
			}
		}
		if want := e.rt.StartArgv(id, e.m.runtimeLog(id)); !slices.Equal(start, want) {
			t.Errorf("%+v: the wrapper's start step is %q, want %q", tc, start, want)
		}
	}
}

func mountSource(s *specs.Spec, dst string) string {
	for _, m := range s.Mounts {
		if m.Destination == dst {
			return m.Source
		}
	}
	return ""
}

// Without a private namespace, or for other propagations, a mount's host
// path goes to the spec as it is; a bidirectional one whose host path is
// missing is the request's fault.
func TestHostPropagationOnlyForBidirectional(t *testing.T) {
	host := t.TempDir()
	for _, tc := range []struct {
		pin  string
		prop runtimeapi.MountPropagation
	}{
		{"", runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL},
		{testPin, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{testPin, runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
	} {
		e := newEnv(t)
		e.opts.MountNS = tc.pin
		e.m = e.newManager()
		cfg := containerConfig("c")
		cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: host, Propagation: tc.prop}}
		id, err := e.m.Create(ctx, "pod1", cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := mountSource(bundleSpec(t, e, id), "/data"); got != host {
			t.Errorf("pin %q, %v: source %q, want %q", tc.pin, tc.prop, got, host)
		}
	}
	e := newEnv(t)
	e.opts.MountNS = testPin
	e.m = e.newManager()
	cfg := containerConfig("c")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: filepath.Join(host, "missing"), Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}
	if _, err := e.m.Create(ctx, "pod1", cfg, nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("missing host path: %v, want ErrInvalid", err)
	}
	if ents := entries(e.opts.RunDir); len(ents) != 0 {
		t.Errorf("a refused create left %d run dirs", len(ents))
	}
}

// A bidirectional mount's source in the spec is a clone of the host's
// mount tree below the container's run dir (as root: it really mounts);
// the record keeps the kubelet's host path; removal unmounts the clone
// before deleting the run dir, and the host's files survive.
func TestBidirectionalMountClonedFromHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	if ns, err := os.Readlink("/proc/1/ns/mnt"); err != nil {
		t.Skip("no /proc/1/ns/mnt")
	} else if self, _ := os.Readlink("/proc/self/ns/mnt"); self != ns {
		t.Skip("not in PID 1's mount namespace")
	}
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.opts.MountNS = testPin
	e.m = e.newManager()
	cfg := containerConfig("c")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: host, Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}
	id, err := e.m.Create(ctx, "pod1", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(e.opts.RunDir, id, "propagated", "0")
	// where the run dir goes with Remove (the reaper deletes it later)
	trashed := filepath.Join(e.m.runTrashOf(id), "propagated", "0")
	t.Cleanup(func() { _ = unmountAll(clone); _ = unmountAll(trashed) })
	if got := mountSource(bundleSpec(t, e, id), "/data"); got != clone {
		t.Fatalf("spec source %q, want %q", got, clone)
	}
	if !isMountPoint(clone) {
		t.Fatalf("%s is not mounted", clone)
	}
	if _, err := os.Stat(filepath.Join(clone, "keep")); err != nil {
		t.Fatalf("host file not seen through the clone: %v", err)
	}
	st, _, err := e.m.Status(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.GetMounts(); len(m) != 1 || m[0].GetHostPath() != host {
		t.Errorf("status mounts %v, want host path %s", m, host)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{clone, trashed} {
		if isMountPoint(p) {
			t.Errorf("%s still mounted after remove", p)
		}
	}
	if _, err := os.Stat(filepath.Join(host, "keep")); err != nil {
		t.Errorf("removal deleted the host's file: %v", err)
	}
}
