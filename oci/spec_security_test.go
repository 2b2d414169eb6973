package oci

import (
	"context"
	"errors"
	"fmt"
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
		{name: "default", has: testDefaultCapsNormal, not: []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}, wantCount: len(testDefaultCaps)},
		{name: "add short and lower case", c: &runtimeapi.Capability{AddCapabilities: []string{"net_admin"}}, has: []string{"CAP_NET_ADMIN", "CAP_CHOWN"}, wantCount: len(testDefaultCaps) + 1},
		{name: "drop", c: &runtimeapi.Capability{DropCapabilities: []string{"NET_RAW"}}, not: []string{"CAP_NET_RAW"}, wantCount: len(testDefaultCaps) - 1},
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
			s, err := apply(t, withCapabilities(tt.c, testDefaultCaps, tt.host))
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
		_ = withCapabilities(nil, testDefaultCaps, nil)(s)
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
	bare := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "my-prof"}
	unconfined := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	on := Host{AppArmorEnabled: true, AppArmorDefaultProfile: "podunit-default"}
	loaded := AppArmorState{LocalhostLoaded: true}
	noDefault := AppArmorState{DefaultErr: fmt.Errorf("no parser: %w", errdefs.ErrNotFound)}
	tests := []struct {
		name       string
		p          *runtimeapi.SecurityProfile
		privileged bool
		host       Host
		st         AppArmorState
		want       string
		err        error
	}{
		{name: "off, default is nothing", p: rd},
		{name: "off, unset is nothing", p: nil},
		{name: "off, localhost", p: local, err: errdefs.ErrUnimplemented},
		{name: "off, unconfined", p: unconfined},
		{name: "on, default", p: rd, host: on, want: "podunit-default"},
		{name: "on, unset gets the default", p: nil, host: on, want: "podunit-default"},
		{name: "on, unset privileged", p: nil, host: on, privileged: true},
		{name: "on, unset, default not loadable: unconfined", p: nil, host: on, st: noDefault},
		{name: "on, default not loadable", p: rd, host: on, st: noDefault, err: errdefs.ErrPrecondition},
		{name: "on, no default profile", p: rd, host: Host{AppArmorEnabled: true}, err: errdefs.ErrUnimplemented},
		{name: "on, unconfined", p: unconfined, host: on},
		{name: "on, localhost", p: local, host: on, st: loaded, want: "my-prof"},
		{name: "on, localhost without prefix", p: bare, host: on, st: loaded, want: "my-prof"},
		{name: "on, localhost not loaded", p: local, host: on, err: errdefs.ErrPrecondition},
		{name: "on, privileged", p: local, host: on, privileged: true},
		{name: "on, empty localhost", p: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost}, host: on, st: loaded, err: errdefs.ErrInvalid},
		{name: "on, localhost prefix only", p: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/"}, host: on, st: loaded, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withAppArmor(tt.p, tt.privileged, tt.host, tt.st))
			if wantErr(t, err, tt.err) {
				return
			}
			if s.Process.ApparmorProfile != tt.want {
				t.Errorf("profile = %q, want %q", s.Process.ApparmorProfile, tt.want)
			}
		})
	}
	// the cause's sentinel must not turn the code into NotFound
	_, err := apply(t, withAppArmor(rd, false, on, noDefault))
	if errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("RuntimeDefault error wraps the cause's sentinel: %v", err)
	}
}

// fakeAppArmor is a kernel with a fixed set of loaded profiles.
type fakeAppArmor struct {
	loaded     map[string]bool
	listErr    error
	defaultErr error
	asked      []string
	ensured    []string
}

func (f *fakeAppArmor) IsLoaded(name string) (bool, error) {
	f.asked = append(f.asked, name)
	return f.loaded[name], f.listErr
}

func (f *fakeAppArmor) EnsureDefault(_ context.Context, name string) error {
	f.ensured = append(f.ensured, name)
	if f.defaultErr == nil {
		f.loaded[name] = true
	}
	return f.defaultErr
}

// TestLoadAppArmorAndSpec is critest's AppArmor suite on a fake kernel:
// LoadAppArmor's answers make GenerateSpec accept loaded profiles (typed
// field preferred over the deprecated one) and reject unloaded ones.
func TestLoadAppArmorAndSpec(t *testing.T) {
	const deny, audit, missing = "cri-validate-apparmor-test-deny-write", "cri-validate-apparmor-test-audit-write", "non-existent-profile"
	typed := func(ref string) *runtimeapi.SecurityProfile {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
	}
	tests := []struct {
		name    string
		sc      *runtimeapi.LinuxContainerSecurityContext
		want    string
		asked   string
		ensured bool
		err     error
	}{
		{name: "deprecated unloaded", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/" + missing},
			asked: missing, err: errdefs.ErrPrecondition},
		{name: "deprecated loaded", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/" + deny},
			asked: deny, want: deny},
		{name: "typed unloaded", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: typed("localhost/" + missing)},
			asked: missing, err: errdefs.ErrPrecondition},
		{name: "typed loaded", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: typed("localhost/" + audit)},
			asked: audit, want: audit},
		{name: "both unloaded", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/" + missing, Apparmor: typed("localhost/" + missing)},
			asked: missing, err: errdefs.ErrPrecondition},
		{name: "typed preferred", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/" + missing, Apparmor: typed("localhost/" + deny)},
			asked: deny, want: deny},
		{name: "unset gets the default", sc: &runtimeapi.LinuxContainerSecurityContext{}, ensured: true, want: "podunit-default"},
		{name: "runtime/default", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "runtime/default"}, ensured: true, want: "podunit-default"},
		{name: "unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &fakeAppArmor{loaded: map[string]bool{deny: true, audit: true, "other": true}}
			in := baseInput()
			in.Config.Linux.SecurityContext = tt.sc
			in.Host = Host{AppArmorEnabled: true, AppArmorDefaultProfile: "podunit-default", AppArmor: k}
			st, err := LoadAppArmor(context.Background(), tt.sc, in.Host)
			if err != nil {
				t.Fatal(err)
			}
			if tt.asked != "" && !slices.Equal(k.asked, []string{tt.asked}) || tt.asked == "" && k.asked != nil {
				t.Errorf("asked about %q, want %q", k.asked, tt.asked)
			}
			if tt.ensured != (len(k.ensured) == 1) || len(k.ensured) > 1 {
				t.Errorf("EnsureDefault calls %q, want ensured=%v", k.ensured, tt.ensured)
			}
			in.AppArmor = st
			s, err := GenerateSpec(in)
			if wantErr(t, err, tt.err) {
				return
			}
			if s.Process.ApparmorProfile != tt.want {
				t.Errorf("profile = %q, want %q", s.Process.ApparmorProfile, tt.want)
			}
		})
	}
}

func TestLoadAppArmorAsksNothing(t *testing.T) {
	local := &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/x"}
	for name, tt := range map[string]struct {
		sc   *runtimeapi.LinuxContainerSecurityContext
		host Host
	}{
		"apparmor off":      {sc: local, host: Host{}},
		"privileged":        {sc: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}},
		"unconfined":        {sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "unconfined"}},
		"no default":        {sc: &runtimeapi.LinuxContainerSecurityContext{}, host: Host{AppArmorEnabled: true}},
		"invalid localhost": {sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/"}},
	} {
		k := &fakeAppArmor{loaded: map[string]bool{}}
		h := tt.host
		if name != "apparmor off" && name != "no default" {
			h = Host{AppArmorEnabled: true, AppArmorDefaultProfile: "podunit-default"}
		}
		h.AppArmor = k
		if st, err := LoadAppArmor(context.Background(), tt.sc, h); err != nil || st != (AppArmorState{}) || k.asked != nil || k.ensured != nil {
			t.Errorf("%s: state %+v err %v, asked %q ensured %q", name, st, err, k.asked, k.ensured)
		}
	}
}

func TestLoadAppArmorErrors(t *testing.T) {
	host := Host{AppArmorEnabled: true, AppArmorDefaultProfile: "podunit-default"}
	k := &fakeAppArmor{loaded: map[string]bool{}, listErr: errors.New("permission denied")}
	host.AppArmor = k
	if _, err := LoadAppArmor(context.Background(), &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/x"}, host); err == nil {
		t.Error("unreadable profiles list: want an error")
	}
	k = &fakeAppArmor{loaded: map[string]bool{}, defaultErr: fmt.Errorf("no parser: %w", errdefs.ErrPrecondition)}
	host.AppArmor = k
	st, err := LoadAppArmor(context.Background(), &runtimeapi.LinuxContainerSecurityContext{}, host)
	if err != nil || !errors.Is(st.DefaultErr, errdefs.ErrPrecondition) {
		t.Errorf("failed default load: state %+v err %v", st, err)
	}
}
