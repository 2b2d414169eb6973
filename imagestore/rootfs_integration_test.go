//go:build integration

package imagestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"go.podman.io/storage"
	"go.podman.io/storage/pkg/lockfile"

	"github.com/podunit/podunit/errdefs"
)

// mountHelperEnv makes TestMain act as a restarted podunit (see mountHelper).
const mountHelperEnv = "PODUNIT_IMAGESTORE_MOUNT_HELPER"

func runMountHelper(env *testEnv, containerID, imageID string) ([]byte, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mountHelperEnv+"="+strings.Join([]string{
		env.opts.Root, env.opts.RunRoot, containerID, imageID}, "|"))
	return cmd.CombinedOutput()
}

// mountHelper opens the store afresh and mounts a container's rootfs and
// image volume, printing both paths.
func mountHelper(spec string) error {
	f := strings.Split(spec, "|")
	if len(f) != 4 {
		return fmt.Errorf("bad helper spec %q", spec)
	}
	ctx := context.Background()
	s, err := New(ctx, testOptions(f[0], f[1]))
	if err != nil {
		return err
	}
	defer s.Close()
	path, err := s.MountRootfs(ctx, f[2])
	if err != nil {
		return err
	}
	vol, err := s.MountImageVolume(ctx, f[2], f[3])
	if err != nil {
		return err
	}
	fmt.Printf("%s\n%s\n", path, vol)
	return nil
}

func runCmd(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// layerMounts lists the mounted layers of env's store: every mount under
// it but the overlay driver's own private bind mount of its home.
func layerMounts(t *testing.T, env *testEnv) []string {
	var out []string
	for _, m := range mountsUnder(t, env.dir) {
		if m != filepath.Join(env.opts.Root, "overlay") {
			out = append(out, m)
		}
	}
	return out
}

func TestContainerRootfsLifecycle(t *testing.T) {
	env := newTestEnv(t, nil)
	s, ctx := env.store, context.Background()
	if s.Driver() != "overlay" {
		t.Fatalf("driver %q on a real directory; want overlay", s.Driver())
	}
	imageID, err := s.Pull(ctx, "docker.io/library/busybox:latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	const cid = "c0ffee0000000000000000000000000000000000000000000000000000000001"

	if _, err := s.MountRootfs(ctx, cid); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("mounting an absent rootfs: %v", err)
	}
	if err := s.CreateContainerRootfs(ctx, cid, imageID, "k8s_test_pod", nil); err != nil {
		t.Fatal(err)
	}
	// A retried create is a no-op; a name clash is ErrExists.
	if err := s.CreateContainerRootfs(ctx, cid, imageID, "k8s_test_pod", nil); err != nil {
		t.Fatalf("repeated create: %v", err)
	}
	if err := s.CreateContainerRootfs(ctx, "other", imageID, "k8s_test_pod", nil); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("duplicate name: %v", err)
	}
	if err := s.CreateContainerRootfs(ctx, "other2", "docker.io/library/nothere:1", "", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown image: %v", err)
	}

	path, err := s.MountRootfs(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(path, "bin", "busybox")); err != nil {
		t.Fatalf("image content not in the rootfs: %v", err)
	}
	again, err := s.MountRootfs(ctx, cid)
	if err != nil || again != path {
		t.Fatalf("second mount: %q, %v", again, err)
	}
	// A rootfs this process mounted is answered without storage, also
	// while another caller holds storage's store-wide lock (StartContainer
	// during a burst of creates, issue 20).
	lk, err := lockfile.GetLockFile(filepath.Join(s.store.GraphRoot(), "storage.lock"))
	if err != nil {
		t.Fatal(err)
	}
	lk.Lock()
	done := make(chan error, 1)
	go func() {
		p, err := s.MountRootfs(ctx, cid)
		if err == nil && p != path {
			err = fmt.Errorf("mounted at %q, want %q", p, path)
		}
		done <- err
	}()
	select {
	case err := <-done:
		lk.Unlock()
		if err != nil {
			t.Fatalf("mount of a mounted rootfs: %v", err)
		}
	case <-time.After(30 * time.Second):
		lk.Unlock()
		<-done
		t.Fatal("mount of a mounted rootfs waited for storage's store-wide lock")
	}
	if err := os.WriteFile(filepath.Join(path, "written"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	bytes, inodes, err := s.RootfsUsage(ctx, cid)
	if err != nil || bytes < 1<<20 || inodes == 0 {
		t.Fatalf("usage %d bytes %d inodes, %v", bytes, inodes, err)
	}

	volPath, err := s.MountImageVolume(ctx, cid, "docker.io/library/busybox:latest")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(volPath, "bin", "sh")); err != nil || volPath == path {
		t.Fatalf("image volume at %q: %v", volPath, err)
	}
	if again, err := s.MountImageVolume(ctx, cid, imageID); err != nil || again != volPath {
		t.Fatalf("second image-volume mount %q, %v", again, err)
	}
	if _, err := os.Stat(filepath.Join(volPath, "written")); err == nil {
		t.Fatal("the container's writes show in the image volume")
	}
	if err := os.WriteFile(filepath.Join(volPath, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing into the image volume on the host: %v; want EROFS", err)
	}

	// A restart finds the mounts, not doubles them. storage caches stores
	// per process, so the restarted podunit is a child process: the test
	// binary re-run as mountHelper, twice.
	mountsBefore := layerMounts(t, env)
	if len(mountsBefore) != 2 {
		t.Fatalf("mounts %q; want the rootfs and the image volume", mountsBefore)
	}
	for range 2 {
		out, err := runMountHelper(env, cid, imageID)
		if err != nil {
			t.Fatalf("restarted podunit: %v\n%s", err, out)
		}
		if want := path + "\n" + volPath + "\n"; !strings.HasSuffix(string(out), want) {
			t.Fatalf("restarted podunit mounted\n%s\nwant\n%s", out, want)
		}
		if m := layerMounts(t, env); !slices.Equal(m, mountsBefore) {
			t.Fatalf("mounts after restart %q; before %q", m, mountsBefore)
		}
	}
	if _, err := os.Stat(filepath.Join(path, "written")); err != nil {
		t.Fatalf("writes lost across restart: %v", err)
	}

	ids, err := s.ListRootfs(ctx)
	if err != nil || !slices.Equal(ids, []string{cid}) {
		t.Fatalf("ListRootfs = %q, %v", ids, err)
	}
	imageFs, containerFs, err := s.FsInfo(ctx)
	if err != nil || imageFs[0].UsedBytes.Value == 0 || containerFs[0].UsedBytes.Value < 1<<20 ||
		imageFs[0].InodesUsed.Value == 0 || imageFs[0].FsId.Mountpoint != env.opts.Root {
		t.Fatalf("FsInfo = %v %v, %v", imageFs, containerFs, err)
	}

	if err := s.Remove(ctx, imageID); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("removing an image in use: %v", err)
	}

	if err := s.UnmountRootfs(ctx, cid); err != nil {
		t.Fatal(err)
	}
	if m := layerMounts(t, env); len(m) != 0 {
		t.Fatalf("mounts left after unmount: %q", m)
	}
	if err := s.UnmountRootfs(ctx, cid); err != nil {
		t.Fatalf("second unmount: %v", err)
	}
	// Mounting again after an unmount works (the container restarts).
	if _, err := s.MountRootfs(ctx, cid); err != nil {
		t.Fatal(err)
	}
	// podunit's reaper and its start-up gc may delete one container at
	// once (docs/containers.md "Deferred removal"): both succeed.
	errs := make(chan error, 3)
	go func() { errs <- s.DeleteRootfs(ctx, cid) }()
	go func() { errs <- s.DeleteRootfs(ctx, cid) }()
	go func() { errs <- s.DeleteImageVolumes(ctx, cid) }()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent deletes: %v", err)
		}
	}
	if m := layerMounts(t, env); len(m) != 0 {
		t.Fatalf("mounts left after delete: %q", m)
	}
	if err := s.DeleteRootfs(ctx, cid); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if ids, err := s.ListRootfs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("ListRootfs after delete = %q, %v", ids, err)
	}
	if err := s.Remove(ctx, imageID); err != nil {
		t.Fatalf("removing the image once unused: %v", err)
	}
	_, containerFs, err = s.FsInfo(ctx)
	if err != nil || containerFs[0].UsedBytes.Value != 0 {
		t.Fatalf("container fs after delete: %v, %v", containerFs, err)
	}
}

func TestForeignContainersIgnored(t *testing.T) {
	env := newTestEnv(t, nil)
	s, ctx := env.store, context.Background()
	imageID, err := s.Pull(ctx, "registry.k8s.io/pause:3.9", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A container podman (or anything else) made in a shared store.
	if _, err := s.store.CreateContainer("", []string{"podman-made"}, imageID, "", `{"podman":true}`, nil); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.ListRootfs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("ListRootfs includes a foreign container: %q, %v", ids, err)
	}
}

func TestVFSDriver(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.Driver = "vfs" })
	s, ctx := env.store, context.Background()
	if s.Driver() != "vfs" {
		t.Fatalf("driver %q", s.Driver())
	}
	imageID, err := s.Pull(ctx, "registry.k8s.io/pause:3.9", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateContainerRootfs(ctx, "vfs1", imageID, "", nil); err != nil {
		t.Fatal(err)
	}
	path, err := s.MountRootfs(ctx, "vfs1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(path, "pause")); err != nil {
		t.Fatalf("rootfs content: %v", err)
	}
	if err := s.DeleteRootfs(ctx, "vfs1"); err != nil {
		t.Fatal(err)
	}
}

// countingStore records the calls podunit makes on storage in a
// container's create path; every one takes store-wide locks.
type countingStore struct {
	storage.Store
	mu    sync.Mutex
	calls []string
}

func (c *countingStore) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, name)
}

func (c *countingStore) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

func (c *countingStore) Image(id string) (*storage.Image, error) {
	c.add("Image")
	return c.Store.Image(id)
}

func (c *countingStore) ImagesByDigest(d digest.Digest) ([]*storage.Image, error) {
	c.add("ImagesByDigest")
	return c.Store.ImagesByDigest(d)
}

func (c *countingStore) Container(id string) (*storage.Container, error) {
	c.add("Container")
	return c.Store.Container(id)
}

func (c *countingStore) Containers() ([]storage.Container, error) {
	c.add("Containers")
	return c.Store.Containers()
}

func (c *countingStore) Layer(id string) (*storage.Layer, error) {
	c.add("Layer")
	return c.Store.Layer(id)
}

func (c *countingStore) Mounted(id string) (int, error) {
	c.add("Mounted")
	return c.Store.Mounted(id)
}

func (c *countingStore) CreateContainer(id string, names []string, image, layer, metadata string, o *storage.ContainerOptions) (*storage.Container, error) {
	c.add("CreateContainer")
	return c.Store.CreateContainer(id, names, image, layer, metadata, o)
}

func (c *countingStore) Mount(id, label string) (string, error) {
	c.add("Mount")
	return c.Store.Mount(id, label)
}

func (c *countingStore) Unmount(id string, force bool) (bool, error) {
	c.add("Unmount")
	return c.Store.Unmount(id, force)
}

func (c *countingStore) SetMetadata(id, metadata string) error {
	c.add("SetMetadata")
	return c.Store.SetMetadata(id, metadata)
}

// TestCreateMountStoreCalls: what CreateContainer and StartContainer ask
// of storage for a container's rootfs, given the image ID Resolve found:
// one CreateContainer and one Mount, then nothing. Each storage call
// queues on store-wide locks behind every other create in a burst
// (issue 20): a lookup of the image before CreateContainer, or a
// "mounted?" question before Mount, was one more wait per create.
func TestCreateMountStoreCalls(t *testing.T) {
	env := newTestEnv(t, nil)
	s, ctx := env.store, context.Background()
	imageID, err := s.Pull(ctx, "registry.k8s.io/pause:3.9", nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: s.store}
	s.store = cs
	const cid = "c0ffee0000000000000000000000000000000000000000000000000000000005"
	for _, ref := range []string{imageID, "sha256:" + imageID} {
		id := cid
		if ref != imageID {
			id = cid + "-prefixed"
		}
		if err := s.CreateContainerRootfs(ctx, id, ref, "", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MountRootfs(ctx, id); err != nil { // CreateContainer's
			t.Fatal(err)
		}
		if _, err := s.MountRootfs(ctx, id); err != nil { // StartContainer's
			t.Fatal(err)
		}
		if got := cs.take(); !slices.Equal(got, []string{"CreateContainer", "Mount"}) {
			t.Errorf("storage calls of a create and start by %q: %q; want CreateContainer, Mount", ref, got)
		}
	}
	unknown := strings.Repeat("ab", 32)
	if err := s.CreateContainerRootfs(ctx, cid+"-unknown", unknown, "", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("rootfs on an unknown image ID: %v; want NotFound", err)
	}
}
