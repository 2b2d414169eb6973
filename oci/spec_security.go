package oci

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci/seccomp"
)

// normalizeCap turns "net_admin" or "CAP_NET_ADMIN" into "CAP_NET_ADMIN".
func normalizeCap(c string) (string, error) {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	if !slices.Contains(KnownCapabilities, c) {
		return "", invalid("capabilities", "unknown capability %q", c)
	}
	return c, nil
}

func hostCaps(host []string) []string {
	if host == nil {
		return KnownCapabilities
	}
	return host
}

// Capabilities computes the container's capability set from the CRI request
// (containerd's order) on top of defaults (the operator's
// runtime.default_capabilities, "CHOWN" or "CAP_CHOWN"): ALL first, so
// individual adds and drops still apply on top; drops win over adds of the
// same capability.
func Capabilities(c *runtimeapi.Capability, defaults, host []string) ([]string, error) {
	caps := make([]string, 0, len(defaults))
	for _, d := range defaults {
		n, err := normalizeCap(d)
		if err != nil {
			return nil, fmt.Errorf("default capabilities: %w", err)
		}
		if !slices.Contains(caps, n) {
			caps = append(caps, n)
		}
	}
	if slices.ContainsFunc(c.GetAddCapabilities(), isAll) {
		caps = slices.Clone(hostCaps(host))
	}
	if slices.ContainsFunc(c.GetDropCapabilities(), isAll) {
		caps = nil
	}
	for _, a := range append(slices.Clone(c.GetAddCapabilities()), c.GetAddAmbientCapabilities()...) {
		if isAll(a) {
			continue
		}
		n, err := normalizeCap(a)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(caps, n) {
			caps = append(caps, n)
		}
	}
	for _, d := range c.GetDropCapabilities() {
		if isAll(d) {
			continue
		}
		n, err := normalizeCap(d)
		if err != nil {
			return nil, err
		}
		caps = slices.DeleteFunc(caps, func(x string) bool { return x == n })
	}
	return caps, nil
}

func isAll(c string) bool { return strings.EqualFold(c, "ALL") }

func withCapabilities(c *runtimeapi.Capability, defaults, host []string) SpecOpt {
	return func(s *specs.Spec) error {
		caps, err := Capabilities(c, defaults, host)
		if err != nil {
			return err
		}
		var ambient []string
		for _, a := range c.GetAddAmbientCapabilities() {
			n, err := normalizeCap(a)
			if err != nil {
				return err
			}
			if slices.Contains(caps, n) {
				ambient = append(ambient, n)
			}
		}
		// Inheritable stays empty except for ambient ones (which the kernel
		// requires there): a non-empty inheritable set lets file capabilities
		// of setuid-less binaries regain dropped privileges.
		process(s).Capabilities = &specs.LinuxCapabilities{
			Bounding:    caps,
			Effective:   slices.Clone(caps),
			Permitted:   slices.Clone(caps),
			Inheritable: slices.Clone(ambient),
			Ambient:     ambient,
		}
		return nil
	}
}

// unmaskedProc: the kubelet sends empty masked and read-only path lists only
// for procMount: Unmasked, which it allows only in a user namespace. Without
// a user namespace empty lists mean "not set" (critest, older clients) and the
// defaults apply.
func unmaskedProc(sc *runtimeapi.LinuxContainerSecurityContext, ns *runtimeapi.NamespaceOption) bool {
	return len(sc.GetMaskedPaths()) == 0 && len(sc.GetReadonlyPaths()) == 0 &&
		ns.GetUsernsOptions() != nil && ns.GetUsernsOptions().GetMode() == runtimeapi.NamespaceMode_POD
}

func withMaskedPaths(masked, readonly []string, unmasked bool) SpecOpt {
	return func(s *specs.Spec) error {
		l := linux(s)
		if unmasked {
			l.MaskedPaths, l.ReadonlyPaths = nil, nil
			return nil
		}
		if len(masked) == 0 {
			masked = DefaultMaskedPaths
		}
		if len(readonly) == 0 {
			readonly = DefaultReadonlyPaths
		}
		for _, p := range append(slices.Clone(masked), readonly...) {
			if !path.IsAbs(p) || hasDotDot(p) {
				return invalid("masked_paths/readonly_paths", "%q must be absolute without ..", p)
			}
		}
		l.MaskedPaths = slices.Clone(masked)
		l.ReadonlyPaths = slices.Clone(readonly)
		return nil
	}
}

// withPrivileged lifts confinement: every capability the host can grant,
// every host device, no masked or read-only paths, writable sysfs and cgroupfs.
// Seccomp and AppArmor are lifted by their own options.
func withPrivileged(privileged, sandboxPrivileged bool, host Host) SpecOpt {
	return func(s *specs.Spec) error {
		if !privileged {
			return nil
		}
		if !sandboxPrivileged {
			return invalid("privileged", "privileged container in a non-privileged pod sandbox")
		}
		caps := slices.Clone(hostCaps(host.Capabilities))
		p := process(s)
		p.Capabilities = &specs.LinuxCapabilities{
			Bounding: caps, Effective: slices.Clone(caps), Permitted: slices.Clone(caps),
		}
		l := linux(s)
		l.MaskedPaths, l.ReadonlyPaths = nil, nil
		for i, m := range s.Mounts {
			if m.Type == "sysfs" || m.Type == "cgroup" || m.Type == "cgroup2" {
				s.Mounts[i].Options = replaceOpt(m.Options, "ro", "rw")
			}
		}
		for _, d := range host.Devices {
			if !slices.ContainsFunc(l.Devices, func(x specs.LinuxDevice) bool { return x.Path == d.Path }) {
				l.Devices = append(l.Devices, d)
			}
		}
		resources(s).Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
		return nil
	}
}

func replaceOpt(opts []string, from, to string) []string {
	out := slices.Clone(opts)
	for i, o := range out {
		if o == from {
			out[i] = to
		}
	}
	return out
}

func withNoNewPrivs(v bool) SpecOpt {
	return func(s *specs.Spec) error {
		process(s).NoNewPrivileges = v
		return nil
	}
}

// seccompProfile reads the typed field, else the deprecated path string. A
// nil result means unconfined (CRI: an unset profile is unconfined).
func seccompProfile(sc *runtimeapi.LinuxContainerSecurityContext) *runtimeapi.SecurityProfile {
	if p := sc.GetSeccomp(); p != nil {
		return p
	}
	return legacyProfile(sc.GetSeccompProfilePath(), "docker/default")
}

func appArmorProfile(sc *runtimeapi.LinuxContainerSecurityContext) *runtimeapi.SecurityProfile {
	if p := sc.GetApparmor(); p != nil {
		return p
	}
	return legacyProfile(sc.GetApparmorProfile(), "")
}

func legacyProfile(v, alias string) *runtimeapi.SecurityProfile {
	switch {
	case v == "":
		return nil
	case v == "runtime/default" || (alias != "" && v == alias):
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case v == "unconfined":
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	case strings.HasPrefix(v, "localhost/"):
		return &runtimeapi.SecurityProfile{
			ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: strings.TrimPrefix(v, "localhost/"),
		}
	}
	// Unknown legacy values are passed on as a Localhost reference so the
	// option can reject them with the value in the message.
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: v}
}

// CheckSeccompProfile parses an operator's RuntimeDefault profile
// (runtime.seccomp_profile) as withSeccomp will, so a broken file is
// reported once at start rather than by every container that uses it.
func CheckSeccompProfile(b []byte) error {
	if _, err := seccomp.Load(b, seccomp.Filter{}); err != nil {
		return fmt.Errorf("seccomp profile: %w: %w", errdefs.ErrInvalid, err)
	}
	return nil
}

type seccompSources struct {
	Localhost []byte
	Default   []byte
	Arch      string
}

// withSeccomp must run after the capability and privileged options: the
// default profile allows syscalls by the final capability set.
func withSeccomp(p *runtimeapi.SecurityProfile, privileged bool, src seccompSources) SpecOpt {
	return func(s *specs.Spec) error {
		if privileged || p == nil || p.GetProfileType() == runtimeapi.SecurityProfile_Unconfined {
			linux(s).Seccomp = nil
			return nil
		}
		var caps []string
		if s.Process != nil && s.Process.Capabilities != nil {
			caps = s.Process.Capabilities.Bounding
		}
		f := seccomp.Filter{Arch: src.Arch, Caps: caps}
		switch p.GetProfileType() {
		case runtimeapi.SecurityProfile_RuntimeDefault:
			if len(src.Default) == 0 {
				linux(s).Seccomp = seccomp.Default(f)
				return nil
			}
			sp, err := seccomp.Load(src.Default, f)
			if err != nil {
				return invalid("seccomp", "configured default profile: %v", err)
			}
			linux(s).Seccomp = sp
		case runtimeapi.SecurityProfile_Localhost:
			if !path.IsAbs(p.GetLocalhostRef()) {
				return invalid("seccomp", "localhost profile %q is not an absolute path", p.GetLocalhostRef())
			}
			if len(src.Localhost) == 0 {
				return invalid("seccomp", "localhost profile %q not loaded (LoadSeccompLocalhost)", p.GetLocalhostRef())
			}
			sp, err := seccomp.Load(src.Localhost, f)
			if err != nil {
				return invalid("seccomp", "localhost profile %q: %v", p.GetLocalhostRef(), err)
			}
			linux(s).Seccomp = sp
		default:
			return invalid("seccomp", "unknown profile type %v", p.GetProfileType())
		}
		return nil
	}
}

// appArmorLocalhost is the profile name a Localhost reference names: the
// kubelet sends "localhost/<name>" in the typed field too.
func appArmorLocalhost(p *runtimeapi.SecurityProfile) (string, error) {
	name := strings.TrimPrefix(p.GetLocalhostRef(), "localhost/")
	if name == "" || strings.ContainsAny(name, "\x00\n") {
		return "", invalid("apparmor", "invalid localhost profile name %q", p.GetLocalhostRef())
	}
	return name, nil
}

// withAppArmor sets the process's AppArmor profile (containerd's rules):
// privileged and Unconfined run unconfined; with AppArmor on, RuntimeDefault
// and an unset profile get Host.AppArmorDefaultProfile (unset falls back to
// unconfined when it could not be loaded, RuntimeDefault fails), Localhost
// needs its profile loaded. With AppArmor off only Localhost is an error.
func withAppArmor(p *runtimeapi.SecurityProfile, privileged bool, host Host, st AppArmorState) SpecOpt {
	return func(s *specs.Spec) error {
		pr := process(s)
		pr.ApparmorProfile = ""
		if privileged || p.GetProfileType() == runtimeapi.SecurityProfile_Unconfined {
			return nil
		}
		if p == nil {
			// kubernetes#51746: no profile means the runtime's default.
			if host.AppArmorEnabled && host.AppArmorDefaultProfile != "" && st.DefaultErr == nil {
				pr.ApparmorProfile = host.AppArmorDefaultProfile
			}
			return nil
		}
		switch p.GetProfileType() {
		case runtimeapi.SecurityProfile_RuntimeDefault:
			// With AppArmor off there is nothing to default to; the kubelet
			// asks for RuntimeDefault on every host.
			if !host.AppArmorEnabled {
				return nil
			}
			if host.AppArmorDefaultProfile == "" {
				return errorf(errdefs.ErrUnimplemented, "apparmor", "no default profile on this host")
			}
			if st.DefaultErr != nil {
				// %v: the cause's own sentinel must not decide the code.
				return errorf(errdefs.ErrPrecondition, "apparmor", "RuntimeDefault: %v", st.DefaultErr)
			}
			pr.ApparmorProfile = host.AppArmorDefaultProfile
		case runtimeapi.SecurityProfile_Localhost:
			if !host.AppArmorEnabled {
				return errorf(errdefs.ErrUnimplemented, "apparmor",
					"profile %q requested but AppArmor is not enabled on this host", p.GetLocalhostRef())
			}
			name, err := appArmorLocalhost(p)
			if err != nil {
				return err
			}
			if !st.LocalhostLoaded {
				return errorf(errdefs.ErrPrecondition, "apparmor",
					"localhost profile %q is not loaded (load it with apparmor_parser on the node)", name)
			}
			pr.ApparmorProfile = name
		default:
			return invalid("apparmor", "unknown profile type %v", p.GetProfileType())
		}
		return nil
	}
}
