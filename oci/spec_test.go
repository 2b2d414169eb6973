package oci

import (
	"errors"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// testDefaultCaps is config.Default()'s runtime.default_capabilities
// (containerd's set), written as operators may: with and without CAP_.
var testDefaultCaps = []string{
	"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID",
	"SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "CAP_AUDIT_WRITE",
}

// testDefaultCapsNormal is testDefaultCaps as the spec carries them.
var testDefaultCapsNormal = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

func baseInput() SpecInput {
	floor := -999
	return SpecInput{
		ContainerID: "c1",
		Config: &runtimeapi.ContainerConfig{
			Metadata:    &runtimeapi.ContainerMetadata{Name: "web"},
			Args:        []string{"-v"},
			Envs:        []*runtimeapi.KeyValue{kv("A", "1")},
			Annotations: map[string]string{"a": "b"},
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/var/lib/data", Readonly: true}},
			Linux: &runtimeapi.LinuxContainerConfig{
				Resources: &runtimeapi.LinuxContainerResources{OomScoreAdj: -997, MemoryLimitInBytes: 1 << 28},
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
					RunAsUser:        &runtimeapi.Int64Value{Value: 1000},
					NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
					Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
					ReadonlyRootfs:   true,
				},
			},
		},
		SandboxConfig: &runtimeapi.PodSandboxConfig{
			Hostname: "web-0",
			Linux:    &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{"net.ipv4.ip_forward": "1"}},
		},
		Image:        ImageConfig{Entrypoint: []string{"/bin/server"}, Cmd: []string{"--default"}, Env: []string{"PATH=/bin"}, WorkingDir: "/srv"},
		RootfsPath:   "/var/lib/podunit/c1/rootfs",
		Namespaces:   PodNamespaces{NetworkPath: "/run/podunit/ns/p/net", IPCPath: "/run/podunit/ns/p/ipc", UTSPath: "/run/podunit/ns/p/uts"},
		CgroupsPath:  "/podunit.slice/podunit-pod-p.slice/podunit-c1.service/container",
		PodFiles:     PodFiles{ResolvConf: "/run/podunit/p/resolv.conf", Hosts: "/run/podunit/p/hosts", Hostname: "/run/podunit/p/hostname"},
		ShmPath:      "/run/podunit/p/shm",
		ResolvedUser: &User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000}},
		Host:         Host{OOMScoreAdjMin: &floor, Arch: "amd64"},

		DefaultCapabilities: testDefaultCaps,
		Runtime:             Features{Source: "runc features", RecursiveReadOnly: true},
	}
}

func TestGenerateSpec(t *testing.T) {
	s, err := GenerateSpec(baseInput())
	if err != nil {
		t.Fatal(err)
	}
	p := s.Process
	if !slices.Equal(p.Args, []string{"/bin/server", "-v"}) || p.Cwd != "/srv" || p.User.UID != 1000 {
		t.Errorf("process = %+v", p)
	}
	if !slices.Equal(p.Env, []string{"PATH=/bin", "HOSTNAME=web-0", "A=1"}) {
		t.Errorf("env = %v", p.Env)
	}
	if *p.OOMScoreAdj != -997 {
		t.Errorf("oom = %d", *p.OOMScoreAdj)
	}
	if !s.Root.Readonly || s.Root.Path != "/var/lib/podunit/c1/rootfs" {
		t.Errorf("root = %+v", s.Root)
	}
	if s.Linux.CgroupsPath != baseInput().CgroupsPath || s.Linux.Seccomp == nil || s.Linux.Sysctl["net.ipv4.ip_forward"] != "1" {
		t.Errorf("linux = %+v", s.Linux)
	}
	if r := s.Linux.Resources; r.Memory == nil || *r.Memory.Limit != 1<<28 || len(r.Devices) != 1 {
		t.Errorf("resources = %+v", r)
	}
	if s.Hostname != "" {
		t.Errorf("hostname %q set although the UTS namespace is the pod's", s.Hostname)
	}
	if m := findMount(s, "/etc/resolv.conf"); m == nil || !slices.Contains(m.Options, "ro") {
		t.Errorf("resolv.conf = %+v", m)
	}
	if len(s.Linux.MaskedPaths) == 0 || s.Annotations["a"] != "b" || s.Version != SpecVersion {
		t.Errorf("spec = %+v", s)
	}
	if !slices.Equal(p.Capabilities.Bounding, testDefaultCapsNormal) {
		t.Errorf("caps = %v", p.Capabilities.Bounding)
	}
}

func TestGenerateSpecErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*SpecInput)
		err    error
	}{
		{name: "no id", mutate: func(in *SpecInput) { in.ContainerID = "" }, err: errdefs.ErrInvalid},
		{name: "no config", mutate: func(in *SpecInput) { in.Config = nil }, err: errdefs.ErrInvalid},
		{name: "no sandbox", mutate: func(in *SpecInput) { in.SandboxConfig = nil }, err: errdefs.ErrInvalid},
		{name: "relative rootfs", mutate: func(in *SpecInput) { in.RootfsPath = "rootfs" }, err: errdefs.ErrInvalid},
		{name: "no cgroups path", mutate: func(in *SpecInput) { in.CgroupsPath = "" }, err: errdefs.ErrInvalid},
		{name: "hostile mount", mutate: func(in *SpecInput) { in.Config.Mounts[0].ContainerPath = "/../etc" }, err: errdefs.ErrInvalid},
		{name: "mount option outside KEP-5855", mutate: func(in *SpecInput) { in.Config.Mounts[0].MountOptions = []string{"noexec", "exec"} }, err: errdefs.ErrInvalid},
		{name: "mount option smuggling rw", mutate: func(in *SpecInput) { in.Config.Mounts[0].MountOptions = []string{"rw"} }, err: errdefs.ErrInvalid},
		{name: "privileged in normal pod", mutate: func(in *SpecInput) { in.Config.Linux.SecurityContext.Privileged = true }, err: errdefs.ErrInvalid},
		{name: "apparmor localhost on host without it", mutate: func(in *SpecInput) {
			in.Config.Linux.SecurityContext.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "p"}
		}, err: errdefs.ErrUnimplemented},
		{name: "run_as_group alone", mutate: func(in *SpecInput) {
			in.Config.Linux.SecurityContext.RunAsUser = nil
			in.Config.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: 3}
		}, err: errdefs.ErrInvalid},
		{name: "net sysctl on host network", mutate: func(in *SpecInput) {
			in.Config.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
		}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := baseInput()
			tt.mutate(&in)
			if _, err := GenerateSpec(in); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestGenerateSpecPrivileged(t *testing.T) {
	in := baseInput()
	in.Config.Linux.SecurityContext.Privileged = true
	in.Config.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/x.json"}
	in.SandboxConfig.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	in.Host.Capabilities = []string{"CAP_SYS_ADMIN"}
	s, err := GenerateSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	if s.Linux.Seccomp != nil || s.Linux.MaskedPaths != nil || !slices.Equal(s.Process.Capabilities.Bounding, []string{"CAP_SYS_ADMIN"}) {
		t.Errorf("privileged spec still confined: %+v", s.Linux)
	}
}

func TestGenerateSpecHostNetwork(t *testing.T) {
	in := baseInput()
	in.SandboxConfig.Linux.Sysctls = nil
	in.Namespaces = PodNamespaces{}
	in.Config.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER}
	s, err := GenerateSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	if ns := nsString(s); ns["network"] != "" || len(ns) != 3 || s.Hostname != "" {
		t.Errorf("namespaces = %v hostname %q", ns, s.Hostname)
	}
	if _, ok := nsString(s)["network"]; ok {
		t.Error("host network got a network namespace")
	}
}

func TestBindMountOptions(t *testing.T) {
	in := baseInput()
	in.Config.Mounts[0].MountOptions = []string{"nosuid", "noexec", "nodev", "noexec"}
	s, err := GenerateSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	m := findMount(s, "/data")
	if m == nil || !slices.Equal(m.Options, []string{"rbind", "rprivate", "ro", "nosuid", "noexec", "nodev"}) {
		t.Errorf("mount = %+v", m)
	}
}
