//go:build integration

package imagestore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

const (
	tagsImage = "gcr.io/k8s-staging-cri-tools/test-image-tags"
	tagImage  = "gcr.io/k8s-staging-cri-tools/test-image-tag:test"
	// proxiedTagImage is tagImage's path on the local registry.
	proxiedTagImage = "k8s-staging-cri-tools/test-image-tag:test"
)

func TestPullStatusListRemove(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.PinnedImages = []string{tagsImage + ":3"} })
	s, ctx := env.store, context.Background()

	var ids []string
	for _, tag := range []string{"1", "2", "3"} {
		id, err := s.Pull(ctx, tagsImage+":"+tag, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if ids[0] != ids[1] || ids[1] != ids[2] || !imageIDPattern.MatchString(ids[0]) {
		t.Fatalf("three tags of one image gave IDs %q", ids)
	}
	id := ids[0]
	// warmed by the pull, so the status and create after it read no config
	if _, ok := s.configs.Load(id); !ok {
		t.Fatalf("the pull left image %s's config uncached", id)
	}

	img, verbose, err := s.Status(ctx, tagsImage+":1", true)
	if err != nil {
		t.Fatal(err)
	}
	wantTags := []string{tagsImage + ":1", tagsImage + ":2", tagsImage + ":3"}
	// Storage lists the most recently added name first.
	if img.Id != id || !reflect.DeepEqual(slices.Sorted(slices.Values(img.RepoTags)), wantTags) || len(img.RepoDigests) != 1 ||
		!strings.HasPrefix(img.RepoDigests[0], tagsImage+"@sha256:") || img.Size == 0 || !img.Pinned {
		t.Fatalf("status %v", img)
	}
	if !strings.Contains(verbose["info"], `"imageSpec"`) {
		t.Fatalf("verbose info %q", verbose)
	}
	// critest "image status should support all kinds of references".
	refs := append([]string{id, "sha256:" + id, img.RepoDigests[0]}, img.RepoTags...)
	for _, ref := range refs {
		got, _, err := s.Status(ctx, ref, true)
		if err != nil || !proto.Equal(got, img) {
			t.Fatalf("Status(%q) = %v, %v; want %v", ref, got, err, img)
		}
	}
	if _, _, err := s.Status(ctx, tagsImage+":4", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Status of an absent tag: %v", err)
	}
	list, err := s.List(ctx, nil)
	if err != nil || len(list) != 1 || !proto.Equal(list[0], img) {
		t.Fatalf("List = %v, %v", list, err)
	}
	filtered, err := s.List(ctx, &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: tagsImage + ":2"}})
	if err != nil || len(filtered) != 1 || filtered[0].Id != id {
		t.Fatalf("filtered List = %v, %v", filtered, err)
	}
	if none, err := s.List(ctx, &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil || len(none) != 0 {
		t.Fatalf("filter on an absent image = %v, %v", none, err)
	}
	info, err := s.Resolve(ctx, id)
	if err != nil || info.ID != id || info.OS != "linux" || len(info.Config.Cmd)+len(info.Config.Entrypoint) == 0 {
		t.Fatalf("Resolve = %+v, %v", info, err)
	}

	// Removing one tag of a multi-tag image removes just that tag.
	if err := s.Remove(ctx, tagsImage+":1"); err != nil {
		t.Fatal(err)
	}
	img, _, err = s.Status(ctx, id, true)
	if err != nil || !reflect.DeepEqual(slices.Sorted(slices.Values(img.RepoTags)), wantTags[1:]) {
		t.Fatalf("after untag: %v, %v", img, err)
	}
	// Concurrent removals by ID all succeed and the image is gone at once
	// (critest "should not fail on simultaneous RemoveImage calls").
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			if err := s.Remove(ctx, id); err != nil {
				errs <- err
				return
			}
			if _, _, err := s.Status(ctx, id, true); !errors.Is(err, errdefs.ErrNotFound) {
				errs <- fmt.Errorf("image still there after Remove: %v", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if list, err := s.List(ctx, nil); err != nil || len(list) != 0 {
		t.Fatalf("List after removal = %v, %v", list, err)
	}
	if err := s.Remove(ctx, "sha256:"+id); err != nil {
		t.Fatalf("removing an absent image: %v", err)
	}
	if err := s.Remove(ctx, "Not A Ref"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("removing a bad reference: %v", err)
	}
}

func TestPullSameImageTwoRegistriesOneID(t *testing.T) {
	env := newTestEnv(t, nil)
	s, ctx := env.store, context.Background()
	id1, err := s.Pull(ctx, "registry.k8s.io/pause:3.9", nil)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := s.Pull(ctx, "k8s.gcr.io/pause:3.9", nil)
	if err != nil || id1 != id2 {
		t.Fatalf("IDs %q %q, %v", id1, id2, err)
	}
	img, _, err := s.Status(ctx, "k8s.gcr.io/pause:3.9", true)
	if err != nil || img.Id != id1 || len(img.RepoTags) != 2 {
		t.Fatalf("status %v, %v", img, err)
	}
	// By ID removes both names.
	if err := s.Remove(ctx, id1); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9"} {
		if _, _, err := s.Status(ctx, ref, true); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("%s after removal: %v", ref, err)
		}
	}
}

func TestPullByDigestAndUsers(t *testing.T) {
	env := newTestEnv(t, nil)
	s, ctx := env.store, context.Background()
	id, err := s.Pull(ctx, tagImage, nil)
	if err != nil {
		t.Fatal(err)
	}
	img, _, _ := s.Status(ctx, id, true)
	digestRef := img.RepoDigests[0]
	if err := s.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	id2, err := s.Pull(ctx, digestRef, nil)
	if err != nil || id2 != id {
		t.Fatalf("pull by digest: %q, %v (want %q)", id2, err, id)
	}
	img, _, err = s.Status(ctx, digestRef, true)
	if err != nil || len(img.RepoTags) != 0 || !reflect.DeepEqual(img.RepoDigests, []string{digestRef}) {
		t.Fatalf("digest-pulled status %v, %v", img, err)
	}

	// An image whose tag moved elsewhere keeps a name: its former
	// repository at its digest (CRI-O's PreviousName rule).
	if _, err := s.Pull(ctx, tagImage, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.store.SetNames(id, nil); err != nil {
		t.Fatal(err)
	}
	img, _, err = s.Status(ctx, id, true)
	if err != nil || len(img.RepoTags) != 0 || !reflect.DeepEqual(img.RepoDigests, []string{digestRef}) {
		t.Fatalf("untagged image status %v, %v", img, err)
	}
	if byDigest, _, err := s.Status(ctx, digestRef, true); err != nil || byDigest.Id != id {
		t.Fatalf("untagged image by its former digest: %v, %v", byDigest, err)
	}

	for _, tc := range []struct {
		image string
		uid   int64
		name  string
	}{
		{"gcr.io/k8s-staging-cri-tools/test-image-user-uid", 1002, ""},
		{"gcr.io/k8s-staging-cri-tools/test-image-user-username", -1, "www-data"},
		{"gcr.io/k8s-staging-cri-tools/test-image-user-uid-group", 1003, ""},
		{"gcr.io/k8s-staging-cri-tools/test-image-user-username-group", -1, "www-data"},
	} {
		if _, err := s.Pull(ctx, tc.image, nil); err != nil {
			t.Fatal(err)
		}
		img, _, err := s.Status(ctx, tc.image, true)
		if err != nil {
			t.Fatal(err)
		}
		uid := int64(-1)
		if img.Uid != nil {
			uid = img.Uid.Value
		}
		if uid != tc.uid || img.Username != tc.name {
			t.Errorf("%s: uid %d username %q; want %d %q", tc.image, uid, img.Username, tc.uid, tc.name)
		}
	}
}

func TestPullErrors(t *testing.T) {
	env := newTestEnv(t, nil,
		registry{prefix: "refused.test", location: "127.0.0.1:1"},
		registry{prefix: "blocked.test", location: "blocked.test", blocked: true},
	)
	s := env.store
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		ref     string
		want    error
		message string
	}{
		{"Bad Ref", errdefs.ErrInvalid, ""},
		{"sha256:" + strings.Repeat("a", 64), errdefs.ErrInvalid, ""},
		{"gcr.io/k8s-staging-cri-tools/test-image-tag:no-such-tag", errdefs.ErrNotFound, "registry gcr.io"},
		{"gcr.io/k8s-staging-cri-tools/no-such-repo:1", errdefs.ErrNotFound, "registry gcr.io"},
		{"refused.test/x:1", errdefs.ErrUnavailable, "registry refused.test"},
		{"no-such-host.invalid/x:1", errdefs.ErrUnavailable, "registry no-such-host.invalid"},
		{"blocked.test/k8s-staging-cri-tools/test-image-tag:test", errdefs.ErrPermission, "blocked"},
	} {
		_, err := s.Pull(ctx, tc.ref, nil)
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.message) {
			t.Errorf("Pull(%q) = %v; want %v mentioning %q", tc.ref, err, tc.want, tc.message)
		}
	}
	if list, _ := s.List(ctx, nil); len(list) != 0 {
		t.Fatalf("failed pulls left images: %v", list)
	}
}

func TestPullBasicAuth(t *testing.T) {
	p := newProxy(t, func(p *proxy) { p.user, p.password = "alice", "wonderland" })
	env := newTestEnv(t, nil, registry{prefix: p.addr, location: p.addr}, registry{prefix: "authed.test", location: p.addr})
	s, ctx := env.store, context.Background()
	ref := p.addr + "/" + proxiedTagImage

	if _, err := s.Pull(ctx, ref, nil); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("pull without credentials: %v", err)
	}
	if _, err := s.Pull(ctx, ref, &runtimeapi.AuthConfig{Username: "alice", Password: "wrong"}); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("pull with a wrong password: %v", err)
	}
	id, err := s.Pull(ctx, ref, &runtimeapi.AuthConfig{Username: "alice", Password: "wonderland"})
	if err != nil {
		t.Fatalf("pull with request credentials: %v", err)
	}
	if err := s.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte("alice:wonderland"))
	id, err = s.Pull(ctx, ref, &runtimeapi.AuthConfig{Auth: auth})
	if err != nil {
		t.Fatalf("pull with the auth field: %v", err)
	}
	if err := s.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	authJSON := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, p.addr, auth)
	if err := os.WriteFile(env.opts.AuthFile, []byte(authJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(ctx, ref, nil); err != nil {
		t.Fatalf("pull with the auth file: %v", err)
	}
	// Through a location rewrite, the auth file entry that counts is the
	// one for the endpoint contacted, as with podman.
	rewritten := "authed.test/" + proxiedTagImage
	if _, err := s.Pull(ctx, rewritten, nil); err != nil {
		t.Fatalf("pull through a rewrite with the endpoint's auth file entry: %v", err)
	}
	authJSON = fmt.Sprintf(`{"auths":{"authed.test":{"auth":%q}}}`, auth)
	if err := os.WriteFile(env.opts.AuthFile, []byte(authJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = s.Pull(ctx, rewritten, nil); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("auth file entry for the name's registry used on the rewritten endpoint: %v", err)
	}
	// Request credentials (the kubelet's pull secrets) are meant for the
	// name's registry: containers/image does not send them to a rewritten
	// endpoint or a mirror on another host.
	if _, err := s.Pull(ctx, rewritten, &runtimeapi.AuthConfig{Username: "alice", Password: "wonderland"}); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("request credentials sent to another host: %v", err)
	}
}

func TestPullMirror(t *testing.T) {
	p := newProxy(t, nil)
	// The primary location does not resolve: only the mirror can serve.
	env := newTestEnv(t, nil, registry{prefix: "mirrored.test", location: "primary.invalid", mirrors: []string{p.addr}})
	id, err := env.store.Pull(context.Background(), "mirrored.test/"+proxiedTagImage, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.blobCounts()) == 0 {
		t.Fatal("the mirror served no blobs")
	}
	img, _, err := env.store.Status(context.Background(), id, true)
	if err != nil || !reflect.DeepEqual(img.RepoTags, []string{"mirrored.test/" + proxiedTagImage}) {
		t.Fatalf("mirrored image keeps its own name: %v, %v", img, err)
	}
}

func TestPullProgressTimeout(t *testing.T) {
	t.Run("silent registry", func(t *testing.T) {
		addr, accepted := silentServer(t)
		env := newTestEnv(t, func(o *Options) { o.PullProgressTimeout = time.Second }, registry{prefix: "silent.test", location: addr})
		start := time.Now()
		_, err := env.store.Pull(context.Background(), "silent.test/x:1", nil)
		elapsed := time.Since(start)
		if !errors.Is(err, errdefs.ErrDeadline) || !strings.Contains(err.Error(), "progress timeout") ||
			!strings.Contains(err.Error(), "silent.test") {
			t.Fatalf("err = %v", err)
		}
		if elapsed > 10*time.Second {
			t.Fatalf("took %s", elapsed)
		}
		select {
		case <-accepted:
		default:
			t.Fatal("the silent registry was never contacted")
		}
	})
	t.Run("stalls mid-layer", func(t *testing.T) {
		p := newProxy(t, func(p *proxy) { p.stallBlob = true })
		env := newTestEnv(t, func(o *Options) { o.PullProgressTimeout = 2 * time.Second }, registry{prefix: p.addr, location: p.addr})
		_, err := env.store.Pull(context.Background(), p.addr+"/library/nginx:latest", nil)
		if !errors.Is(err, errdefs.ErrDeadline) || !strings.Contains(err.Error(), "no data received for 2s") {
			t.Fatalf("err = %v", err)
		}
		select {
		case <-p.stalled:
		case <-time.After(10 * time.Second):
			t.Fatal("the stalled download was not abandoned")
		}
		if list, _ := env.store.List(context.Background(), nil); len(list) != 0 {
			t.Fatalf("a stalled pull left an image: %v", list)
		}
	})
}

func TestPullCallerCancellation(t *testing.T) {
	p := newProxy(t, func(p *proxy) { p.stallBlob = true })
	env := newTestEnv(t, nil, registry{prefix: p.addr, location: p.addr})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := env.store.Pull(ctx, p.addr+"/library/nginx:latest", nil)
	if !errors.Is(err, errdefs.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("err = %v after %s", err, time.Since(start))
	}
	select {
	case <-p.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the download continued after its only caller left")
	}
}

func TestConcurrentPullsShareOneDownload(t *testing.T) {
	p := newProxy(t, func(p *proxy) { p.slowFirst = 200 * time.Millisecond })
	env := newTestEnv(t, nil, registry{prefix: p.addr, location: p.addr})
	ref := p.addr + "/library/nginx:latest"
	var wg sync.WaitGroup
	ids := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { ids[i], errs[i] = env.store.Pull(context.Background(), ref, nil) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || ids[0] != ids[1] {
		t.Fatalf("pulls: %q %v", ids, errs)
	}
	counts := p.blobCounts()
	if len(counts) < 2 {
		t.Fatalf("expected config and layers, got %v", counts)
	}
	for path, n := range counts {
		if n != 1 {
			t.Errorf("%s downloaded %d times", path, n)
		}
	}
	// Different credentials never share a download.
	if _, err := env.store.Pull(context.Background(), ref, &runtimeapi.AuthConfig{Username: "u", Password: "p"}); err != nil {
		t.Fatal(err)
	}
}

// TestSharedWithSkopeo proves a store podunit fills is readable by the
// containers tools (podman/skopeo) pointed at the same root.
func TestSharedWithSkopeo(t *testing.T) {
	env := newTestEnv(t, nil)
	ctx := context.Background()
	id, err := env.store.Pull(ctx, tagImage, nil)
	if err != nil {
		t.Fatal(err)
	}
	driver := env.store.Driver()
	if err := env.store.Close(); err != nil {
		t.Fatal(err)
	}
	env.store = nil
	out, err := runCmd(ctx, "skopeo", "--policy", env.opts.PolicyPath, "inspect", "--format", "{{.Name}}",
		fmt.Sprintf("containers-storage:[%s@%s+%s]%s", driver, env.opts.Root, env.opts.RunRoot, tagImage))
	if err != nil {
		t.Fatalf("skopeo: %v\n%s", err, out)
	}
	// And the other way round: what skopeo stores, podunit lists.
	dst := filepath.Join(env.dir, "oci")
	if out, err := runCmd(ctx, "skopeo", "--policy", env.opts.PolicyPath, "copy", "--src-tls-verify=false",
		"docker://"+testRegistry+"/pause:3.9", "oci:"+dst+":pause"); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	if out, err := runCmd(ctx, "skopeo", "--policy", env.opts.PolicyPath, "copy", "oci:"+dst+":pause",
		fmt.Sprintf("containers-storage:[%s@%s+%s]registry.k8s.io/pause:skopeo", driver, env.opts.Root, env.opts.RunRoot)); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	env.open(t)
	if _, _, err := env.store.Status(ctx, id, true); err != nil {
		t.Fatalf("podunit's image after skopeo: %v", err)
	}
	if img, _, err := env.store.Status(ctx, "registry.k8s.io/pause:skopeo", true); err != nil || img.Size == 0 {
		t.Fatalf("skopeo's image: %v, %v", img, err)
	}
}

// TestPullDiskFull fills a small filesystem: the pull fails as
// ErrResourceExhausted, lists no image and gives the space back.
func TestPullDiskFull(t *testing.T) {
	// A 12 MB tmpfs holds the store's metadata and pause, not nginx (two
	// layers, ~6 MB compressed, more unpacked, staged before unpacking).
	env := newTestEnv(t, func(o *Options) {
		if err := os.MkdirAll(o.Root, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", o.Root, "tmpfs", 0, "size=12m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(o.Root, unix.MNT_DETACH) })
	})
	s, ctx, root := env.store, context.Background(), env.opts.Root
	if fs := mountFsType(t, root); fs != "tmpfs" {
		t.Fatalf("store root on %q", fs)
	}

	if _, err := s.Pull(ctx, "registry.k8s.io/pause:3.9", nil); err != nil {
		t.Fatal(err)
	}
	before := freeBytes(t, root)
	layersBefore, err := s.store.Layers()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Pull(ctx, "docker.io/library/nginx:latest", nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("pull onto a full disk: %v", err)
	}
	t.Logf("pull onto a full disk: %v", err)
	if _, _, err := s.Status(ctx, "docker.io/library/nginx:latest", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("half-pulled image visible: %v", err)
	}
	if list, _ := s.List(ctx, nil); len(list) != 1 {
		t.Fatalf("images after the failed pull: %v", list)
	}
	if layers, err := s.store.Layers(); err != nil || len(layers) != len(layersBefore) {
		t.Fatalf("layers after the failed pull: %d, %v; before %d", len(layers), err, len(layersBefore))
	}
	// Allow for metadata the store keeps (layer and image JSON).
	if after := freeBytes(t, root); after < before-256*1024 {
		t.Fatalf("free space %d after the failed pull; %d before", after, before)
	}
}

func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

func mountFsType(t *testing.T, path string) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		return "tmpfs"
	}
	return fmt.Sprintf("%#x", st.Type)
}

// TestDropOrphanLayers: after a disk-full failure, layers the failed pull
// created and nothing uses go; older and used layers stay.
func TestDropOrphanLayers(t *testing.T) {
	env := newTestEnv(t, nil)
	s, ctx := env.store, context.Background()
	id, err := s.Pull(ctx, "docker.io/library/nginx:latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.store.CreateLayer("", "", nil, "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.layerIDs()
	if err != nil {
		t.Fatal(err)
	}
	// A chain the "failed pull" left: parent and child, both unused.
	parent, err := s.store.CreateLayer("", "", nil, "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	child, err := s.store.CreateLayer("", parent.ID, nil, "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A layer another pull finished meanwhile: used by its image.
	img, err := s.store.Image(id)
	if err != nil {
		t.Fatal(err)
	}
	delete(before, img.TopLayer)

	s.dropOrphanLayers(ctx, before)
	for _, gone := range []string{parent.ID, child.ID} {
		if _, err := s.store.Layer(gone); err == nil {
			t.Errorf("orphan layer %s kept", gone)
		}
	}
	for _, kept := range []string{old.ID, img.TopLayer} {
		if _, err := s.store.Layer(kept); err != nil {
			t.Errorf("layer %s removed: %v", kept, err)
		}
	}
	if _, _, err := s.Status(ctx, id, true); err != nil {
		t.Fatal(err)
	}
}
