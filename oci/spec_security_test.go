package oci

import (
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

func TestCapabilities(t *testing.T) {
	host := slices.DeleteFunc(slices.Clone(KnownCapabilities), func(c string) bool { return c == "CAP_SYS_RESOURCE" })
	tests := []struct {
		name      string
		c         *runtimeapi.Capability
		host      []string
		has, not  []string
		wantCount int
		ambient   []string
		err       error
	}{
		{name: "default", has: DefaultCapabilities, not: []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}, wantCount: len(DefaultCapabilities)},
		{name: "add short and lower case", c: &runtimeapi.Capability{AddCapabilities: []string{"net_admin"}}, has: []string{"CAP_NET_ADMIN", "CAP_CHOWN"}, wantCount: len(DefaultCapabilities) + 1},
		{name: "drop", c: &runtimeapi.Capability{DropCapabilities: []string{"NET_RAW"}}, not: []string{"CAP_NET_RAW"}, wantCount: len(DefaultCapabilities) - 1},
		{name: "add ALL is host's set", c: &runtimeapi.Capability{AddCapabilities: []string{"ALL"}}, host: host, has: []string{"CAP_SYS_ADMIN"}, not: []string{"CAP_SYS_RESOURCE"}, wantCount: len(host)},
		{name: "add ALL drop one", c: &runtimeapi.Capability{AddCapabilities: []string{"ALL"}, DropCapabilities: []string{"CAP_CHOWN"}}, not: []string{"CAP_CHOWN"}, wantCount: len(KnownCapabilities) - 1},
		{name: "drop ALL", c: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}}, wantCount: 0},
		{name: "drop ALL add one", c: &runtimeapi.Capability{DropCapabilities: []string{"all"}, AddCapabilities: []string{"NET_BIND_SERVICE"}}, has: []string{"CAP_NET_BIND_SERVICE"}, wantCount: 1},
		{name: "ambient", c: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}, AddAmbientCapabilities: []string{"NET_BIND_SERVICE"}}, has: []string{"CAP_NET_BIND_SERVICE"}, wantCount: 1, ambient: []string{"CAP_NET_BIND_SERVICE"}},
		{name: "unknown", c: &runtimeapi.Capability{AddCapabilities: []string{"CAP_FLY"}}, wantCount: -1, err: errdefs.ErrInvalid},
		{name: "unknown drop", c: &runtimeapi.Capability{DropCapabilities: []string{"FLY"}}, wantCount: -1, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withCapabilities(tt.c, tt.host))
			if wantErr(t, err, tt.err) {
				return
			}
			c := s.Process.Capabilities
			for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted} {
				for _, h := range tt.has {
					if !slices.Contains(set, h) {
						t.Errorf("missing %s in %v", h, set)
					}
				}
				for _, n := range tt.not {
					if slices.Contains(set, n) {
						t.Errorf("unexpected %s", n)
					}
				}
				if tt.wantCount >= 0 && len(set) != tt.wantCount {
					t.Errorf("len = %d, want %d", len(set), tt.wantCount)
				}
			}
			if !slices.Equal(c.Ambient, tt.ambient) || !slices.Equal(c.Inheritable, tt.ambient) {
				t.Errorf("ambient/inheritable = %v/%v, want %v", c.Ambient, c.Inheritable, tt.ambient)
			}
		})
	}
}

func TestMaskedPaths(t *testing.T) {
	tests := []struct {
		name               string
		masked, ro         []string
		unmasked           bool
		wantMasked, wantRO []string
		err                error
	}{
		{name: "defaults", wantMasked: DefaultMaskedPaths, wantRO: DefaultReadonlyPaths},
		{name: "kubelet lists", masked: []string{"/bin/ls"}, ro: []string{"/tmp"}, wantMasked: []string{"/bin/ls"}, wantRO: []string{"/tmp"}},
		{name: "one list given", masked: []string{"/x"}, wantMasked: []string{"/x"}, wantRO: DefaultReadonlyPaths},
		{name: "unmasked proc", unmasked: true},
		{name: "relative", masked: []string{"proc"}, err: errdefs.ErrInvalid},
		{name: "dotdot", ro: []string{"/proc/../etc"}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withMaskedPaths(tt.masked, tt.ro, tt.unmasked))
			if wantErr(t, err, tt.err) {
				return
			}
			if !slices.Equal(s.Linux.MaskedPaths, tt.wantMasked) || !slices.Equal(s.Linux.ReadonlyPaths, tt.wantRO) {
				t.Errorf("masked %v ro %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
			}
		})
	}
	userns := &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}}
	if !unmaskedProc(nil, userns) || unmaskedProc(nil, nil) ||
		unmaskedProc(&runtimeapi.LinuxContainerSecurityContext{MaskedPaths: []string{"/a"}}, userns) {
		t.Error("unmaskedProc: wrong inference")
	}
}

func TestPrivileged(t *testing.T) {
	mode := specs.LinuxDevice{Path: "/dev/sda", Type: "b", Major: 8}
	base := func() *specs.Spec {
		s := &specs.Spec{}
		_ = withDefaultMounts("")(s)
		_ = withMaskedPaths(nil, nil, false)(s)
		_ = withCapabilities(nil, nil)(s)
		_ = withDevices(nil)(s)
		return s
	}
	s := base()
	if err := withPrivileged(false, true, Host{})(s); err != nil || len(s.Linux.MaskedPaths) == 0 {
		t.Fatalf("unprivileged changed the spec: %v", err)
	}
	if err := withPrivileged(true, false, Host{})(base()); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("privileged in unprivileged sandbox: err = %v", err)
	}
	s = base()
	host := Host{Capabilities: []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN"}, Devices: []specs.LinuxDevice{mode}}
	if err := withPrivileged(true, true, host)(s); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Process.Capabilities.Effective, host.Capabilities) {
		t.Errorf("caps = %v", s.Process.Capabilities.Effective)
	}
	if s.Linux.MaskedPaths != nil || s.Linux.ReadonlyPaths != nil {
		t.Error("masked/readonly paths kept")
	}
	for _, m := range s.Mounts {
		if (m.Type == "sysfs" || m.Type == "cgroup") && !slices.Contains(m.Options, "rw") {
			t.Errorf("%s still read-only: %v", m.Destination, m.Options)
		}
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/sda" {
		t.Errorf("devices = %v", s.Linux.Devices)
	}
	if d := s.Linux.Resources.Devices; len(d) != 1 || !d[0].Allow || d[0].Access != "rwm" {
		t.Errorf("device cgroup = %+v", d)
	}
}

func TestNoNewPrivs(t *testing.T) {
	s, _ := apply(t, withNoNewPrivs(true))
	if !s.Process.NoNewPrivileges {
		t.Error("not set")
	}
}

const blockHostname = `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["sethostname"],"action":"SCMP_ACT_ERRNO"}]}`

func TestSeccomp(t *testing.T) {
	rd := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	local := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/p/block.json"}
	tests := []struct {
		name       string
		p          *runtimeapi.SecurityProfile
		privileged bool
		src        seccompSources
		caps       []string
		wantNil    bool
		wantAction specs.LinuxSeccompAction
		allowed    string // a syscall that must be allowed unconditionally
		denied     string // a syscall that must not be
		err        error
	}{
		{name: "nil is unconfined", wantNil: true},
		{name: "unconfined", p: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, wantNil: true},
		{name: "privileged ignores profile", p: local, privileged: true, wantNil: true},
		{name: "runtime default", p: rd, wantAction: specs.ActErrno, allowed: "read", denied: "sethostname"},
		{name: "runtime default with SYS_ADMIN", p: rd, caps: []string{"CAP_SYS_ADMIN"}, wantAction: specs.ActErrno, allowed: "sethostname"},
		{name: "configured default", p: rd, src: seccompSources{Default: []byte(blockHostname)}, wantAction: specs.ActAllow},
		{name: "bad configured default", p: rd, src: seccompSources{Default: []byte(`{}`)}, err: errdefs.ErrInvalid},
		{name: "localhost", p: local, src: seccompSources{Localhost: []byte(blockHostname)}, wantAction: specs.ActAllow},
		{name: "localhost not loaded", p: local, err: errdefs.ErrInvalid},
		{name: "localhost relative", p: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "x.json"}, src: seccompSources{Localhost: []byte(blockHostname)}, err: errdefs.ErrInvalid},
		{name: "localhost bad json", p: local, src: seccompSources{Localhost: []byte(`{`)}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: tt.caps}}}
			err := withSeccomp(tt.p, tt.privileged, tt.src)(s)
			if wantErr(t, err, tt.err) {
				return
			}
			if tt.wantNil {
				if s.Linux.Seccomp != nil {
					t.Fatalf("seccomp = %+v, want none", s.Linux.Seccomp)
				}
				return
			}
			sc := s.Linux.Seccomp
			if sc == nil || sc.DefaultAction != tt.wantAction {
				t.Fatalf("seccomp = %+v", sc)
			}
			allow := func(n string) bool {
				return slices.ContainsFunc(sc.Syscalls, func(r specs.LinuxSyscall) bool {
					return r.Action == specs.ActAllow && len(r.Args) == 0 && slices.Contains(r.Names, n)
				})
			}
			if tt.allowed != "" && !allow(tt.allowed) {
				t.Errorf("%s not allowed", tt.allowed)
			}
			if tt.denied != "" && allow(tt.denied) {
				t.Errorf("%s allowed", tt.denied)
			}
		})
	}
}

func TestLegacyProfiles(t *testing.T) {
	tests := []struct {
		sc   *runtimeapi.LinuxContainerSecurityContext
		want runtimeapi.SecurityProfile_ProfileType
		ref  string
		none bool
	}{
		{sc: nil, none: true},
		{sc: &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "runtime/default"}, want: runtimeapi.SecurityProfile_RuntimeDefault},
		{sc: &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "docker/default"}, want: runtimeapi.SecurityProfile_RuntimeDefault},
		{sc: &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "unconfined"}, want: runtimeapi.SecurityProfile_Unconfined},
		{sc: &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "localhost//a/b.json"}, want: runtimeapi.SecurityProfile_Localhost, ref: "/a/b.json"},
		{sc: &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "x", Seccomp: &runtimeapi.SecurityProfile{}}, want: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	for _, tt := range tests {
		p := seccompProfile(tt.sc)
		if tt.none {
			if p != nil {
				t.Errorf("%v: got %v", tt.sc, p)
			}
			continue
		}
		if p.GetProfileType() != tt.want || p.GetLocalhostRef() != tt.ref {
			t.Errorf("%v: got %v", tt.sc, p)
		}
	}
}

func TestAppArmor(t *testing.T) {
	rd := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	local := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/my-prof"}
	on := Host{AppArmorEnabled: true, AppArmorDefaultProfile: "podunit-default"}
	tests := []struct {
		name       string
		p          *runtimeapi.SecurityProfile
		privileged bool
		host       Host
		want       string
		err        error
	}{
		{name: "off, default is nothing", p: rd},
		{name: "off, localhost", p: local, err: errdefs.ErrUnimplemented},
		{name: "off, unconfined", p: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}},
		{name: "on, default", p: rd, host: on, want: "podunit-default"},
		{name: "on, no default loaded", p: rd, host: Host{AppArmorEnabled: true}, err: errdefs.ErrUnimplemented},
		{name: "on, localhost", p: local, host: on, want: "my-prof"},
		{name: "on, privileged", p: local, host: on, privileged: true},
		{name: "on, empty localhost", p: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost}, host: on, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withAppArmor(tt.p, tt.privileged, tt.host))
			if wantErr(t, err, tt.err) {
				return
			}
			if s.Process.ApparmorProfile != tt.want {
				t.Errorf("profile = %q, want %q", s.Process.ApparmorProfile, tt.want)
			}
		})
	}
}
