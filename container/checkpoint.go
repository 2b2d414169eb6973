package container

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	"go.podman.io/storage/pkg/archive"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/statefile"
)

// criDumpFile holds the container's CRI ContainerConfig in a checkpoint
// archive (podunit's own entry; the others are checkpointctl's layout,
// which CRI-O and containerd write too).
const criDumpFile = "container.dump"

// criuBinary is what runc and crun run (from PATH); a variable for tests
// on hosts without it.
var criuBinary = "criu"

// Checkpoint writes a checkpoint archive of a running container to
// location (KEP-2008): CRIU's images of its processes, which keep
// running, plus what a restore needs besides memory (see
// docs/checkpoint.md). timeout bounds the whole checkpoint; zero means
// none beyond the caller's context.
func (m *Manager) Checkpoint(ctx context.Context, id, location string, timeout time.Duration) error {
	if err := validCheckpointLocation(location); err != nil {
		return err
	}
	c, err := m.lockCurrent(ctx, id, m.refreshNowLocked)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	r := c.rec
	if r.State != StateRunning {
		return fmt.Errorf("checkpoint container %s: state is %s, not running: %w", r.ID, r.State, errdefs.ErrPrecondition)
	}
	if r.Config.GetTty() {
		// A restore runs `runc restore` without a console socket, so the
		// restored process would lose its terminal (docs/checkpoint.md).
		return fmt.Errorf("checkpoint container %s: it has a terminal (tty), which podunit cannot restore: %w", r.ID, errdefs.ErrPrecondition)
	}
	rt, features, err := m.runtimeFeatures(r.Handler)
	if err != nil {
		return err
	}
	if !features.Checkpoint {
		return fmt.Errorf("checkpoint container %s: runtime handler %s was built without checkpoint support (CRIU): %w", r.ID, rt.Name(), errdefs.ErrPrecondition)
	}
	if _, err := exec.LookPath(criuBinary); err != nil {
		return fmt.Errorf("checkpoint container %s: criu is not installed (Debian package criu): %w", r.ID, errdefs.ErrPrecondition)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// On disk, not in /run: CRIU's images are as large as the container's
	// memory.
	work, err := os.MkdirTemp(m.stateDir(r.ID), "checkpoint-")
	if err != nil {
		return fmt.Errorf("checkpoint container %s: %w", r.ID, err)
	}
	defer os.RemoveAll(work)
	dir := filepath.Join(work, "archive")
	ck := oci.Checkpoint{ImagePath: filepath.Join(dir, metadata.CheckpointDirectory), WorkPath: filepath.Join(work, "criu")}
	for _, d := range []string{ck.ImagePath, ck.WorkPath} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", r.ID, err)
		}
	}
	if err := rt.Checkpoint(ctx, r.ID, ck); err != nil {
		return fmt.Errorf("checkpoint container %s: %w", r.ID, err)
	}
	// The rootfs diff right after the dump: as close to the memory
	// state as a still running container allows.
	if err := m.writeCheckpointMetadata(ctx, r, dir); err != nil {
		return fmt.Errorf("checkpoint container %s: %w", r.ID, err)
	}
	// CRIU's log goes into the archive, as CRI-O and containerd do: it is
	// what tells why a later restore differs.
	if b, err := os.ReadFile(filepath.Join(ck.WorkPath, metadata.DumpLogFile)); err == nil {
		if err := os.WriteFile(filepath.Join(dir, metadata.DumpLogFile), b, 0o600); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", r.ID, err)
		}
	}
	if err := writeTar(dir, location); err != nil {
		return fmt.Errorf("checkpoint container %s: archive: %w", r.ID, err)
	}
	m.opts.Logger.Info("container checkpointed", "container", r.ID, "location", location)
	return nil
}

// validCheckpointLocation accepts an absolute, clean path whose parent is
// a directory and which is not a directory itself (an existing file is
// replaced, as the kubelet names a new one each time).
func validCheckpointLocation(location string) error {
	bad := func(why string) error {
		return fmt.Errorf("checkpoint location %q: %s: %w", location, why, errdefs.ErrInvalid)
	}
	switch {
	case location == "":
		return bad("empty")
	case !filepath.IsAbs(location):
		return bad("not an absolute path")
	case filepath.Clean(location) != location || strings.ContainsRune(location, 0):
		return bad("not a clean path")
	}
	if fi, err := os.Lstat(location); err == nil && !fi.Mode().IsRegular() {
		return bad("exists and is not a regular file")
	}
	if fi, err := os.Stat(filepath.Dir(location)); err != nil || !fi.IsDir() {
		return bad("parent is not a directory")
	}
	return nil
}

// writeCheckpointMetadata writes everything of the archive but CRIU's
// images: checkpointctl's config.dump and spec.dump, the CRI config, and
// the writable layer's changes (rootfs-diff.tar, deleted.files).
func (m *Manager) writeCheckpointMetadata(ctx context.Context, r *record, dir string) error {
	cfg := metadata.ContainerConfig{
		ID: r.ID, Name: r.Metadata.GetName(),
		RootfsImage: r.ImageName, RootfsImageRef: r.ImageID, RootfsImageName: r.ImageName,
		OCIRuntime: r.Handler, CreatedTime: time.Unix(0, r.CreatedAt), CheckpointedAt: time.Now(),
	}
	if _, err := metadata.WriteJSONFile(cfg, dir, metadata.ConfigDumpFile); err != nil {
		return err
	}
	spec, err := os.ReadFile(filepath.Join(m.bundleDir(r.ID), "config.json"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, metadata.SpecDumpFile), spec, 0o600); err != nil {
		return err
	}
	b, err := protojson.Marshal(r.Config)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, criDumpFile), b, 0o600); err != nil {
		return err
	}
	return m.writeRootfsDiff(ctx, r, dir)
}

// writeRootfsDiff archives what the container added or changed in its
// root filesystem and lists what it deleted; mount points are left out:
// their content is not the container's layer.
func (m *Manager) writeRootfsDiff(ctx context.Context, r *record, dir string) error {
	changes, err := m.imgs.RootfsChanges(ctx, r.ID)
	if err != nil {
		return err
	}
	var spec struct {
		Mounts []struct{ Destination string } `json:"mounts"`
	}
	if err := statefile.Read(filepath.Join(m.bundleDir(r.ID), "config.json"), &spec); err != nil {
		return err
	}
	var mounts []string
	for _, mt := range spec.Mounts {
		mounts = append(mounts, mt.Destination)
	}
	var added, deleted []string
	for _, ch := range changes {
		if underAny(ch.Path, mounts) {
			continue
		}
		if ch.Kind == archive.ChangeDelete {
			deleted = append(deleted, ch.Path)
		} else {
			added = append(added, strings.TrimPrefix(ch.Path, "/"))
		}
	}
	if len(deleted) > 0 {
		if _, err := metadata.WriteJSONFile(deleted, dir, metadata.DeletedFilesFile); err != nil {
			return err
		}
	}
	if len(added) == 0 {
		return nil
	}
	root, err := m.imgs.MountRootfs(ctx, r.ID)
	if err != nil {
		return err
	}
	tr, err := archive.TarWithOptions(root, &archive.TarOptions{Compression: archive.Uncompressed, IncludeSourceDir: true, IncludeFiles: added})
	if err != nil {
		return err
	}
	defer tr.Close()
	return writeFile(filepath.Join(dir, metadata.RootFsDiffTar), tr)
}

// underAny reports whether p is one of dirs or below one.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		d = filepath.Clean("/" + d)
		if p == d || strings.HasPrefix(p, d+"/") || d == "/" {
			return true
		}
	}
	return false
}

// writeTar writes dir's content as an uncompressed tar to location,
// atomically: a half-written archive is never found there.
func writeTar(dir, location string) error {
	tr, err := archive.TarWithOptions(dir, &archive.TarOptions{Compression: archive.Uncompressed})
	if err != nil {
		return err
	}
	defer tr.Close()
	tmp, err := os.CreateTemp(filepath.Dir(location), "."+filepath.Base(location)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, tr); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// A symlink at location is replaced, never followed.
	return os.Rename(tmp.Name(), location)
}

func writeFile(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// isCheckpointImage reports whether a CreateContainer image names a
// checkpoint archive, as CRI-O and containerd accept it: an absolute path
// to a file (no image reference starts with "/").
func isCheckpointImage(image string) bool { return strings.HasPrefix(image, "/") }

// Pause freezes a running container's own cgroup through its runtime:
// a pod checkpoint holds each selected container there, so the pod's
// slice can be thawed for CRIU (which cannot run its parasite in tasks
// an ancestor cgroup keeps frozen) while the containers stay at the
// pod's cut. Resume undoes it.
func (m *Manager) Pause(ctx context.Context, id string) error {
	r, rt, err := m.running(ctx, id)
	if err != nil {
		return err
	}
	if err := rt.Pause(ctx, r.ID); err != nil {
		return fmt.Errorf("pause container %s: %w", r.ID, err)
	}
	return nil
}

// Resume thaws a container Pause froze.
func (m *Manager) Resume(ctx context.Context, id string) error {
	r, rt, err := m.running(ctx, id)
	if err != nil {
		return err
	}
	if err := rt.Resume(ctx, r.ID); err != nil {
		return fmt.Errorf("resume container %s: %w", r.ID, err)
	}
	return nil
}
