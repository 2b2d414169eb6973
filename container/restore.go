package container

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	securejoin "github.com/cyphar/filepath-securejoin"
	"go.podman.io/storage/pkg/archive"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// restoreDir is where a container created from a checkpoint keeps the
// extracted archive until it is started (restored).
func (m *Manager) restoreDir(id string) string { return filepath.Join(m.stateDir(id), "restore") }

// openCheckpoint extracts the checkpoint archive a CreateContainer names
// as its image into a new directory of the state dir (the caller moves it
// to the container's or removes it) and returns the config to create the
// container with: the checkpointed container's own, which CRIU's images
// match (command, mounts, environment), with the request's identity
// (metadata, labels, annotations, log path), as CRI-O does.
func (m *Manager) openCheckpoint(req *runtimeapi.ContainerConfig) (cfg *runtimeapi.ContainerConfig, dir string, retErr error) {
	path := req.GetImage().GetImage()
	bad := func(why string, err error) error {
		if err != nil {
			why += ": " + err.Error()
		}
		return fmt.Errorf("checkpoint archive %q: %s: %w", path, why, errdefs.ErrInvalid)
	}
	if filepath.Clean(path) != path {
		return nil, "", bad("not a clean absolute path", nil)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", bad("cannot open", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, "", bad("not a regular file", err)
	}
	tmp, err := os.MkdirTemp(m.opts.StateDir, "restore-")
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint archive %q: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(tmp)
		}
	}()
	dir = tmp
	// storage's Untar refuses entries that would land outside dir.
	if err := archive.Untar(f, dir, &archive.TarOptions{Compression: archive.Uncompressed, NoLchown: true}); err != nil {
		return nil, "", bad("not a checkpoint archive", err)
	}
	var meta metadata.ContainerConfig
	if _, err := metadata.ReadJSONFile(&meta, dir, metadata.ConfigDumpFile); err != nil {
		return nil, "", bad("not a checkpoint archive", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, metadata.CheckpointDirectory)); err != nil || !fi.IsDir() {
		return nil, "", bad("no "+metadata.CheckpointDirectory+"/ directory", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, criDumpFile))
	if err != nil {
		return nil, "", bad("not written by podunit (no "+criDumpFile+")", err)
	}
	cfg = &runtimeapi.ContainerConfig{}
	if err := protojson.Unmarshal(b, cfg); err != nil {
		return nil, "", bad(criDumpFile, err)
	}
	if err := restoreTimeSettings(cfg, req); err != nil {
		return nil, "", bad("the request does not fit the checkpoint", err)
	}
	cfg.Metadata = proto.Clone(req.GetMetadata()).(*runtimeapi.ContainerMetadata)
	if req.Labels != nil {
		cfg.Labels = req.Labels
	}
	if req.Annotations != nil {
		cfg.Annotations = req.Annotations
	}
	if req.GetLogPath() != "" {
		cfg.LogPath = req.GetLogPath()
	}
	// The image the checkpointed rootfs diff applies to, by ID: a tag may
	// have moved since.
	img := meta.RootfsImageRef
	if img == "" {
		img = meta.RootfsImageName
	}
	cfg.Image = &runtimeapi.ImageSpec{Image: img}
	return cfg, dir, nil
}

// restoreTimeSettings checks what a request says about the checkpointed
// process against the checkpoint and takes its restore-time settings
// (KEP-5823's rule, also for a plain CreateContainer from an archive):
// command, args, working directory and environment, when the request sets
// them, must be the checkpointed ones (they describe the process, they
// cannot change it); mounts, when set, replace the checkpointed ones (a
// restored pod's volumes live under its new UID) but must have the same
// destinations, which CRIU's images expect; Linux resources, when set,
// replace the checkpointed ones.
func restoreTimeSettings(cfg, req *runtimeapi.ContainerConfig) error {
	if len(req.GetCommand()) > 0 && !slices.Equal(req.GetCommand(), cfg.GetCommand()) {
		return fmt.Errorf("command %q, checkpointed %q", req.GetCommand(), cfg.GetCommand())
	}
	if len(req.GetArgs()) > 0 && !slices.Equal(req.GetArgs(), cfg.GetArgs()) {
		return fmt.Errorf("args %q, checkpointed %q", req.GetArgs(), cfg.GetArgs())
	}
	if req.GetWorkingDir() != "" && req.GetWorkingDir() != cfg.GetWorkingDir() {
		return fmt.Errorf("working directory %q, checkpointed %q", req.GetWorkingDir(), cfg.GetWorkingDir())
	}
	if len(req.GetEnvs()) > 0 && !slices.Equal(envSet(req.GetEnvs()), envSet(cfg.GetEnvs())) {
		return fmt.Errorf("environment differs from the checkpointed one")
	}
	if len(req.GetMounts()) > 0 {
		if !slices.Equal(mountDests(req.GetMounts()), mountDests(cfg.GetMounts())) {
			return fmt.Errorf("mount destinations %q, checkpointed %q", mountDests(req.GetMounts()), mountDests(cfg.GetMounts()))
		}
		cfg.Mounts = req.GetMounts()
	}
	if res := req.GetLinux().GetResources(); res != nil {
		if cfg.Linux == nil {
			cfg.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		cfg.Linux.Resources = res
	}
	return nil
}

func envSet(kv []*runtimeapi.KeyValue) []string {
	out := make([]string, 0, len(kv))
	for _, e := range kv {
		out = append(out, e.GetKey()+"="+string(e.GetValue()))
	}
	slices.Sort(out)
	return out
}

func mountDests(ms []*runtimeapi.Mount) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, filepath.Clean(m.GetContainerPath()))
	}
	slices.Sort(out)
	return out
}

// applyRootfsDiff replays the checkpointed container's changes to its
// root filesystem onto the new one: rootfs-diff.tar, then deleted.files.
func applyRootfsDiff(dir, rootfs string) error {
	if f, err := os.Open(filepath.Join(dir, metadata.RootFsDiffTar)); err == nil {
		err = archive.Untar(f, rootfs, &archive.TarOptions{Compression: archive.Uncompressed})
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", metadata.RootFsDiffTar, err)
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, metadata.DeletedFilesFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var deleted []string
	if err := json.Unmarshal(b, &deleted); err != nil {
		return fmt.Errorf("%s: %v: %w", metadata.DeletedFilesFile, err, errdefs.ErrInvalid)
	}
	for _, p := range deleted {
		// Resolved inside the rootfs: a hostile list cannot reach the host.
		full, err := securejoin.SecureJoin(rootfs, p)
		if err != nil {
			return fmt.Errorf("%s: %q: %w", metadata.DeletedFilesFile, p, err)
		}
		if full == rootfs {
			continue
		}
		if err := os.RemoveAll(full); err != nil {
			return fmt.Errorf("%s: %w", metadata.DeletedFilesFile, err)
		}
	}
	return nil
}

// adoptRestore moves the extracted archive into the new container's
// state directory and applies its rootfs diff.
func (m *Manager) adoptRestore(id, extracted, rootfs string) error {
	if err := os.Rename(extracted, m.restoreDir(id)); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := applyRootfsDiff(m.restoreDir(id), rootfs); err != nil {
		return fmt.Errorf("checkpoint: rootfs: %w", err)
	}
	return nil
}
