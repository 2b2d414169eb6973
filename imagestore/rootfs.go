package imagestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage"
	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/idtools"

	"github.com/podunit/podunit/errdefs"
)

// Kinds of storage containers podunit creates. A storage "container" is a
// writable layer on an image; podunit uses one per container root
// filesystem and one per image volume.
const (
	kindRootfs      = "rootfs"
	kindImageVolume = "image-volume"
)

// ownerMeta is stored as the storage container's metadata. It marks what
// podunit owns, so that a store shared with podman never has podman's
// containers listed or collected by podunit.
type ownerMeta struct {
	Podunit bool   `json:"podunit"`
	Kind    string `json:"kind"`
	Owner   string `json:"owner"` // the CRI container ID
	Name    string `json:"name,omitempty"`
	Image   string `json:"image"`
}

func parseOwnerMeta(s string) (ownerMeta, bool) {
	var m ownerMeta
	if json.Unmarshal([]byte(s), &m) != nil || !m.Podunit || m.Owner == "" {
		return ownerMeta{}, false
	}
	return m, true
}

// IDMap maps a user namespace's IDs onto the host's (one OCI mapping per
// range, as in linux.uidMappings).
type IDMap struct {
	UIDs, GIDs []specs.LinuxIDMapping
}

// CreateContainerRootfs creates the writable layer for a container on the
// image imageRef names (usually its ID). name, if set, must be unique in
// the store. Creating a rootfs that already exists for the same image is a
// no-op, so a retried CreateContainer does not fail on its own leftovers.
//
// With idmap (a container in a pod's user namespace) the filesystem is
// mounted ID-mapped: root-owned image files belong to the namespace's root
// (host ID idmap.UIDs[0].HostID), and what the container writes lands in
// its layer with host IDs. The overlay driver idmaps the image's layers
// at mount time where the kernel can (idmapped lower directories), and
// otherwise storage makes a chowned copy of the image for the mapping.
func (s *Store) CreateContainerRootfs(ctx context.Context, containerID, imageRef, name string, idmap *IDMap) error {
	if containerID == "" {
		return fmt.Errorf("%w: empty container ID", errdefs.ErrInvalid)
	}
	// An image ID (what the container manager passes, from Resolve) goes
	// to storage as is: its CreateContainer finds the image itself, and a
	// lookup first would be one more call per create queuing on the
	// store's locks (issue 20). An unknown ID is NotFound all the same.
	imageID := trimDigestAlgo(imageRef)
	if !imageIDPattern.MatchString(imageID) {
		img, err := s.lookup(imageRef)
		if err != nil {
			return err
		}
		imageID = img.ID
	}
	return s.createLayer(ctx, containerID, imageID, ownerMeta{
		Podunit: true, Kind: kindRootfs, Owner: containerID, Name: name, Image: imageID,
	}, idmap)
}

func storageIDMap(m []specs.LinuxIDMapping) []idtools.IDMap {
	out := make([]idtools.IDMap, len(m))
	for i, x := range m {
		out[i] = idtools.IDMap{ContainerID: int(x.ContainerID), HostID: int(x.HostID), Size: int(x.Size)}
	}
	return out
}

func (s *Store) createLayer(ctx context.Context, id, imageID string, meta ownerMeta, idmap *IDMap) error {
	raw, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	var names []string
	if meta.Name != "" {
		names = []string{meta.Name}
	}
	var opts *storage.ContainerOptions
	if meta.Kind == kindImageVolume {
		// overlay then mounts the image's layers alone, without a writable
		// upper layer: read-only on the host too, not only in the container.
		opts = &storage.ContainerOptions{MountOpts: []string{"ro"}}
	}
	if idmap != nil {
		if len(idmap.UIDs) == 0 || len(idmap.GIDs) == 0 {
			return fmt.Errorf("%w: ID mapping of %s %s needs uid and gid mappings", errdefs.ErrInvalid, meta.Kind, id)
		}
		if err := s.traversable(); err != nil {
			return err
		}
		if opts == nil {
			opts = &storage.ContainerOptions{}
		}
		opts.UIDMap, opts.GIDMap = storageIDMap(idmap.UIDs), storageIDMap(idmap.GIDs)
	}
	c, err := s.store.CreateContainer(id, names, imageID, "", string(raw), opts)
	if err == nil {
		s.mounts.created(id, c.MountLabel())
	}
	if errors.Is(err, storage.ErrDuplicateID) {
		if c, cerr := s.store.Container(id); cerr == nil && c.ImageID == imageID {
			if m, ok := parseOwnerMeta(c.Metadata); ok && m.Kind == meta.Kind && m.Owner == meta.Owner {
				return nil
			}
		}
	}
	if err != nil {
		return storageErr(fmt.Sprintf("creating %s %s on image %s", meta.Kind, id, imageID), err)
	}
	s.log.DebugContext(ctx, "created writable layer", "kind", meta.Kind, "id", id, "image", imageID)
	return nil
}

// traversable lets IDs outside the host's root reach the layers' mount
// points: the runtime sets up a user-namespaced container's root
// filesystem from inside the user namespace, as the namespace's root,
// which is "others" on the host and cannot search storage's 0700 graph
// root and driver directory. Search without read (0711) reveals no names;
// each layer directory stays 0700, owned by root, or for a mapped
// container's layer by the namespace's root.
func (s *Store) traversable() error {
	root := s.store.GraphRoot()
	for _, d := range []string{root, filepath.Join(root, s.store.GraphDriverName())} {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("storage directory: %w", err)
		}
		if st.Mode().Perm()&0o011 != 0o011 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("storage directory %s searchable for user namespaces: %w", d, err)
			}
		}
	}
	return nil
}

// MountRootfs mounts a container's root filesystem and returns its path.
// It is idempotent, also across a podunit restart: a filesystem that is
// still mounted is returned as is, without stacking another mount or
// raising the mount count, so one UnmountRootfs always undoes it.
func (s *Store) MountRootfs(ctx context.Context, containerID string) (string, error) {
	return s.mount(ctx, containerID)
}

// mount mounts a writable layer once. What this process mounted and the
// kernel still has mounted is answered from memory (StartContainer's
// mount of the rootfs CreateContainer mounted), and a layer this process
// has just created is mounted without asking whether it is: every storage
// call takes store-wide locks, and under a burst of creates each such
// question queued behind the others' layer writes (issue 20). Anything
// else (a podunit restart, a mount gone behind podunit's back) asks
// storage as before.
func (s *Store) mount(ctx context.Context, id string) (string, error) {
	if p := s.mounts.mounted(id); p != "" {
		if ok, err := mountinfo.Mounted(p); err == nil && ok {
			return p, nil
		}
		s.mounts.forget(id)
	}
	label, fresh := s.mounts.takeFresh(id)
	if !fresh {
		c, err := s.store.Container(id)
		if err != nil {
			return "", storageErr("container filesystem "+id, err)
		}
		label = c.MountLabel()
		if n, err := s.store.Mounted(id); err == nil && n > 0 {
			if layer, err := s.store.Layer(c.LayerID); err == nil && layer.MountPoint != "" {
				if ok, err := mountinfo.Mounted(layer.MountPoint); err == nil && ok {
					s.mounts.mountedAt(id, layer.MountPoint)
					return layer.MountPoint, nil
				}
			}
			// The count outlived the mount (someone unmounted it behind
			// storage's back): reset it before mounting afresh.
			s.log.WarnContext(ctx, "stale mount count, remounting", "id", id, "count", n)
			if _, err := s.store.Unmount(id, true); err != nil && !errors.Is(err, storage.ErrLayerNotMounted) {
				return "", storageErr("resetting mount of "+id, err)
			}
		}
	}
	path, err := s.store.Mount(id, label)
	if err != nil {
		return "", storageErr("mounting container filesystem "+id, err)
	}
	s.mounts.mountedAt(id, path)
	return path, nil
}

// mountCache is what Store.mount may answer without storage. It only
// ever holds what this process did itself; an unmount or delete drops
// the layer's entry before storage is asked.
type mountCache struct {
	mu sync.Mutex
	// at: writable layers this process mounted, by storage container ID
	at map[string]string
	// fresh: layers this process created and has not mounted (storage
	// counts no mount for them), with their mount label
	fresh map[string]string
}

func (m *mountCache) created(id, label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fresh == nil {
		m.fresh = map[string]string{}
	}
	m.fresh[id] = label
}

func (m *mountCache) takeFresh(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	label, ok := m.fresh[id]
	delete(m.fresh, id)
	return label, ok
}

func (m *mountCache) mountedAt(id, path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at == nil {
		m.at = map[string]string{}
	}
	m.at[id] = path
}

func (m *mountCache) mounted(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.at[id]
}

func (m *mountCache) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.at, id)
	delete(m.fresh, id)
}

// UnmountRootfs unmounts a container's root filesystem and its image
// volumes. Unknown or unmounted containers are not an error.
func (s *Store) UnmountRootfs(ctx context.Context, containerID string) error {
	if err := s.UnmountImageVolumes(ctx, containerID); err != nil {
		return err
	}
	return s.unmount(containerID)
}

func (s *Store) unmount(id string) error {
	s.mounts.forget(id)
	_, err := s.store.Unmount(id, true)
	switch {
	case err == nil, errors.Is(err, storage.ErrContainerUnknown), errors.Is(err, storage.ErrLayerUnknown),
		errors.Is(err, storage.ErrLayerNotMounted):
		return nil
	}
	return storageErr("unmounting "+id, err)
}

// DeleteRootfs unmounts and deletes a container's root filesystem and its
// image volumes. Deleting what is not there succeeds.
func (s *Store) DeleteRootfs(ctx context.Context, containerID string) error {
	if err := s.DeleteImageVolumes(ctx, containerID); err != nil {
		return err
	}
	return s.deleteLayer(ctx, containerID)
}

func (s *Store) deleteLayer(ctx context.Context, id string) error {
	s.mounts.forget(id)
	// Unmount first only what storage counts as mounted: a forced unmount
	// of an unmounted layer still calls umount and rewrites and fsyncs
	// mountpoints.json under the store's global layer lock, and a removal
	// after a create that failed has unmounted already. RemoveContainer
	// leaves the mounts to this deletion (podunit's reaper). A mount storage
	// never counted (podunit killed inside Mount) is still taken down:
	// DeleteContainer's removal unmounts what it finds busy.
	if n, err := s.store.Mounted(id); err != nil || n > 0 {
		if err := s.unmount(id); err != nil {
			return err
		}
	}
	err := s.store.DeleteContainer(id)
	if err == nil || errors.Is(err, storage.ErrContainerUnknown) || errors.Is(err, storage.ErrNotAContainer) {
		if err == nil {
			s.log.DebugContext(ctx, "deleted writable layer", "id", id)
		}
		return nil
	}
	return storageErr("deleting container filesystem "+id, err)
}

// ListRootfs returns the IDs of every container that owns podunit storage
// (a root filesystem or image volumes), for garbage collection: calling
// DeleteRootfs on an ID podunit no longer knows reclaims all of it.
func (s *Store) ListRootfs(ctx context.Context) ([]string, error) {
	containers, err := s.store.Containers()
	if err != nil {
		return nil, storageErr("listing container filesystems", err)
	}
	seen := map[string]bool{}
	var ids []string
	for _, c := range containers {
		if m, ok := parseOwnerMeta(c.Metadata); ok && !seen[m.Owner] {
			seen[m.Owner] = true
			ids = append(ids, m.Owner)
		}
	}
	return ids, nil
}

// RootfsUsage is the space and inodes a container's writable layer uses.
func (s *Store) RootfsUsage(ctx context.Context, containerID string) (bytes, inodes uint64, err error) {
	c, err := s.store.Container(containerID)
	if err != nil {
		return 0, 0, storageErr("container filesystem "+containerID, err)
	}
	driver, err := s.store.GraphDriver()
	if err != nil {
		return 0, 0, fmt.Errorf("graph driver: %w", err)
	}
	du, err := driver.ReadWriteDiskUsage(c.LayerID)
	if err != nil {
		return 0, 0, storageErr("measuring container filesystem "+containerID, err)
	}
	return uint64(max(du.Size, 0)), uint64(max(du.InodeCount, 0)), nil
}

// imageVolumeID names the storage container backing one image volume; it
// is derived, not random, so that mounting again after a restart finds the
// same one. One image mounted twice into a container shares it.
func imageVolumeID(containerID, imageID string) string {
	sum := sha256.Sum256([]byte("podunit-image-volume\x00" + containerID + "\x00" + imageID))
	return hex.EncodeToString(sum[:])
}

// MountImageVolume mounts the image imageRef names (a CRI Mount.image)
// read-only for a container and returns the host path, to be bind-mounted
// (read-only as well) into the container. With overlay the mount itself is
// read-only; vfs cannot do that, and there the path is a private copy, so
// writes could reach neither the image nor another container. It is
// idempotent.
func (s *Store) MountImageVolume(ctx context.Context, containerID, imageRef string) (string, error) {
	if containerID == "" {
		return "", fmt.Errorf("%w: empty container ID", errdefs.ErrInvalid)
	}
	img, err := s.lookup(imageRef)
	if err != nil {
		return "", err
	}
	id := imageVolumeID(containerID, img.ID)
	if err := s.createLayer(ctx, id, img.ID, ownerMeta{
		Podunit: true, Kind: kindImageVolume, Owner: containerID, Image: img.ID,
	}, nil); err != nil {
		return "", err
	}
	return s.mount(ctx, id)
}

// imageVolumes lists the storage containers backing containerID's image volumes.
func (s *Store) imageVolumes(containerID string) ([]string, error) {
	containers, err := s.store.Containers()
	if err != nil {
		return nil, storageErr("listing image volumes", err)
	}
	var ids []string
	for _, c := range containers {
		if m, ok := parseOwnerMeta(c.Metadata); ok && m.Kind == kindImageVolume && m.Owner == containerID {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// UnmountImageVolumes unmounts every image volume of a container.
func (s *Store) UnmountImageVolumes(ctx context.Context, containerID string) error {
	ids, err := s.imageVolumes(containerID)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.unmount(id); err != nil {
			return err
		}
	}
	return nil
}

// DeleteImageVolumes unmounts and deletes every image volume of a container.
func (s *Store) DeleteImageVolumes(ctx context.Context, containerID string) error {
	ids, err := s.imageVolumes(containerID)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.deleteLayer(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// RootfsChanges lists what a container changed in its writable layer
// against its image: the rootfs diff of a checkpoint.
func (s *Store) RootfsChanges(ctx context.Context, containerID string) ([]archive.Change, error) {
	c, err := s.store.Container(containerID)
	if err != nil {
		return nil, storageErr("container filesystem "+containerID, err)
	}
	ch, err := s.store.Changes("", c.LayerID)
	if err != nil {
		return nil, storageErr("changes of container filesystem "+containerID, err)
	}
	return ch, nil
}
