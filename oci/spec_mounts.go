package oci

import (
	"path"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// withDefaultMounts: the kernel filesystems every container gets. /dev/shm is
// the pod's when it has one, so containers of a pod share POSIX shm.
func withDefaultMounts(shmPath string) SpecOpt {
	return func(s *specs.Spec) error {
		shm := specs.Mount{
			Destination: devShm, Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"},
		}
		if shmPath != "" {
			if !path.IsAbs(shmPath) {
				return invalid("shm path", "%q is not absolute", shmPath)
			}
			shm = specs.Mount{
				Destination: devShm, Type: "bind", Source: shmPath,
				Options: []string{"rbind", "rprivate", "nosuid", "noexec", "nodev", "rw"},
			}
		}
		s.Mounts = append(s.Mounts,
			specs.Mount{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			specs.Mount{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			specs.Mount{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			shm,
			specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		)
		return nil
	}
}

// withPodFiles bind-mounts the pod's hosts, resolv.conf and hostname; they
// follow the rootfs's read-only flag like containerd's.
func withPodFiles(f PodFiles, readonly bool) SpecOpt {
	return func(s *specs.Spec) error {
		for _, m := range []struct{ dst, src string }{
			{etcHosts, f.Hosts}, {etcResolvConf, f.ResolvConf}, {etcHostname, f.Hostname},
		} {
			if m.src == "" {
				continue
			}
			if !path.IsAbs(m.src) {
				return invalid("pod files", "%s source %q is not absolute", m.dst, m.src)
			}
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: m.dst, Type: "bind", Source: m.src,
				Options: []string{"rbind", "rprivate", rwOpt(readonly)},
			})
		}
		return nil
	}
}

func rwOpt(ro bool) string {
	if ro {
		return "ro"
	}
	return "rw"
}

// MountOptions returns the OCI options for a CRI bind mount and the rootfs
// propagation it needs ("" when none), rejecting the combinations critest
// lists as invalid.
func MountOptions(m *runtimeapi.Mount) (opts []string, rootfsPropagation string, err error) {
	opts = []string{"rbind"}
	switch m.GetPropagation() {
	case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		opts = append(opts, "rprivate")
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		opts, rootfsPropagation = append(opts, "rslave"), "rslave"
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		opts, rootfsPropagation = append(opts, "rshared"), "rshared"
	default:
		return nil, "", invalid("mounts", "%s: unknown propagation %v", m.GetContainerPath(), m.GetPropagation())
	}
	switch {
	case m.GetRecursiveReadOnly() && !m.GetReadonly():
		return nil, "", invalid("mounts", "%s: recursive read-only requires readonly", m.GetContainerPath())
	case m.GetRecursiveReadOnly() && m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		// A read-only submount propagated in later would be writable.
		return nil, "", invalid("mounts", "%s: recursive read-only requires private propagation", m.GetContainerPath())
	case m.GetRecursiveReadOnly():
		opts = append(opts, "rro")
	default:
		opts = append(opts, rwOpt(m.GetReadonly()))
	}
	extra, err := bindMountFlags(m)
	if err != nil {
		return nil, "", err
	}
	return append(opts, extra...), rootfsPropagation, nil
}

// bindMountFlags are the mount's KEP-5855 options: only the three flags the
// CRI defines. Anything else (an "exec" undoing a "noexec", "suid", a
// propagation or "rw" smuggled in) would change what the fields above
// decided, so it is refused rather than passed to the OCI runtime.
func bindMountFlags(m *runtimeapi.Mount) ([]string, error) {
	var out []string
	for _, o := range m.GetMountOptions() {
		switch o {
		case "noexec", "nodev", "nosuid":
			if !slices.Contains(out, o) {
				out = append(out, o)
			}
		default:
			return nil, invalid("mounts", "%s: mount option %q is not supported (only noexec, nodev, nosuid)", m.GetContainerPath(), o)
		}
	}
	return out, nil
}

// withCRIMounts adds the config's mounts, parents before children, replacing
// any default or pod-file mount at the same destination. A recursive
// read-only mount the handler cannot make is the request's fault: the
// kubelet only asks for one where RuntimeHandlerFeatures says it works.
func withCRIMounts(mounts []*runtimeapi.Mount, rt Features) SpecOpt {
	return func(s *specs.Spec) error {
		var out []specs.Mount
		prop := ""
		for _, m := range mounts {
			dst, src := m.GetContainerPath(), m.GetHostPath()
			if !path.IsAbs(dst) || hasDotDot(dst) || path.Clean(dst) == "/" {
				return invalid("mounts", "container path %q must be absolute, below / and without ..", dst)
			}
			if src == "" && m.GetImage() != nil {
				return invalid("mounts", "%s: image volume %q not mounted on the host (host_path is empty)", dst, m.GetImage().GetImage())
			}
			if !path.IsAbs(src) {
				return invalid("mounts", "%s: host path %q is not absolute", dst, src)
			}
			opts, p, err := MountOptions(m)
			if err != nil {
				return err
			}
			if m.GetRecursiveReadOnly() && !rt.RecursiveReadOnly {
				return invalid("mounts", "%s: recursive read-only mounts are not supported by this runtime handler (%s %s: no \"rro\" mount option, or the kernel lacks mount_setattr)",
					dst, rt.Source, rt.Version)
			}
			prop = strongerPropagation(prop, p)
			om := specs.Mount{Destination: path.Clean(dst), Type: "bind", Source: src, Options: opts}
			for _, id := range m.GetUidMappings() {
				om.UIDMappings = append(om.UIDMappings, idMap(id))
			}
			for _, id := range m.GetGidMappings() {
				om.GIDMappings = append(om.GIDMappings, idMap(id))
			}
			if len(om.UIDMappings) != len(om.GIDMappings) || (len(om.UIDMappings) > 0 && m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE) {
				return invalid("mounts", "%s: idmapped mounts need both uid and gid mappings and private propagation", dst)
			}
			out = append(out, om)
		}
		sort.SliceStable(out, func(i, j int) bool { return depth(out[i].Destination) < depth(out[j].Destination) })
		s.Mounts = slices.DeleteFunc(s.Mounts, func(d specs.Mount) bool {
			return slices.ContainsFunc(out, func(m specs.Mount) bool { return m.Destination == d.Destination })
		})
		s.Mounts = append(s.Mounts, out...)
		if prop != "" {
			linux(s).RootfsPropagation = prop
		}
		return nil
	}
}

// strongerPropagation: rshared is needed for any bidirectional mount and
// implies what rslave gives.
func strongerPropagation(a, b string) string {
	if a == "rshared" || b == "rshared" {
		return "rshared"
	}
	if a == "rslave" || b == "rslave" {
		return "rslave"
	}
	return ""
}

func depth(p string) int {
	return strings.Count(path.Clean(p), "/")
}

func idMap(m *runtimeapi.IDMapping) specs.LinuxIDMapping {
	return specs.LinuxIDMapping{ContainerID: m.GetContainerId(), HostID: m.GetHostId(), Size: m.GetLength()}
}

// withDevices exposes resolved devices; the cgroup denies every other device
// (the runtimes add their standard /dev/null, /dev/zero... allowances).
func withDevices(devs []Device) SpecOpt {
	return func(s *specs.Spec) error {
		rules := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
		l := linux(s)
		for _, d := range devs {
			if !path.IsAbs(d.Path) || hasDotDot(d.Path) {
				return invalid("devices", "container path %q must be absolute without ..", d.Path)
			}
			perms := d.Permissions
			if perms == "" {
				perms = "rwm"
			}
			if strings.Trim(perms, "rwm") != "" {
				return invalid("devices", "%s: permissions %q are not a subset of rwm", d.Path, d.Permissions)
			}
			if d.Type != "c" && d.Type != "b" && d.Type != "p" {
				return invalid("devices", "%s: type %q is not c, b or p", d.Path, d.Type)
			}
			l.Devices = append(l.Devices, d.LinuxDevice)
			if d.Type == "p" {
				continue
			}
			major, minor := d.Major, d.Minor
			rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: perms})
		}
		resources(s).Devices = rules
		return nil
	}
}
