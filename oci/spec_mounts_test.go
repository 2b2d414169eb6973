package oci

import (
	"errors"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

func findMount(s *specs.Spec, dst string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestDefaultMounts(t *testing.T) {
	s, err := apply(t, withDefaultMounts(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup"} {
		if findMount(s, d) == nil {
			t.Errorf("no %s mount", d)
		}
	}
	if m := findMount(s, "/dev/shm"); m.Type != "tmpfs" {
		t.Errorf("private shm = %+v", m)
	}
	if m := findMount(s, "/sys"); !slices.Contains(m.Options, "ro") {
		t.Errorf("sysfs writable: %v", m.Options)
	}
	s, err = apply(t, withDefaultMounts("/run/podunit/pods/p/shm"))
	if err != nil {
		t.Fatal(err)
	}
	if m := findMount(s, "/dev/shm"); m.Type != "bind" || m.Source != "/run/podunit/pods/p/shm" || !slices.Contains(m.Options, "rbind") {
		t.Errorf("pod shm = %+v", m)
	}
	if _, err := apply(t, withDefaultMounts("shm")); !wantErr(t, err, errdefs.ErrInvalid) {
		t.Error("relative shm path accepted")
	}
}

func TestPodFiles(t *testing.T) {
	f := PodFiles{Hosts: "/p/hosts", ResolvConf: "/p/resolv.conf"}
	s, err := apply(t, withPodFiles(f, true))
	if err != nil {
		t.Fatal(err)
	}
	if m := findMount(s, "/etc/hosts"); m == nil || m.Source != "/p/hosts" || !slices.Equal(m.Options, []string{"rbind", "rprivate", "ro"}) {
		t.Errorf("hosts = %+v", m)
	}
	if findMount(s, "/etc/resolv.conf") == nil || findMount(s, "/etc/hostname") != nil {
		t.Errorf("mounts = %+v", s.Mounts)
	}
	if _, err := apply(t, withPodFiles(PodFiles{Hostname: "hostname"}, false)); !wantErr(t, err, errdefs.ErrInvalid) {
		t.Error("relative pod file accepted")
	}
}

// rroRuntime is a handler that can make recursive read-only mounts.
var rroRuntime = Features{Source: "runc features", RecursiveReadOnly: true}

func TestCRIMounts(t *testing.T) {
	priv, h2c, bidi := runtimeapi.MountPropagation_PROPAGATION_PRIVATE, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	tests := []struct {
		name     string
		mounts   []*runtimeapi.Mount
		wantOpts map[string][]string
		wantProp string
		err      error
	}{
		{name: "rw private", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/h"}},
			wantOpts: map[string][]string{"/data": {"rbind", "rprivate", "rw"}}},
		{name: "ro rslave", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/h", Readonly: true, Propagation: h2c}},
			wantOpts: map[string][]string{"/data": {"rbind", "rslave", "ro"}}, wantProp: "rslave"},
		{name: "rshared wins over rslave", mounts: []*runtimeapi.Mount{
			{ContainerPath: "/a", HostPath: "/h", Propagation: bidi}, {ContainerPath: "/b", HostPath: "/h", Propagation: h2c}},
			wantOpts: map[string][]string{"/a": {"rbind", "rshared", "rw"}, "/b": {"rbind", "rslave", "rw"}}, wantProp: "rshared"},
		{name: "recursive read-only", mounts: []*runtimeapi.Mount{{ContainerPath: "/mnt", HostPath: "/h", Readonly: true, RecursiveReadOnly: true, Propagation: priv}},
			wantOpts: map[string][]string{"/mnt": {"rbind", "rprivate", "rro"}}},
		{name: "rro needs readonly", mounts: []*runtimeapi.Mount{{ContainerPath: "/mnt", HostPath: "/h", RecursiveReadOnly: true}}, err: errdefs.ErrInvalid},
		{name: "rro with rslave", mounts: []*runtimeapi.Mount{{ContainerPath: "/mnt", HostPath: "/h", Readonly: true, RecursiveReadOnly: true, Propagation: h2c}}, err: errdefs.ErrInvalid},
		{name: "rro with rshared", mounts: []*runtimeapi.Mount{{ContainerPath: "/mnt", HostPath: "/h", Readonly: true, RecursiveReadOnly: true, Propagation: bidi}}, err: errdefs.ErrInvalid},
		{name: "dotdot container path", mounts: []*runtimeapi.Mount{{ContainerPath: "/../../etc", HostPath: "/h"}}, err: errdefs.ErrInvalid},
		{name: "dotdot inside", mounts: []*runtimeapi.Mount{{ContainerPath: "/data/../../x", HostPath: "/h"}}, err: errdefs.ErrInvalid},
		{name: "relative container path", mounts: []*runtimeapi.Mount{{ContainerPath: "data", HostPath: "/h"}}, err: errdefs.ErrInvalid},
		{name: "root container path", mounts: []*runtimeapi.Mount{{ContainerPath: "/", HostPath: "/h"}}, err: errdefs.ErrInvalid},
		{name: "relative host path", mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "h"}}, err: errdefs.ErrInvalid},
		{name: "unmounted image volume", mounts: []*runtimeapi.Mount{{ContainerPath: "/d", Image: &runtimeapi.ImageSpec{Image: "busybox"}}}, err: errdefs.ErrInvalid},
		{name: "unknown propagation", mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", Propagation: 7}}, err: errdefs.ErrInvalid},
		{name: "idmap without gid mapping", mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", UidMappings: []*runtimeapi.IDMapping{{Length: 1}}}}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withCRIMounts(tt.mounts, rroRuntime))
			if wantErr(t, err, tt.err) {
				return
			}
			for dst, opts := range tt.wantOpts {
				m := findMount(s, dst)
				if m == nil || m.Type != "bind" || !slices.Equal(m.Options, opts) {
					t.Errorf("%s = %+v, want options %v", dst, m, opts)
				}
			}
			got := ""
			if s.Linux != nil {
				got = s.Linux.RootfsPropagation
			}
			if got != tt.wantProp {
				t.Errorf("rootfs propagation = %q, want %q", got, tt.wantProp)
			}
		})
	}
}

// A handler without rro gets an InvalidArgument naming the mount, not a
// container that fails to start; plain read-only mounts still work.
func TestCRIMountsRecursiveReadOnlyUnsupported(t *testing.T) {
	noRRO := Features{Source: "crun --version", Version: "1.3"}
	rro := &runtimeapi.Mount{ContainerPath: "/mnt", HostPath: "/h", Readonly: true, RecursiveReadOnly: true}
	_, err := apply(t, withCRIMounts([]*runtimeapi.Mount{rro}, noRRO))
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "/mnt") || !strings.Contains(err.Error(), "crun --version 1.3") {
		t.Errorf("rro on a handler without it: %v", err)
	}
	s, err := apply(t, withCRIMounts([]*runtimeapi.Mount{{ContainerPath: "/mnt", HostPath: "/h", Readonly: true}}, noRRO))
	if err != nil || !slices.Equal(findMount(s, "/mnt").Options, []string{"rbind", "rprivate", "ro"}) {
		t.Errorf("plain ro: %v %+v", err, s)
	}
	in := baseInput()
	in.Config.Mounts = []*runtimeapi.Mount{rro}
	in.Runtime = noRRO
	if _, err := GenerateSpec(in); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("GenerateSpec: %v", err)
	}
	in.Runtime = rroRuntime
	if _, err := GenerateSpec(in); err != nil {
		t.Errorf("GenerateSpec with rro support: %v", err)
	}
}

func TestCRIMountsOverrideAndOrder(t *testing.T) {
	s := &specs.Spec{}
	if err := withDefaultMounts("/pod/shm")(s); err != nil {
		t.Fatal(err)
	}
	if err := withPodFiles(PodFiles{Hosts: "/pod/hosts"}, false)(s); err != nil {
		t.Fatal(err)
	}
	mounts := []*runtimeapi.Mount{
		{ContainerPath: "/a/b/c", HostPath: "/h3"},
		{ContainerPath: "/etc/hosts", HostPath: "/mine"},
		{ContainerPath: "/a", HostPath: "/h1"},
		{ContainerPath: "/dev/shm/", HostPath: "/myshm"},
	}
	if err := withCRIMounts(mounts, rroRuntime)(s); err != nil {
		t.Fatal(err)
	}
	var hosts, shm, order []string
	for _, m := range s.Mounts {
		switch m.Destination {
		case "/etc/hosts":
			hosts = append(hosts, m.Source)
		case "/dev/shm":
			shm = append(shm, m.Source)
		case "/a", "/a/b/c":
			order = append(order, m.Destination)
		}
	}
	if !slices.Equal(hosts, []string{"/mine"}) || !slices.Equal(shm, []string{"/myshm"}) {
		t.Errorf("overrides: hosts %v shm %v", hosts, shm)
	}
	if !slices.Equal(order, []string{"/a", "/a/b/c"}) {
		t.Errorf("order = %v", order)
	}
}

func TestDevices(t *testing.T) {
	dev := func(p, typ string, perms string) Device {
		return Device{LinuxDevice: specs.LinuxDevice{Path: p, Type: typ, Major: 1, Minor: 3}, Permissions: perms}
	}
	s, err := apply(t, withDevices([]Device{dev("/dev/mynull", "c", "rw"), dev("/dev/fifo", "p", "")}))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Devices) != 2 {
		t.Errorf("devices = %+v", s.Linux.Devices)
	}
	r := s.Linux.Resources.Devices
	if len(r) != 2 || r[0].Allow || r[0].Access != "rwm" || !r[1].Allow || r[1].Access != "rw" || *r[1].Major != 1 || *r[1].Minor != 3 {
		t.Errorf("cgroup rules = %+v", r)
	}
	for _, bad := range []Device{dev("/dev/x", "c", "rwx"), dev("dev/x", "c", ""), dev("/dev/../x", "c", ""), dev("/dev/x", "u", "")} {
		if _, err := apply(t, withDevices([]Device{bad})); !wantErr(t, err, errdefs.ErrInvalid) {
			t.Errorf("%+v accepted", bad)
		}
	}
}
