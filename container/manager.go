package container

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/idindex"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/statefile"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitcgroup"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ctr is one container in memory. mu serialises lifecycle operations on
// it; rec is replaced (never mutated in place) under mu.
type ctr struct {
	podID   string // immutable, readable under Manager.mu alone
	handler string // immutable, readable under Manager.mu alone
	// stopMu serializes the Stop calls of one container; taken before mu,
	// which Stop does not hold while the container's grace period runs.
	stopMu sync.Mutex
	mu     sync.Mutex
	rec    *record
	// init is the running container's init once known (zero otherwise):
	// it lets a status read answer without systemd (fastpath.go).
	init initProc
}

// Manager creates, runs and removes containers.
type Manager struct {
	opts Options
	sd   systemd.Conn
	imgs ImageStore
	pods Pods
	// rtMu guards rts, defHandler and features, which a reload replaces
	// together.
	rtMu       sync.RWMutex
	rts        map[string]oci.Runtime
	defHandler string
	// features are the handlers' (Deps.Features, then ProbeFeatures at a
	// reload), keyed like rts.
	features map[string]oci.Features
	logs     Logs      // may be nil
	evs      Publisher // may be nil
	plugins  Plugins   // may be nil
	// procRoot is where /proc is (tests point it at a fake one).
	procRoot string
	// transientDir is systemd's directory of transient units' files
	// (unitCollected); empty asks systemd every time.
	transientDir string

	mu    sync.RWMutex
	ctrs  map[string]*ctr
	names map[string]string // reservation key -> container id

	// reap deletes removed containers' files after Remove (reaper.go).
	reap reaper
}

// New returns a manager; call Recover before serving requests.
func New(opts Options, deps Deps) (*Manager, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if deps.Systemd == nil || deps.Images == nil || deps.Pods == nil || len(deps.Runtimes) == 0 {
		return nil, fmt.Errorf("container manager: missing dependency: %w", errdefs.ErrInvalid)
	}
	if _, ok := deps.Runtimes[opts.DefaultHandler]; !ok {
		return nil, fmt.Errorf("container manager: default handler %q has no runtime: %w", opts.DefaultHandler, errdefs.ErrInvalid)
	}
	for _, d := range []string{opts.StateDir, opts.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("container manager: %w", err)
		}
	}
	m := &Manager{
		opts: opts, sd: deps.Systemd, imgs: deps.Images, pods: deps.Pods, rts: deps.Runtimes, defHandler: opts.DefaultHandler, features: deps.Features, logs: deps.Logs, evs: deps.Events, plugins: deps.Plugins,
		procRoot: "/proc", transientDir: systemd.TransientDir, ctrs: map[string]*ctr{}, names: map[string]string{},
	}
	if err := m.startReaper(); err != nil {
		return nil, err
	}
	return m, nil
}

// nameKey is what must be unique: the kubelet encodes pod, name and
// attempt in the container name, and retries a create with the same ones.
func nameKey(podID string, md *runtimeapi.ContainerMetadata) string {
	return fmt.Sprintf("%s/%s/%d", podID, md.GetName(), md.GetAttempt())
}

func (m *Manager) reserve(key, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if other, ok := m.names[key]; ok {
		return fmt.Errorf("container name %q is reserved by %s: %w", key, other, errdefs.ErrExists)
	}
	m.names[key] = id
	return nil
}

func (m *Manager) release(key, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.names[key] == id {
		delete(m.names, key)
	}
}

// get finds the container a request names: its full ID or a unique prefix
// (package idindex), on every RPC alike.
func (m *Manager) get(ref string) (*ctr, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	id, err := idindex.Resolve("container", ref, m.ctrs)
	if err != nil {
		return nil, err
	}
	return m.ctrs[id], nil
}

func (m *Manager) runtime(handler string) (oci.Runtime, error) {
	rt, _, err := m.runtimeFeatures(handler)
	return rt, err
}

// runtimeFeatures is handler's runtime with its features, read together
// so a reload cannot pair one handler's runtime with another's features.
func (m *Manager) runtimeFeatures(handler string) (oci.Runtime, oci.Features, error) {
	m.rtMu.RLock()
	defer m.rtMu.RUnlock()
	if handler == "" {
		handler = m.defHandler
	}
	rt, ok := m.rts[handler]
	if !ok {
		return nil, oci.Features{}, fmt.Errorf("runtime handler %q is not configured: %w", handler, errdefs.ErrNotFound)
	}
	return rt, m.features[handler], nil
}

// HandlerFeatures are the default handler and every handler's features
// (names with no probed features map to none), as one consistent view of
// the handlers in force: CRI Status advertises them.
func (m *Manager) HandlerFeatures() (defaultHandler string, features map[string]oci.Features) {
	m.rtMu.RLock()
	defer m.rtMu.RUnlock()
	out := make(map[string]oci.Features, len(m.rts))
	for n := range m.rts {
		out[n] = m.features[n]
	}
	return m.defHandler, out
}

// runtimes is the current set of runtimes, for callers that try them all.
func (m *Manager) runtimes() []oci.Runtime {
	m.rtMu.RLock()
	defer m.rtMu.RUnlock()
	out := make([]oci.Runtime, 0, len(m.rts))
	for _, rt := range m.rts {
		out = append(out, rt)
	}
	return out
}

// SetRuntimes replaces the runtimes and the default handler (a reload of
// runtime.handlers). Containers record the handler they were created with
// and keep using it by name, so a handler that an existing container uses
// must stay: without it the container could no longer be exec'd into,
// updated or cleaned up. Such a change is refused and nothing changes.
//
// New handlers, and handlers whose runtime changed, are asked for their
// features (ProbeFeatures, as at start, each bounded by
// oci.FeaturesTimeout); unchanged ones keep theirs. As at start, a handler
// that cannot answer gets no features rather than failing the reload.
func (m *Manager) SetRuntimes(ctx context.Context, defaultHandler string, rts map[string]oci.Runtime) error {
	if _, ok := rts[defaultHandler]; !ok {
		return fmt.Errorf("default handler %q has no runtime: %w", defaultHandler, errdefs.ErrInvalid)
	}
	// Probing runs the runtimes' binaries: no lock is held meanwhile.
	m.rtMu.RLock()
	features := make(map[string]oci.Features, len(rts))
	probe := map[string]oci.Runtime{}
	for n, rt := range rts {
		if old, ok := m.rts[n]; ok && reflect.DeepEqual(old, rt) {
			features[n] = m.features[n]
			continue
		}
		probe[n] = rt
	}
	m.rtMu.RUnlock()
	maps.Copy(features, ProbeFeatures(ctx, probe, m.opts.Logger))
	m.mu.RLock()
	defer m.mu.RUnlock()
	var used []string
	for id, c := range m.ctrs {
		if _, ok := rts[c.handler]; !ok {
			used = append(used, fmt.Sprintf("%s (container %s)", c.handler, id))
		}
	}
	if len(used) > 0 {
		sort.Strings(used)
		return fmt.Errorf("runtime handlers still in use cannot be removed: %s: %w", strings.Join(used, ", "), errdefs.ErrPrecondition)
	}
	m.rtMu.Lock()
	m.rts, m.defHandler, m.features = rts, defaultHandler, features
	m.rtMu.Unlock()
	return nil
}

// logPath joins the pod's log directory and the container's relative log
// path, refusing anything that would land outside the directory.
func logPath(dir, rel string) (string, error) {
	if rel == "" {
		return "", nil
	}
	if dir == "" {
		return "", fmt.Errorf("log_path %q without a pod log_directory: %w", rel, errdefs.ErrInvalid)
	}
	if filepath.IsAbs(rel) {
		return "", fmt.Errorf("log_path %q must be relative to the pod log directory: %w", rel, errdefs.ErrInvalid)
	}
	for _, e := range strings.Split(rel, "/") {
		if e == ".." {
			return "", fmt.Errorf("log_path %q leaves the pod log directory: %w", rel, errdefs.ErrInvalid)
		}
	}
	return filepath.Join(dir, rel), nil
}

func validateConfig(cfg *runtimeapi.ContainerConfig) error {
	switch {
	case cfg == nil:
		return fmt.Errorf("container config: missing: %w", errdefs.ErrInvalid)
	case cfg.GetMetadata() == nil || cfg.GetMetadata().GetName() == "":
		return fmt.Errorf("container config: metadata.name: missing: %w", errdefs.ErrInvalid)
	case cfg.GetImage().GetImage() == "":
		return fmt.Errorf("container config: image: missing: %w", errdefs.ErrInvalid)
	}
	for _, mnt := range cfg.GetMounts() {
		if mnt.GetContainerPath() == "" || hasDotDot(mnt.GetContainerPath()) {
			return fmt.Errorf("container config: mount container_path %q: %w", mnt.GetContainerPath(), errdefs.ErrInvalid)
		}
		if hasDotDot(mnt.GetHostPath()) {
			return fmt.Errorf("container config: mount host_path %q: %w", mnt.GetHostPath(), errdefs.ErrInvalid)
		}
		// Before anything is mounted for the container (image volumes).
		if _, _, err := oci.MountOptions(mnt); err != nil {
			return fmt.Errorf("container config: %w", err)
		}
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

// Create makes a container in pod podID: its writable root filesystem, its
// OCI bundle and its record. Nothing runs until Start.
func (m *Manager) Create(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (_ string, retErr error) {
	// A checkpoint archive as the image: restore (docs/checkpoint.md).
	var restore string
	if isCheckpointImage(cfg.GetImage().GetImage()) {
		var err error
		if cfg, restore, err = m.openCheckpoint(cfg); err != nil {
			return "", err
		}
		defer os.RemoveAll(restore) // gone once adopted
	}
	if err := validateConfig(cfg); err != nil {
		return "", err
	}
	pod, err := m.pods.Pod(ctx, podID)
	if err != nil {
		return "", fmt.Errorf("create container %q: pod %s: %w", cfg.GetMetadata().GetName(), podID, err)
	}
	if sandboxCfg == nil {
		sandboxCfg = pod.Config
	}
	lp, err := logPath(pod.LogDirectory, cfg.GetLogPath())
	if err != nil {
		return "", err
	}
	rt, features, err := m.runtimeFeatures(pod.RuntimeHandler)
	if err != nil {
		return "", err
	}
	if restore != "" && !features.Checkpoint {
		return "", fmt.Errorf("create container %q from a checkpoint: runtime handler %s cannot restore (built without CRIU): %w", cfg.GetMetadata().GetName(), rt.Name(), errdefs.ErrPrecondition)
	}
	if err := m.checkUnified(rt, cfg.GetLinux().GetResources().GetUnified()); err != nil {
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	id := newID()
	key := nameKey(podID, cfg.GetMetadata())
	if err := m.reserve(key, id); err != nil {
		return "", err
	}
	log := m.opts.Logger.With("container", id, "pod", podID, "name", cfg.GetMetadata().GetName())
	var undo []func(context.Context) error
	defer func() {
		if retErr == nil {
			return
		}
		// Fresh context: the caller's may be what just expired.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for i := len(undo) - 1; i >= 0; i-- {
			if err := undo[i](uctx); err != nil {
				log.Warn("rollback of failed create", "err", err)
			}
		}
		m.release(key, id)
	}()

	img, err := m.imgs.Resolve(ctx, cfg.GetImage().GetImage())
	if err != nil {
		return "", fmt.Errorf("create container %q: image %q: %w", cfg.GetMetadata().GetName(), cfg.GetImage().GetImage(), err)
	}
	if err := os.MkdirAll(m.stateDir(id), 0o700); err != nil {
		return "", fmt.Errorf("create container: %w", err)
	}
	undo = append(undo, func(context.Context) error { return os.RemoveAll(m.stateDir(id)) })
	idmap, err := userNamespace(pod, cfg)
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	if err := m.imgs.CreateContainerRootfs(ctx, id, img.ID, "", idmap); err != nil {
		return "", fmt.Errorf("create container %q: rootfs: %w", cfg.GetMetadata().GetName(), err)
	}
	undo = append(undo, func(ctx context.Context) error { return m.imgs.DeleteRootfs(ctx, id) })
	rootfs, err := m.imgs.MountRootfs(ctx, id)
	if err != nil {
		return "", fmt.Errorf("create container %q: mount rootfs: %w", cfg.GetMetadata().GetName(), err)
	}
	undo = append(undo, func(ctx context.Context) error { return m.imgs.UnmountRootfs(ctx, id) })
	undo = append(undo, func(context.Context) error { return m.removeRunDir(id) })
	if restore != "" {
		if err := m.adoptRestore(id, restore, rootfs); err != nil {
			return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
		}
	}
	if idmap != nil {
		undo = append(undo, func(context.Context) error { return m.unbindRootfs(id) })
		if rootfs, err = m.bindRootfs(id, rootfs); err != nil {
			return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
		}
	}

	// The record keeps its own copy of the config: image volume mounts get
	// their host path and image ID filled in.
	cfg = proto.Clone(cfg).(*runtimeapi.ContainerConfig)
	if err := m.mountImageVolumes(ctx, id, cfg); err != nil {
		return "", err
	}
	undo = append(undo, func(ctx context.Context) error { return m.imgs.DeleteImageVolumes(ctx, id) })

	specCfg, err := m.withHostPropagation(id, cfg)
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	unit := unitName(id)
	spec, user, err := m.buildSpec(ctx, specRequest{
		id: id, cfg: specCfg, sandboxCfg: sandboxCfg, pod: pod, img: img, rootfs: rootfs, features: features,
		cgroupsPath: systemd.UnitCgroupPath(pod.Slice, unit) + "/container",
	})
	if err != nil {
		return "", err
	}
	if m.plugins != nil {
		// Held until the container is listed: a plugin registering
		// meanwhile is synchronized after, and sees it there.
		unblock := m.plugins.BlockSync()
		defer unblock()
		info, err := m.adjustByPlugins(ctx, adjustRequest{id: id, podID: podID, cfg: cfg, spec: spec, rt: rt})
		if err != nil {
			return "", err
		}
		undo = append(undo, func(ctx context.Context) error { m.plugins.RemoveContainer(ctx, info); return nil })
	}
	if m.opts.NoHugetlb && spec.Linux != nil && spec.Linux.Resources != nil && len(spec.Linux.Resources.HugepageLimits) > 0 {
		log.Debug("dropping hugepage limits: no hugetlb cgroup for the runtime")
		spec.Linux.Resources.HugepageLimits = nil
	}
	if err := statefile.Write(filepath.Join(m.bundleDir(id), "config.json"), spec); err != nil {
		return "", fmt.Errorf("create container %q: bundle: %w", cfg.GetMetadata().GetName(), err)
	}
	sig, err := stopSignal(cfg.GetStopSignal(), img.Config.StopSignal)
	if err != nil {
		return "", err
	}
	md := sandboxCfg.GetMetadata()
	r := &record{
		ID: id, PodID: podID, Metadata: cfg.GetMetadata(), Config: cfg,
		PodName: md.GetName(), PodNamespace: md.GetNamespace(), PodUID: md.GetUid(),
		Unit: unit, Slice: pod.Slice, Handler: rt.Name(),
		ImageID: img.ID, ImageRef: imageRef(img), ImageName: imageName(cfg.GetImage().GetImage(), img), RepoDigests: img.RepoDigests,
		StopSignal: sig, User: user, LogPath: lp, Resources: cfg.GetLinux().GetResources(),
		State: StateCreated, CreatedAt: time.Now().UnixNano(), Restore: restore != "",
	}
	if err := m.save(r); err != nil {
		return "", fmt.Errorf("create container: %w", err)
	}
	m.mu.Lock()
	m.ctrs[id] = &ctr{podID: podID, handler: r.Handler, rec: r}
	m.mu.Unlock()
	log.Debug("container created", "unit", unit)
	m.publish(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, id, podID)
	if m.plugins != nil {
		m.plugins.PostCreateContainer(ctx, r.info(0))
	}
	return id, nil
}

// mountImageVolumes mounts the image of every CRI mount that names one
// (KEP-4639 image volumes) and points the mount at it; the mount's image
// spec gets the image ID as image_ref, which ContainerStatus reports.
func (m *Manager) mountImageVolumes(ctx context.Context, id string, cfg *runtimeapi.ContainerConfig) error {
	for _, mnt := range cfg.GetMounts() {
		if mnt.GetImage().GetImage() == "" {
			continue
		}
		if mnt.GetHostPath() != "" {
			return fmt.Errorf("mount %s: both host_path and image: %w", mnt.GetContainerPath(), errdefs.ErrInvalid)
		}
		// An image volume is the image itself: never writable (KEP-4639).
		if !mnt.GetReadonly() {
			return fmt.Errorf("image volume %s: must be read-only: %w", mnt.GetContainerPath(), errdefs.ErrInvalid)
		}
		sub := mnt.GetImageSubPath()
		if filepath.IsAbs(sub) || hasDotDot(sub) {
			return fmt.Errorf("image volume %s: sub path %q: %w", mnt.GetContainerPath(), sub, errdefs.ErrInvalid)
		}
		img, err := m.imgs.Resolve(ctx, mnt.GetImage().GetImage())
		if err != nil {
			return fmt.Errorf("image volume %s: %w", mnt.GetContainerPath(), err)
		}
		path, err := m.imgs.MountImageVolume(ctx, id, img.ID)
		if err != nil {
			return fmt.Errorf("image volume %s: %w", mnt.GetContainerPath(), err)
		}
		if sub != "" {
			// Symlinks in the image resolve inside the image, never on the host.
			if path, err = securejoin.SecureJoin(path, sub); err != nil {
				return fmt.Errorf("image volume %s: sub path %q: %v: %w", mnt.GetContainerPath(), sub, err, errdefs.ErrInvalid)
			}
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("image volume %s: sub path %q does not exist in image %s: %w", mnt.GetContainerPath(), sub, img.ID, errdefs.ErrInvalid)
			}
		}
		mnt.HostPath = path
		mnt.Image.ImageRef = img.ID
	}
	return nil
}

// imageRef is the legacy ContainerStatus.image_ref: the repo digest when
// there is one (what the kubelet shows as the pod's imageID), the image ID
// otherwise, in the form PullImage returns it.
// imageName is the name a container records for its image when the request
// gives no user_specified_image (a kubelet before 1.30, crictl): asked by
// the image's ID, its first tag, as containerd reports; otherwise the name
// asked for.
func imageName(asked string, img *imagestore.ImageInfo) string {
	if (asked == img.ID || asked == "sha256:"+img.ID) && len(img.RepoTags) > 0 {
		return img.RepoTags[0]
	}
	return asked
}

func imageRef(img *imagestore.ImageInfo) string {
	if len(img.RepoDigests) > 0 {
		return img.RepoDigests[0]
	}
	return img.ID
}

// Remove stops a container if it runs and removes it: unit, runtime
// state, leftover cgroups and every mount go now, and the removal is made
// durable (the state directory moves into the trash) before Remove returns;
// deleting the files (root filesystem and image volumes in storage, run
// directory, trash entry) is left to the reaper (reaper.go). Removing a
// missing container succeeds; a failed step leaves the record so a retry
// finishes.
func (m *Manager) Remove(ctx context.Context, id string) error {
	c, err := m.get(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec == nil {
		return nil // removed while we waited for the lock
	}
	if c.rec.State == StateRunning {
		if err := m.stopLocked(ctx, c, 0); err != nil {
			return fmt.Errorf("remove container %s: %w", id, err)
		}
	}
	r := c.rec
	// An exited container's unit is usually collected already (systemd
	// drops it once ExecStopPost is done), or stopped and about to be:
	// one listing is cheaper than the kill, stop and reset it may spare.
	stop, reset := m.unitCleanup(ctx, r.Unit)
	if stop {
		if err := m.forceStopUnit(ctx, r.Unit); err != nil {
			return fmt.Errorf("remove container %s: unit: %w", id, err)
		}
	}
	if reset {
		if err := m.sd.ResetFailedUnit(ctx, r.Unit); err != nil {
			return fmt.Errorf("remove container %s: unit: %w", id, err)
		}
	}
	// The unit is gone, so its recorder is done; when its `delete` left
	// nothing behind there is no runtime to fork.
	if rt, err := m.runtime(r.Handler); err == nil && !runtimeStateGone(rt, id) {
		if err := rt.Delete(ctx, id); err != nil {
			return fmt.Errorf("remove container %s: runtime state: %w", id, err)
		}
	}
	if err := unitcgroup.RemoveLeftover(m.opts.CgroupRoot, systemd.UnitCgroupPath(r.Slice, r.Unit)); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	// The clones of host mounts in the run directory go now: they hold the
	// host's filesystems busy (a CSI driver's unmount would fail). The
	// storage mounts (rootfs, image volumes) hold only podunit's own layers
	// and go with their deletion in the reaper: storage's unmount, which
	// rewrites its mount records under its global layer lock, was half of
	// the call (2.2-2.6 of 4.3-5.1 ms, issue 20).
	if err := unmountRunDir(m.runDir(id)); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	// The commit point: from here a restart no longer loads the container.
	if err := m.trashState(id); err != nil {
		// No trash on this filesystem: delete everything now, as before
		// the reaper, the record last.
		m.opts.Logger.Warn("removal cannot be deferred: deleting inline", "container", id, "err", err)
		if err := m.reapFiles(ctx, id); err != nil {
			return fmt.Errorf("remove container %s: %w", id, err)
		}
		if err := os.RemoveAll(m.stateDir(id)); err != nil {
			return fmt.Errorf("remove container %s: %w", id, err)
		}
	}
	m.mu.Lock()
	delete(m.ctrs, id)
	if m.names[nameKey(r.PodID, r.Metadata)] == id {
		delete(m.names, nameKey(r.PodID, r.Metadata))
	}
	m.mu.Unlock()
	c.rec = nil
	m.publish(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, id, r.PodID)
	if m.plugins != nil {
		pctx, cancel := pluginCtx(ctx)
		m.plugins.RemoveContainer(pctx, r.info(0))
		cancel()
	}
	m.deferReap(ctx, id)
	return nil
}

// publish sends a lifecycle event; callers hold the container's lock, so
// a container's events are published in the order they happened.
func (m *Manager) publish(t runtimeapi.ContainerEventType, id, podID string) {
	if m.evs != nil {
		m.evs.Publish(events.NewEvent(t, id, podID))
	}
}
