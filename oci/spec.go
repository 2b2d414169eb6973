// Package oci turns a CRI container request into an OCI runtime-spec bundle
// and drives the OCI runtime (runc or crun) that podunit's systemd units run:
// every runc/crun command line (cli.go) and the one exec, with or without a
// terminal (exec_cli.go, exec_terminal.go, exechelper.go).
//
// Spec generation is a list of ordered, pure options over an explicit
// SpecInput: every host lookup (users in the image, device nodes, seccomp
// profile files, host capabilities) happens before GenerateSpec, in the
// non-pure helpers of this package, so each option can be tested on a bare
// spec.
package oci

import (
	"fmt"
	"maps"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// SpecInput is everything GenerateSpec needs; it reads nothing else.
type SpecInput struct {
	ContainerID   string
	Config        *runtimeapi.ContainerConfig
	SandboxConfig *runtimeapi.PodSandboxConfig
	Image         ImageConfig
	// RootfsPath is the container's mounted root filesystem (absolute).
	RootfsPath string
	Namespaces PodNamespaces
	// CgroupsPath becomes linux.cgroupsPath; it must lie inside the unit's own
	// cgroup (DESIGN.md), so it is required.
	CgroupsPath string
	PodFiles    PodFiles
	// ShmPath is the pod's /dev/shm on the host; empty gives the container a
	// private tmpfs.
	ShmPath string
	// ResolvedUser comes from ResolveUser; nil is only allowed when neither
	// the image nor the config names a user (root).
	ResolvedUser *User
	// Devices are Config.Devices resolved on the host by ResolveDevices.
	Devices []Device
	// CDI injects the CDI devices the config requests (CDIDeviceNames),
	// a CDIRegistry refreshed before; nil when CDI is disabled, and then
	// such a request is ErrInvalid.
	CDI CDIInjector
	// SeccompLocalhost is the content of the Localhost seccomp profile the
	// config names (LoadSeccompLocalhost).
	SeccompLocalhost []byte
	// SeccompDefault, when set, replaces the built-in RuntimeDefault profile
	// (operator configuration, Docker or runtime-spec JSON).
	SeccompDefault []byte
	// AppArmor is what the kernel says about the profiles the config needs
	// (LoadAppArmor).
	AppArmor AppArmorState
	// Rlimits are the operator's process limits; none means inherit.
	Rlimits []specs.POSIXRlimit
	// DefaultCapabilities are what an unprivileged container gets before
	// the request's adds and drops (runtime.default_capabilities).
	DefaultCapabilities []string
	// Runtime is what the container's handler supports (Runtime.Features,
	// probed at start): a mount it cannot make is refused here, with the
	// request's fault, rather than by the runtime at start.
	Runtime Features
	Host    Host
}

// ImageConfig is the part of the image's config the process inherits.
type ImageConfig struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
	StopSignal string
}

// PodNamespaces are the pod's pinned namespace files (nsfs bind mounts). An
// empty path means: the host namespace when the sandbox asks for NODE mode,
// otherwise a new private namespace.
type PodNamespaces struct {
	NetworkPath string
	IPCPath     string
	UTSPath     string
	// PIDPath is the pod's shared PID namespace (PID mode POD) or the target
	// container's (mode TARGET).
	PIDPath string
	// UserPath joins the pod's user namespace; empty with userns mode POD
	// has the runtime create one for the container with the mappings.
	UserPath string
}

// PodFiles are host paths of the files the pod shares with its containers;
// empty ones are not mounted.
type PodFiles struct {
	ResolvConf string
	Hosts      string
	Hostname   string
}

// User is the process identity; the CRI layer reports it in
// ContainerStatus.user.
type User struct {
	UID            uint32
	GID            uint32
	AdditionalGids []uint32
	Username       string
}

// Device is a host device node to expose, with its cgroup permissions
// ("rwm" subset).
type Device struct {
	specs.LinuxDevice
	Permissions string
}

// Host holds facts about the machine and the runtime podunit runs.
type Host struct {
	// AppArmorEnabled: the kernel enforces AppArmor (apparmor.Host.Enabled).
	AppArmorEnabled bool
	// AppArmorDefaultProfile is the profile RuntimeDefault, and an unset
	// profile of a non-privileged container, map to (apparmor.DefaultProfile);
	// empty: RuntimeDefault is unimplemented.
	AppArmorDefaultProfile string
	// AppArmor answers LoadAppArmor's questions (apparmor.Host); nil with
	// AppArmor off.
	AppArmor AppArmorKernel
	// OOMScoreAdjMin is podunit's own oom_score_adj: without CAP_SYS_RESOURCE
	// nothing lower can be set, so requests are clamped up to it. nil: no clamp.
	OOMScoreAdjMin *int
	// Capabilities the runtime can grant ("ALL", privileged); nil means
	// KnownCapabilities. See HostCapabilities.
	Capabilities []string
	// Devices are all host devices, given to privileged containers
	// (HostDevices).
	Devices []specs.LinuxDevice
	// CgroupNamespace gives each container a cgroup namespace (cgroup v2).
	CgroupNamespace bool
	// Arch is GOARCH for seccomp architecture selection; empty = this binary's.
	Arch string
}

// SpecVersion is the ociVersion podunit writes. The spec is generated with
// runtime-spec v1.3.0's types, but crun before 1.9 rejects any version that
// is not 1.0.x ("unknown version specified"); runc and crun decide behaviour
// by the fields present, not by this string.
const SpecVersion = "1.0.2-dev"

// SpecOpt is one pure step of spec generation.
type SpecOpt func(*specs.Spec) error

// GenerateSpec builds the OCI spec for in. Errors wrap errdefs.ErrInvalid
// (naming the field), ErrUnimplemented for features the host lacks.
func GenerateSpec(in SpecInput) (*specs.Spec, error) {
	if err := validateInput(&in); err != nil {
		return nil, err
	}
	s := &specs.Spec{Version: SpecVersion}
	for _, o := range specOpts(&in) {
		if err := o(s); err != nil {
			return nil, fmt.Errorf("container %s: %w", in.ContainerID, err)
		}
	}
	return s, nil
}

func validateInput(in *SpecInput) error {
	switch {
	case in.ContainerID == "":
		return invalid("container id", "empty")
	case in.Config == nil:
		return invalid("config", "missing")
	case in.SandboxConfig == nil:
		return invalid("sandbox config", "missing")
	case !path.IsAbs(in.RootfsPath):
		return invalid("rootfs path", "%q is not absolute", in.RootfsPath)
	case in.CgroupsPath == "":
		return invalid("cgroups path", "empty")
	}
	return nil
}

// specOpts is the ordered option list: later options see what earlier ones
// set (seccomp filters by the final capability set, privileged undoes
// confinement).
func specOpts(in *SpecInput) []SpecOpt {
	sc := in.Config.GetLinux().GetSecurityContext()
	privileged := sc.GetPrivileged()
	nsOpts := namespaceOptions(in)
	return []SpecOpt{
		withRoot(in.RootfsPath, sc.GetReadonlyRootfs()),
		withAnnotations(in.Config.GetAnnotations()),
		withProcessArgs(in.Image, in.Config.GetCommand(), in.Config.GetArgs()),
		withEnv(in.Image.Env, in.SandboxConfig.GetHostname(), in.Config.GetEnvs()),
		withCwd(in.Image.WorkingDir, in.Config.GetWorkingDir()),
		withTerminal(in.Config.GetTty()),
		withRlimits(in.Rlimits),
		withUser(in.ResolvedUser, sc, in.Image.User),
		withOOMScoreAdj(in.Config.GetLinux().GetResources().GetOomScoreAdj(), in.Host.OOMScoreAdjMin),
		withNamespaces(nsOpts, in.Namespaces, in.Host.CgroupNamespace),
		withHostname(in.SandboxConfig.GetHostname()),
		withUserNamespace(usernsOptions(in, nsOpts), in.Namespaces.UserPath),
		withDefaultMounts(in.ShmPath),
		withPodFiles(in.PodFiles, sc.GetReadonlyRootfs()),
		withCRIMounts(in.Config.GetMounts(), in.Runtime),
		withDevices(in.Devices),
		withCDIDevices(in.Config, in.CDI),
		withCapabilities(sc.GetCapabilities(), in.DefaultCapabilities, in.Host.Capabilities),
		withMaskedPaths(sc.GetMaskedPaths(), sc.GetReadonlyPaths(), unmaskedProc(sc, nsOpts)),
		withPrivileged(privileged, in.SandboxConfig.GetLinux().GetSecurityContext().GetPrivileged(), in.Host),
		withNoNewPrivs(sc.GetNoNewPrivs()),
		withSeccomp(seccompProfile(sc), privileged, seccompSources{
			Localhost: in.SeccompLocalhost, Default: in.SeccompDefault, Arch: in.Host.Arch,
		}),
		withAppArmor(appArmorProfile(sc), privileged, in.Host, in.AppArmor),
		withSysctls(in.SandboxConfig.GetLinux().GetSysctls()),
		withResources(in.Config.GetLinux().GetResources()),
		withCgroupsPath(in.CgroupsPath),
	}
}

// namespaceOptions: the kubelet copies the pod's namespace options into each
// container's security context; older clients only set the sandbox's.
func namespaceOptions(in *SpecInput) *runtimeapi.NamespaceOption {
	if o := in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions(); o != nil {
		return o
	}
	return in.SandboxConfig.GetLinux().GetSecurityContext().GetNamespaceOptions()
}

// usernsOptions: a container without user namespace options of its own
// still joins its pod's user namespace, with the pod's mappings.
func usernsOptions(in *SpecInput, o *runtimeapi.NamespaceOption) *runtimeapi.UserNamespace {
	if u := o.GetUsernsOptions(); u != nil || in.Namespaces.UserPath == "" {
		return u
	}
	return in.SandboxConfig.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", field, errdefs.ErrInvalid, fmt.Sprintf(format, args...))
}

func withRoot(rootfs string, readonly bool) SpecOpt {
	return func(s *specs.Spec) error {
		s.Root = &specs.Root{Path: rootfs, Readonly: readonly}
		return nil
	}
}

func withAnnotations(a map[string]string) SpecOpt {
	return func(s *specs.Spec) error {
		if len(a) > 0 {
			s.Annotations = maps.Clone(a)
		}
		return nil
	}
}

func withCgroupsPath(p string) SpecOpt {
	return func(s *specs.Spec) error {
		linux(s).CgroupsPath = p
		return nil
	}
}

func linux(s *specs.Spec) *specs.Linux {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	return s.Linux
}

func process(s *specs.Spec) *specs.Process {
	if s.Process == nil {
		s.Process = &specs.Process{}
	}
	return s.Process
}

func resources(s *specs.Spec) *specs.LinuxResources {
	l := linux(s)
	if l.Resources == nil {
		l.Resources = &specs.LinuxResources{}
	}
	return l.Resources
}

// hasDotDot reports a ".." element, which could walk out of the rootfs or
// the pod's directories.
func hasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

func errorf(sentinel error, field, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", field, sentinel, fmt.Sprintf(format, args...))
}
