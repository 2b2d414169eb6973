package container

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/mountns"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// rootfsBind is where a user-namespaced container's root filesystem is
// bound for the runtime. The runtime sets the root filesystem up from
// inside the pod's user namespace, as its root, which is "others" on the
// host: it cannot search the image store's 0700 directories above the
// mount, only this path, whose directories podunit makes searchable
// (0711: no listing) for it. Containers in the host's user namespace use
// the store's mount directly.
func (m *Manager) rootfsBind(id string) string { return filepath.Join(m.runDir(id), "rootfs") }

// bindRootfs binds the mounted root filesystem src at rootfsBind(id).
func (m *Manager) bindRootfs(id, src string) (string, error) {
	dst := m.rootfsBind(id)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", fmt.Errorf("rootfs bind point: %w", err)
	}
	for _, d := range []string{m.opts.RunDir, m.runDir(id)} {
		if err := os.Chmod(d, 0o711); err != nil {
			return "", fmt.Errorf("rootfs bind point: %w", err)
		}
	}
	if isMountPoint(dst) {
		return dst, nil // a retried create
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind rootfs %s to %s: %w", src, dst, err)
	}
	return dst, nil
}

// unbindRootfs undoes bindRootfs; nothing bound is fine. It goes before
// the store unmounts and deletes the layer, so no mount outlives it.
func (m *Manager) unbindRootfs(id string) error { return unmountAll(m.rootfsBind(id)) }

// unmountAll takes every mount stacked on p off; nothing mounted is fine.
func unmountAll(p string) error {
	for i := 0; isMountPoint(p); i++ {
		if i == 16 {
			return fmt.Errorf("unmount %s: still mounted", p)
		}
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// removeRunDir removes the container's run directory, unmounting its root
// filesystem bind and the host mounts cloned for bidirectional propagation
// first: os.RemoveAll would descend into them and delete the container's
// files, or the host's.
func (m *Manager) removeRunDir(id string) error { return removeRunDirAt(m.runDir(id)) }

// removeRunDirAt is removeRunDir of a run directory at dir (its place in
// the run trash after a Remove); a missing dir is fine.
func removeRunDirAt(dir string) error {
	if err := unmountRunDir(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// unmountRunDir takes every mount in a run directory down: the root
// filesystem bind and the clones of host mounts. It names them relative
// to dir (as rootfsBind and propagatedDir do), so it works on a run
// directory moved into the trash as well.
func unmountRunDir(dir string) error {
	if err := unmountAll(filepath.Join(dir, "rootfs")); err != nil {
		return err
	}
	pdir := filepath.Join(dir, "propagated")
	ents, err := os.ReadDir(pdir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("run dir mounts: %w", err)
	}
	for _, e := range ents {
		if err := unmountAll(filepath.Join(pdir, e.Name())); err != nil {
			return fmt.Errorf("run dir mounts: %w", err)
		}
	}
	return nil
}

// propagatedDir holds, with a private mount namespace, the clones of the
// host's mounts at the sources of the container's bidirectional mounts.
func (m *Manager) propagatedDir(id string) string { return filepath.Join(m.runDir(id), "propagated") }

// withHostPropagation returns cfg for the spec, with the host path of each
// bidirectional mount replaced by a clone of the host's mount tree there
// (mountns.BindFromHost). In the private namespace the host path is a
// slave copy: the container would see the host's new mounts but its own
// would never reach the host, which PROPAGATION_BIDIRECTIONAL promises
// (a CSI driver's mounts, critest's mount propagation specs). The clone is
// a peer of the host's mount, and so is the runtime's bind of it. Without a
// private namespace, or without such mounts, cfg comes back as it is; the
// record keeps the original, so status reports the kubelet's host path.
func (m *Manager) withHostPropagation(id string, cfg *runtimeapi.ContainerConfig) (*runtimeapi.ContainerConfig, error) {
	if m.opts.MountNS == "" {
		return cfg, nil
	}
	var out *runtimeapi.ContainerConfig
	for i, mnt := range cfg.GetMounts() {
		if mnt.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL || !filepath.IsAbs(mnt.GetHostPath()) {
			continue
		}
		src := mnt.GetHostPath()
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("bidirectional mount %s: host path: %v: %w", mnt.GetContainerPath(), err, errdefs.ErrInvalid)
		}
		if out == nil {
			out = proto.Clone(cfg).(*runtimeapi.ContainerConfig)
		}
		dst := filepath.Join(m.propagatedDir(id), strconv.Itoa(i))
		if err := os.MkdirAll(m.propagatedDir(id), 0o700); err != nil {
			return nil, fmt.Errorf("bidirectional mount %s: %w", mnt.GetContainerPath(), err)
		}
		if st.IsDir() {
			err = os.Mkdir(dst, 0o700)
		} else {
			err = os.WriteFile(dst, nil, 0o600)
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("bidirectional mount %s: %w", mnt.GetContainerPath(), err)
		}
		if !isMountPoint(dst) { // else a retried create
			if err := mountns.BindFromHost(src, dst); err != nil {
				return nil, fmt.Errorf("bidirectional mount %s: %w", mnt.GetContainerPath(), err)
			}
		}
		out.Mounts[i].HostPath = dst
	}
	if out == nil {
		return cfg, nil
	}
	return out, nil
}

func isMountPoint(p string) bool { return mountns.IsMountPoint(p) }
