package container

import (
	"context"
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/oci"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type specRequest struct {
	id          string
	cfg         *runtimeapi.ContainerConfig
	sandboxCfg  *runtimeapi.PodSandboxConfig
	pod         *Pod
	img         *imagestore.ImageInfo
	rootfs      string
	cgroupsPath string
	// features are the container's runtime handler's.
	features oci.Features
}

// buildSpec does the host lookups spec generation needs (users in the
// image, devices, seccomp and AppArmor profiles) and then the pure
// generation.
func (m *Manager) buildSpec(ctx context.Context, r specRequest) (*specs.Spec, *oci.User, error) {
	sc := r.cfg.GetLinux().GetSecurityContext()
	user, err := oci.ResolveUser(r.rootfs, sc, r.img.Config.User)
	if err != nil {
		return nil, nil, fmt.Errorf("create container %q: user: %w", r.cfg.GetMetadata().GetName(), err)
	}
	devs, err := oci.ResolveDevices(r.cfg.GetDevices())
	if err != nil {
		return nil, nil, fmt.Errorf("create container %q: devices: %w", r.cfg.GetMetadata().GetName(), err)
	}
	cdi, err := m.cdiInjector(r)
	if err != nil {
		return nil, nil, fmt.Errorf("create container %q: %w", r.cfg.GetMetadata().GetName(), err)
	}
	seccomp, err := oci.LoadSeccompLocalhost(sc)
	if err != nil {
		return nil, nil, fmt.Errorf("create container %q: %w", r.cfg.GetMetadata().GetName(), err)
	}
	aa, err := oci.LoadAppArmor(ctx, sc, m.opts.Host)
	if err != nil {
		return nil, nil, fmt.Errorf("create container %q: %w", r.cfg.GetMetadata().GetName(), err)
	}
	ic := r.img.Config
	spec, err := oci.GenerateSpec(oci.SpecInput{
		ContainerID:   r.id,
		Config:        r.cfg,
		SandboxConfig: r.sandboxCfg,
		Image: oci.ImageConfig{
			Entrypoint: ic.Entrypoint, Cmd: ic.Cmd, Env: ic.Env,
			WorkingDir: ic.WorkingDir, User: ic.User, StopSignal: ic.StopSignal,
		},
		RootfsPath: r.rootfs,
		Namespaces: oci.PodNamespaces{
			NetworkPath: r.pod.NetNSPath, IPCPath: r.pod.IPCNSPath,
			UTSPath: r.pod.UTSNSPath, PIDPath: r.pod.PIDNSPath, UserPath: r.pod.UserNSPath,
		},
		CgroupsPath: r.cgroupsPath,
		PodFiles: oci.PodFiles{
			ResolvConf: r.pod.ResolvConfPath, Hosts: r.pod.HostsPath, Hostname: r.pod.HostnamePath,
		},
		ShmPath:          r.pod.ShmPath,
		ResolvedUser:     user,
		Devices:          devs,
		CDI:              cdi,
		SeccompLocalhost: seccomp,
		SeccompDefault:   m.opts.SeccompDefault,
		AppArmor:         aa,
		Rlimits:          m.opts.Rlimits,

		DefaultCapabilities: m.opts.DefaultCapabilities,
		Runtime:             r.features,
		Host:                m.opts.Host,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create container %q: spec: %w", r.cfg.GetMetadata().GetName(), err)
	}
	return spec, user, nil
}

// cdiInjector re-reads the CDI spec directories when the container
// requests CDI devices, so a spec file a device plugin wrote since the last
// create is seen. Spec files that fail to load are only logged: other
// vendors' devices still resolve, and a requested device of a broken file
// fails generation as unknown, naming the file. nil when CDI is disabled.
func (m *Manager) cdiInjector(r specRequest) (oci.CDIInjector, error) {
	if m.opts.CDI == nil {
		return nil, nil // a nil *CDIRegistry must not become a non-nil interface
	}
	names, err := oci.CDIDeviceNames(r.cfg)
	if err != nil {
		return nil, err
	}
	if len(names) > 0 {
		if err := m.opts.CDI.Refresh(); err != nil {
			m.opts.Logger.Warn("CDI spec files with errors: their devices are unknown", "container", r.id, "err", err)
		}
	}
	return m.opts.CDI, nil
}

// stopSignal picks the signal systemd sends on stop: the CRI config's
// (ContainerStopSignals), else the image's StopSignal, else SIGTERM.
func stopSignal(cri runtimeapi.Signal, image string) (int, error) {
	if cri != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		sig, err := oci.ParseSignal(cri.String())
		if err != nil {
			return 0, fmt.Errorf("stop_signal: %w", err)
		}
		return int(sig), nil
	}
	if image == "" {
		return int(unix.SIGTERM), nil
	}
	sig, err := oci.ParseSignal(image)
	if err != nil {
		return 0, fmt.Errorf("image StopSignal: %w", err)
	}
	return int(sig), nil
}

// userNamespace is the ID mapping of the container's root filesystem: the
// pod's, when the pod has its own user namespace, which each of its
// containers joins. A container cannot have a user namespace the pod does
// not have, nor other mappings than the pod's: its processes and its
// files would not agree on who owns what.
func userNamespace(pod *Pod, cfg *runtimeapi.ContainerConfig) (*imagestore.IDMap, error) {
	podUIDs, podGIDs, err := oci.UserNamespaceMappings(pod.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions())
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.ID, err)
	}
	own := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	uids, gids, err := oci.UserNamespaceMappings(own)
	if err != nil {
		return nil, err
	}
	if pod.UserNSPath == "" {
		if uids != nil {
			return nil, fmt.Errorf("userns_options: pod %s runs in the host's user namespace, a container cannot have its own: %w", pod.ID, errdefs.ErrInvalid)
		}
		return nil, nil
	}
	if podUIDs == nil {
		return nil, fmt.Errorf("pod %s has a user namespace but no ID mappings in its config: %w", pod.ID, errdefs.ErrPrecondition)
	}
	if own != nil && (!slices.Equal(uids, podUIDs) || !slices.Equal(gids, podGIDs)) {
		return nil, fmt.Errorf("userns_options: a container joins its pod's user namespace (mode POD with the pod's mappings), got %v: %w", own, errdefs.ErrInvalid)
	}
	return &imagestore.IDMap{UIDs: podUIDs, GIDs: podGIDs}, nil
}
