//go:build integration

package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"go.podman.io/storage"

	"github.com/podunit/podunit/errdefs"
)

// reopenHelperEnv makes TestMain act as podunit started afresh on an
// existing store (see reopenHelper): storage caches its stores per
// process, so a store opened again with other options, or after a
// "reboot", has to be another process.
const reopenHelperEnv = "PODUNIT_IMAGESTORE_REOPEN_HELPER"

type reopenSpec struct {
	Root, Run string
	Transient bool
	Old       string // a container filesystem made before
	Image     string
}

type reopenResult struct {
	Transient   bool     // storage opened the store as a transient one
	Rootfs      []string // ListRootfs
	DryOrphans  []string // CollectOrphanLayers(dryRun)
	Orphans     []string // CollectOrphanLayers
	ImageErr    string   // Status of the image
	NewRootfs   string   // error of creating, mounting, deleting a new one
	DeleteOld   string   // error of DeleteRootfs(Old)
	OldMountErr string   // error of MountRootfs(Old)
	OldNotFound bool     // that error is ErrNotFound
}

func runReopenHelper(t *testing.T, spec reopenSpec) reopenResult {
	t.Helper()
	b, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), reopenHelperEnv+"="+string(b))
	cmd.Stderr = testWriter{t}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reopened store: %v\n%s", err, out)
	}
	var r reopenResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("reopened store said %q: %v", out, err)
	}
	return r
}

// reopenHelper opens the store, collects orphaned layers (as podunit's
// start-up GC does), then reports what it finds; it makes, mounts and
// deletes a fresh container filesystem on the image, and with
// spec.Old set tries that one.
func reopenHelper(js string) error {
	var spec reopenSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		return err
	}
	ctx := context.Background()
	o := testOptions(spec.Root, spec.Run)
	o.Transient = spec.Transient
	s, err := New(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	var r reopenResult
	r.Transient = s.store.TransientStore()
	if r.DryOrphans, err = s.CollectOrphanLayers(ctx, true); err != nil {
		return err
	}
	if r.Orphans, err = s.CollectOrphanLayers(ctx, false); err != nil {
		return err
	}
	if r.Rootfs, err = s.ListRootfs(ctx); err != nil {
		return err
	}
	_, _, err = s.Status(ctx, spec.Image, true)
	r.ImageErr = errText(err)
	r.NewRootfs = errText(func() error {
		const id = "f00d000000000000000000000000000000000000000000000000000000000002"
		if err := s.CreateContainerRootfs(ctx, id, spec.Image, "", nil); err != nil {
			return err
		}
		p, err := s.MountRootfs(ctx, id)
		if err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(p, "bin", "busybox")); err != nil {
			return err
		}
		return s.DeleteRootfs(ctx, id)
	}())
	if spec.Old != "" {
		_, err = s.MountRootfs(ctx, spec.Old)
		r.OldMountErr, r.OldNotFound = errText(err), errors.Is(err, errdefs.ErrNotFound)
		r.DeleteOld = errText(s.DeleteRootfs(ctx, spec.Old))
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// durableFiles is storage's metadata under Root with what identifies a
// version of each file: a rewrite (storage writes a new file and renames
// it over the old) changes the inode.
func durableFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	m, _ := filepath.Glob(filepath.Join(root, "*-*", "*.json"))
	for _, f := range m {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = fmt.Sprintf("%v %d %d", st.ModTime(), st.Size(), st.Sys().(*syscall.Stat_t).Ino)
	}
	return out
}

// TestTransientStoreReboot: with the transient store (the default,
// image.storage_transient) a container filesystem's create, mount,
// unmount and delete write none of storage's metadata under Root, where
// each would otherwise rewrite and fsync layers.json and containers.json
// (issue 20). After a reboot (the run root emptied, nothing mounted) the
// store has no trace of it: no record, and its layer directory under Root
// is collected at start; the image is intact and serves new containers.
func TestTransientStoreReboot(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.Transient = true })
	s, ctx := env.store, context.Background()
	imageID, err := s.Pull(ctx, "docker.io/library/busybox:latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	const cid = "c0ffee0000000000000000000000000000000000000000000000000000000003"
	before := durableFiles(t, env.opts.Root)
	if len(before) == 0 {
		t.Fatalf("no storage metadata under %s", env.opts.Root)
	}
	// A container that comes and goes, and one that stays until the reboot.
	for _, id := range []string{cid + "x", cid} {
		if err := s.CreateContainerRootfs(ctx, id, imageID, "", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MountRootfs(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteRootfs(ctx, cid+"x"); err != nil {
		t.Fatal(err)
	}
	path, err := s.MountRootfs(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "written"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if after := durableFiles(t, env.opts.Root); !maps.Equal(after, before) {
		t.Errorf("container filesystems rewrote storage metadata under Root:\nbefore %v\nafter  %v", before, after)
	}
	if n := transientRecords(env.opts.RunRoot); n < 2 {
		t.Errorf("%d records in the run root; want the container and its layer", n)
	}
	c, err := s.store.Container(cid)
	if err != nil {
		t.Fatal(err)
	}
	layerDir := filepath.Join(env.opts.Root, s.Driver(), c.LayerID)
	if _, err := os.Stat(layerDir); err != nil {
		t.Fatalf("before the reboot: %v", err)
	}

	// The reboot: nothing mounted, /run empty.
	// Forced, it unmounts and still says what was mounted.
	if _, err := s.store.Shutdown(true); err != nil && !errors.Is(err, storage.ErrLayerUsedByContainer) {
		t.Fatal(err)
	}
	env.store = nil
	if m := layerMounts(t, env); len(m) != 0 {
		t.Fatalf("mounts after the shutdown: %q", m)
	}
	if err := os.RemoveAll(env.opts.RunRoot); err != nil {
		t.Fatal(err)
	}
	r := runReopenHelper(t, reopenSpec{Root: env.opts.Root, Run: env.opts.RunRoot, Transient: true, Old: cid, Image: imageID})
	if !r.Transient {
		t.Error("reopened store is not transient")
	}
	if !slices.Equal(r.DryOrphans, []string{c.LayerID}) || !slices.Equal(r.Orphans, r.DryOrphans) {
		t.Errorf("orphaned layers %q (dry run %q); want the container's %s", r.Orphans, r.DryOrphans, c.LayerID)
	}
	if _, err := os.Stat(layerDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("left after the reboot: %s (%v)", layerDir, err)
	}
	if len(r.Rootfs) != 0 {
		t.Errorf("container filesystems listed after the reboot: %q", r.Rootfs)
	}
	if r.ImageErr != "" || r.NewRootfs != "" {
		t.Errorf("image after the reboot: %s; a new container on it: %s", r.ImageErr, r.NewRootfs)
	}
	if r.DeleteOld != "" {
		t.Errorf("removing the container the reboot cleared: %s", r.DeleteOld)
	}
	if !r.OldNotFound {
		t.Errorf("mounting the container the reboot cleared: %q; want not found", r.OldMountErr)
	}
}

// TestTransientSwitchedOff: storage_transient turned off while the run
// root still holds the transient store's containers (a restart without a
// reboot) keeps the store transient, so they stay listed and nothing of
// theirs looks orphaned; after the next reboot the store is durable and
// the last transient boot's layers are collected.
func TestTransientSwitchedOff(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.Transient = true })
	s, ctx := env.store, context.Background()
	imageID, err := s.Pull(ctx, "docker.io/library/busybox:latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	const cid = "c0ffee0000000000000000000000000000000000000000000000000000000004"
	if err := s.CreateContainerRootfs(ctx, cid, imageID, "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MountRootfs(ctx, cid); err != nil {
		t.Fatal(err)
	}
	c, err := s.store.Container(cid)
	if err != nil {
		t.Fatal(err)
	}

	r := runReopenHelper(t, reopenSpec{Root: env.opts.Root, Run: env.opts.RunRoot, Transient: false, Image: imageID})
	if !r.Transient || !slices.Equal(r.Rootfs, []string{cid}) || len(r.Orphans) != 0 || len(r.DryOrphans) != 0 {
		t.Fatalf("switched off before a reboot: transient %v, listed %q, orphans %q %q; want transient, the container listed, no orphans",
			r.Transient, r.Rootfs, r.DryOrphans, r.Orphans)
	}
	if r.NewRootfs != "" {
		t.Fatalf("a new container: %s", r.NewRootfs)
	}

	// Forced, it unmounts and still says what was mounted.
	if _, err := s.store.Shutdown(true); err != nil && !errors.Is(err, storage.ErrLayerUsedByContainer) {
		t.Fatal(err)
	}
	env.store = nil
	if err := os.RemoveAll(env.opts.RunRoot); err != nil {
		t.Fatal(err)
	}
	before := durableFiles(t, env.opts.Root)
	r = runReopenHelper(t, reopenSpec{Root: env.opts.Root, Run: env.opts.RunRoot, Transient: false, Image: imageID})
	if r.Transient || len(r.Rootfs) != 0 || !slices.Equal(r.Orphans, []string{c.LayerID}) {
		t.Fatalf("after the reboot: transient %v, listed %q, orphans %q; want durable, nothing listed, the container's layer %s collected",
			r.Transient, r.Rootfs, r.Orphans, c.LayerID)
	}
	if r.NewRootfs != "" || r.ImageErr != "" {
		t.Fatalf("image %s; a new container: %s", r.ImageErr, r.NewRootfs)
	}
	// Durable now: the new container's records went under Root.
	f := filepath.Join(env.opts.Root, "overlay-containers", "containers.json")
	if after := durableFiles(t, env.opts.Root); after[f] == "" || after[f] == before[f] {
		t.Errorf("a durable store's container did not rewrite %s (before %q, after %q)", f, before[f], after[f])
	}
}
