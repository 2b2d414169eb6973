package podlife

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/sandbox"
)

// A pod checkpoint (CheckpointPod, KEP-5823) is a directory the caller
// owns; podunit writes into it (docs/checkpoint.md):
//
//	pod.json                 the manifest (podManifest)
//	containers/<id>.tar      one container checkpoint archive each, in the
//	                         layout CheckpointContainer writes
const (
	manifestFile  = "pod.json"
	containersDir = "containers"
	// manifestVersion changes when the layout does; a restore refuses
	// any other.
	manifestVersion = 1
	// maxManifest bounds what a restore reads of a caller's pod.json.
	maxManifest = 1 << 20
)

// containerIDRe is the form of a podunit container ID (container.newID):
// the only names of archive files, so a manifest cannot point elsewhere.
var containerIDRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// podManifest is pod.json.
type podManifest struct {
	Version        int    `json:"version"`
	PodID          string `json:"podID"`
	RuntimeHandler string `json:"runtimeHandler"`
	// PodConfig is the checkpointed pod's PodSandboxConfig (protojson),
	// for inspection: a restore runs the config of its request.
	PodConfig      json.RawMessage     `json:"podConfig"`
	CheckpointedAt time.Time           `json:"checkpointedAt"`
	Containers     []manifestContainer `json:"containers"`
}

type manifestContainer struct {
	Name     string `json:"name"`
	ID       string `json:"id"` // names containers/<id>.tar
	Image    string `json:"image"`
	ImageRef string `json:"imageRef"` // a repo digest, or the ID without one
	ImageID  string `json:"imageID"`
}

// sameImage reports whether a restore request's image names the
// checkpointed one: by the name it was created with, its digest or its
// ID (the kubelet sends the image ref it resolved, "sha256:<id>").
func (c manifestContainer) sameImage(img string) bool {
	id := strings.TrimPrefix(c.ImageID, "sha256:")
	return img == c.Image || img == c.ImageRef || (id != "" && strings.TrimPrefix(img, "sha256:") == id)
}

func archivePath(dir, id string) string { return filepath.Join(dir, containersDir, id+".tar") }

// Checkpoint writes a consistent checkpoint of a running pod's containers
// ids into dir, an existing empty directory: it freezes the pod's slice
// for the cut, holds each container there (paused), dumps each with CRIU
// while all of them stand still, and thaws and resumes on every path, so
// no part of the pod stays frozen. On error nothing
// of the checkpoint is left in dir. No container is created in the pod
// meanwhile.
func (p *Pods) Checkpoint(ctx context.Context, podID, dir string, ids []string) (retErr error) {
	if err := emptyDir(dir); err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("checkpoint pod %s: no container IDs: %w", podID, errdefs.ErrInvalid)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return fmt.Errorf("checkpoint pod %s: container %q named twice: %w", podID, id, errdefs.ErrInvalid)
		}
		seen[id] = true
	}
	return p.exclusive(podID, func() error {
		sb, err := p.sandboxes.Get(ctx, podID)
		if err != nil {
			return err
		}
		if sb.State != sandbox.StateReady {
			return fmt.Errorf("checkpoint pod %s: pod is not ready: %w", podID, errdefs.ErrPrecondition)
		}
		if sb.PIDNSPath != "" {
			// CRIU would dump the pod's init with the first container
			// (it is PID 1 of their namespace) and a restore could not
			// put it back into the new pod's init.
			return fmt.Errorf("checkpoint pod %s: its containers share one PID namespace, which podunit cannot checkpoint: %w", podID, errdefs.ErrPrecondition)
		}
		all, err := p.containers.List(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
		if err != nil {
			return err
		}
		byID := map[string]*runtimeapi.Container{}
		for _, c := range all {
			if c.GetPodSandboxId() == podID {
				byID[c.GetId()] = c
			}
		}
		m := podManifest{Version: manifestVersion, PodID: podID, RuntimeHandler: sb.RuntimeHandler}
		for _, id := range ids {
			c, ok := byID[id]
			if !ok {
				return fmt.Errorf("checkpoint pod %s: no container %q in the pod: %w", podID, id, errdefs.ErrNotFound)
			}
			if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
				return fmt.Errorf("checkpoint pod %s: container %s (%s) is %s, not running: %w", podID, id, c.GetMetadata().GetName(), c.GetState(), errdefs.ErrPrecondition)
			}
			m.Containers = append(m.Containers, manifestContainer{
				Name: c.GetMetadata().GetName(), ID: id, Image: c.GetImage().GetImage(), ImageRef: c.GetImageRef(), ImageID: c.GetImageId(),
			})
		}
		if m.PodConfig, err = protojson.Marshal(sb.Config); err != nil {
			return fmt.Errorf("checkpoint pod %s: %w", podID, err)
		}
		return p.checkpointFrozen(ctx, podID, dir, &m)
	})
}

// checkpointFrozen takes the pod's cut and dumps it. CRIU cannot dump
// tasks an ancestor cgroup keeps frozen (it thaws the container's own
// cgroup to run its parasite code in them, which does nothing under a
// frozen slice: the dump hangs), so the slice's freeze only makes the
// cut: while it holds, each selected container is paused in its own
// cgroup (the runtime's pause); then the slice is thawed, and every
// container stays paused at the cut until all are dumped. CRIU dumps a
// paused container and pauses it again when done.
func (p *Pods) checkpointFrozen(ctx context.Context, podID, dir string, m *podManifest) (retErr error) {
	if err := os.Mkdir(filepath.Join(dir, containersDir), 0o700); err != nil {
		return fmt.Errorf("checkpoint pod %s: %w", podID, err)
	}
	// Runs last: after the thaw and the resumes, whose failures are
	// errors too.
	defer func() {
		if retErr != nil {
			os.Remove(filepath.Join(dir, manifestFile))
			os.RemoveAll(filepath.Join(dir, containersDir))
		}
	}()
	var paused []string
	defer func() {
		// After the thaw (deferred below, so it runs first). A context
		// of its own: the caller's may be the deadline that expired.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		for _, id := range paused {
			if err := p.containers.Resume(rctx, id); err != nil {
				p.log.Error("container left paused: resume failed", "pod", podID, "container", id, "err", err)
				if retErr == nil {
					retErr = fmt.Errorf("checkpoint pod %s: %w", podID, err)
				}
			}
		}
	}()
	if err := p.sandboxes.Freeze(ctx, podID); err != nil {
		// A freeze that failed half way (a deadline while systemd was
		// freezing, a lost bus) must not leave the pod frozen either;
		// one that systemd refused froze nothing.
		if !errors.Is(err, errdefs.ErrPrecondition) && !errors.Is(err, errdefs.ErrNotFound) {
			p.thaw(ctx, podID)
		}
		return fmt.Errorf("checkpoint pod %s: %w", podID, err)
	}
	frozen := true
	defer func() {
		if !frozen {
			return
		}
		if err := p.thaw(ctx, podID); err != nil && retErr == nil {
			retErr = fmt.Errorf("checkpoint pod %s: %w", podID, err)
		}
	}()
	for _, c := range m.Containers {
		if err := p.containers.Pause(ctx, c.ID); err != nil {
			return fmt.Errorf("checkpoint pod %s: %w", podID, err)
		}
		paused = append(paused, c.ID)
	}
	if err := p.thaw(ctx, podID); err != nil {
		return fmt.Errorf("checkpoint pod %s: %w", podID, err) // the deferred thaw tries again
	}
	frozen = false
	for _, c := range m.Containers {
		if err := p.containers.Checkpoint(ctx, c.ID, archivePath(dir, c.ID), 0); err != nil {
			return fmt.Errorf("checkpoint pod %s: %w", podID, err)
		}
	}
	m.CheckpointedAt = time.Now().UTC()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint pod %s: %w", podID, err)
	}
	if err := os.WriteFile(filepath.Join(dir, manifestFile), b, 0o600); err != nil {
		return fmt.Errorf("checkpoint pod %s: %w", podID, err)
	}
	return nil
}

// thaw thaws the pod with a context of its own: the caller's may be the
// deadline that just expired, and a pod must never stay frozen. The
// systemd adapter bounds the call (systemd.call_timeout).
func (p *Pods) thaw(ctx context.Context, podID string) error {
	err := p.sandboxes.Thaw(context.WithoutCancel(ctx), podID)
	if err != nil {
		p.log.Error("pod left frozen: thaw failed", "pod", podID, "err", err)
	}
	return err
}

// emptyDir accepts an absolute, clean path of an existing, empty
// directory that is not a symlink: CheckpointPod's output_path.
func emptyDir(dir string) error {
	bad := func(why string) error {
		return fmt.Errorf("checkpoint directory %q: %s: %w", dir, why, errdefs.ErrInvalid)
	}
	switch {
	case dir == "":
		return bad("empty")
	case !filepath.IsAbs(dir):
		return bad("not an absolute path")
	case filepath.Clean(dir) != dir || strings.ContainsRune(dir, 0):
		return bad("not a clean path")
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return bad("not an existing directory")
	}
	f, err := os.Open(dir)
	if err != nil {
		return bad(err.Error())
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); !errors.Is(err, io.EOF) {
		return bad("not empty")
	}
	return nil
}

// RestoreRequest is RestorePod's: the pod checkpoint directory, the pod
// config and runtime handler to run the new pod with, and one container
// config per checkpointed container, matched by metadata name.
type RestoreRequest struct {
	Dir        string
	Config     *runtimeapi.PodSandboxConfig
	Handler    string
	Containers []*runtimeapi.ContainerConfig
}

// Restore runs a new pod from req.Config and creates in it, from the
// checkpoint, every container of the checkpoint: created, not started
// (StartContainer restores each). On error the new pod and whatever
// was created in it are removed. The checkpoint directory is only read.
func (p *Pods) Restore(ctx context.Context, req RestoreRequest) (podID string, out []*runtimeapi.RestoredContainer, retErr error) {
	m, err := readManifest(req.Dir)
	if err != nil {
		return "", nil, err
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("restore pod from %s: %s: %w", req.Dir, fmt.Sprintf(format, a...), errdefs.ErrInvalid)
	}
	if req.Config == nil {
		return "", nil, bad("pod sandbox config is required")
	}
	if len(req.Containers) == 0 {
		return "", nil, bad("no container configs")
	}
	if req.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() == runtimeapi.NamespaceMode_POD {
		return "", nil, bad("a pod whose containers share one PID namespace cannot be restored")
	}
	byName := map[string]manifestContainer{}
	for _, c := range m.Containers {
		byName[c.Name] = c
	}
	seen := map[string]bool{}
	for _, c := range req.Containers {
		name := c.GetMetadata().GetName()
		switch {
		case name == "":
			return "", nil, bad("a container config has no metadata name")
		case seen[name]:
			return "", nil, bad("container %q named twice", name)
		}
		seen[name] = true
		mc, ok := byName[name]
		if !ok {
			return "", nil, bad("container %q is not in the checkpoint", name)
		}
		if img := c.GetImage().GetImage(); img != "" && !mc.sameImage(img) {
			return "", nil, bad("container %q: image %q, checkpointed %q (%s)", name, img, mc.Image, mc.ImageRef)
		}
	}
	if len(seen) != len(byName) {
		return "", nil, bad("%d container configs for the checkpoint's %d containers", len(seen), len(byName))
	}

	// Not the named result: a failing return sets that to "" before the
	// rollback below runs.
	id, err := p.sandboxes.Run(ctx, req.Config, req.Handler)
	if err != nil {
		return "", nil, fmt.Errorf("restore pod from %s: %w", req.Dir, err)
	}
	defer func() {
		if retErr == nil {
			return
		}
		// Fresh context: the caller's may be what just expired.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := p.Remove(uctx, id); err != nil {
			p.log.Error("restore pod: removing the half-restored pod failed", "pod", id, "err", err)
		}
	}()
	for _, c := range req.Containers {
		name := c.GetMetadata().GetName()
		cfg := proto.Clone(c).(*runtimeapi.ContainerConfig)
		cfg.Image = &runtimeapi.ImageSpec{Image: archivePath(req.Dir, byName[name].ID)}
		cid, err := p.CreateContainer(ctx, id, cfg, req.Config)
		if err != nil {
			return "", nil, fmt.Errorf("restore pod from %s: container %q: %w", req.Dir, name, err)
		}
		out = append(out, &runtimeapi.RestoredContainer{Name: name, ContainerId: cid})
	}
	return id, out, nil
}

// readManifest reads and checks a pod checkpoint's pod.json and that
// every container archive it names is a regular file of the directory.
func readManifest(dir string) (*podManifest, error) {
	bad := func(why string, err error) error {
		if err != nil {
			why += ": " + err.Error()
		}
		return fmt.Errorf("pod checkpoint %q: %s: %w", dir, why, errdefs.ErrInvalid)
	}
	switch {
	case !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || strings.ContainsRune(dir, 0):
		return nil, bad("not a clean absolute path", nil)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, bad("not a directory", err)
	}
	path := filepath.Join(dir, manifestFile)
	if fi, err := os.Lstat(filepath.Join(dir, containersDir)); err != nil || !fi.IsDir() {
		return nil, bad(containersDir+"/ is not a directory", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, bad("no "+manifestFile, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, bad(manifestFile+" is not a regular file", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, bad(manifestFile, err)
	}
	if len(b) > maxManifest {
		return nil, bad(manifestFile+" is too large", nil)
	}
	var m podManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, bad(manifestFile, err)
	}
	if m.Version != manifestVersion {
		return nil, bad(fmt.Sprintf("%s version %d, podunit reads %d", manifestFile, m.Version, manifestVersion), nil)
	}
	if len(m.Containers) == 0 {
		return nil, bad("no containers", nil)
	}
	names := map[string]bool{}
	for _, c := range m.Containers {
		if !containerIDRe.MatchString(c.ID) {
			return nil, bad(fmt.Sprintf("container ID %q", c.ID), nil)
		}
		if c.Name == "" || names[c.Name] {
			return nil, bad(fmt.Sprintf("container name %q empty or twice", c.Name), nil)
		}
		names[c.Name] = true
		if fi, err := os.Lstat(archivePath(dir, c.ID)); err != nil || !fi.Mode().IsRegular() {
			return nil, bad("archive of container "+c.Name+" is not a regular file", err)
		}
	}
	return &m, nil
}
