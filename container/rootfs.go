package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
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
func (m *Manager) unbindRootfs(id string) error {
	p := m.rootfsBind(id)
	for i := 0; isMountPoint(p); i++ {
		if i == 16 {
			return fmt.Errorf("unbind rootfs %s: still mounted", p)
		}
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unbind rootfs %s: %w", p, err)
		}
	}
	return nil
}

// removeRunDir removes the container's run directory, unbinding its root
// filesystem first: os.RemoveAll would descend into the mount and delete
// the container's files.
func (m *Manager) removeRunDir(id string) error {
	if err := m.unbindRootfs(id); err != nil {
		return err
	}
	return os.RemoveAll(m.runDir(id))
}

// isMountPoint: p is the root of a mount (its mount ID differs from its
// parent's, or it is a bind of a directory on the same filesystem, which
// statx reports as STATX_ATTR_MOUNT_ROOT).
func isMountPoint(p string) bool {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, 0, &st); err != nil {
		return false
	}
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}
