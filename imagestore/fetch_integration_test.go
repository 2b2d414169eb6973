//go:build integration

package imagestore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/podunit/podunit/errdefs"
)

// testLayer is a gzipped tar and its DiffID.
type testLayer struct {
	gz     []byte
	diffID digest.Digest
}

func newTestLayer(t *testing.T, files map[string]string) testLayer {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		hdr := &tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return testLayer{gz: gz.Bytes(), diffID: digest.FromBytes(raw.Bytes())}
}

func registryDo(t *testing.T, method, u, contentType string, body []byte, want int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s %s", method, u, resp.Status, msg)
	}
	return resp
}

// pushBlob uploads data to repo on the test registry (monolithic upload).
func pushBlob(t *testing.T, repo string, data []byte) digest.Digest {
	t.Helper()
	base, _ := url.Parse("http://" + testRegistry + "/v2/" + repo + "/blobs/uploads/")
	resp := registryDo(t, http.MethodPost, base.String(), "", nil, http.StatusAccepted)
	loc, err := base.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromBytes(data)
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	registryDo(t, http.MethodPut, loc.String(), "application/octet-stream", data, http.StatusCreated)
	return d
}

func pushManifest(t *testing.T, repo, ref, mediaType string, raw []byte) digest.Digest {
	t.Helper()
	registryDo(t, http.MethodPut, "http://"+testRegistry+"/v2/"+repo+"/manifests/"+ref, mediaType, raw, http.StatusCreated)
	return digest.FromBytes(raw)
}

type pushedImage struct {
	manifest       []byte
	manifestDigest digest.Digest
	configDigest   digest.Digest
}

// pushImage pushes an OCI image of layers for arch whose config claims
// diffIDs, tagged tag (none if empty), with the manifest's annotations.
func pushImage(t *testing.T, repo, tag, arch string, layers []testLayer, diffIDs []digest.Digest, annotations map[string]string) pushedImage {
	t.Helper()
	cfg, err := json.Marshal(imgspecv1.Image{
		Platform: imgspecv1.Platform{OS: "linux", Architecture: arch},
		Config:   imgspecv1.ImageConfig{Cmd: []string{"/bin/true"}},
		RootFS:   imgspecv1.RootFS{Type: "layers", DiffIDs: diffIDs},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := imgspecv1.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   imgspecv1.MediaTypeImageManifest,
		Config:      imgspecv1.Descriptor{MediaType: imgspecv1.MediaTypeImageConfig, Digest: pushBlob(t, repo, cfg), Size: int64(len(cfg))},
		Annotations: annotations,
	}
	for _, l := range layers {
		m.Layers = append(m.Layers, imgspecv1.Descriptor{MediaType: imgspecv1.MediaTypeImageLayerGzip, Digest: pushBlob(t, repo, l.gz), Size: int64(len(l.gz))})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	ref := tag
	if ref == "" {
		ref = digest.FromBytes(raw).String()
	}
	return pushedImage{manifest: raw, manifestDigest: pushManifest(t, repo, ref, imgspecv1.MediaTypeImageManifest, raw), configDigest: m.Config.Digest}
}

func blobPath(repo string, d digest.Digest) string { return "/v2/" + repo + "/blobs/" + d.String() }

// assertNothingStored fails if a pull left layers, images or staged blobs.
func assertNothingStored(t *testing.T, env *testEnv) {
	t.Helper()
	if layers, err := env.store.store.Layers(); err != nil || len(layers) != 0 {
		t.Errorf("layers left: %d (%v)", len(layers), err)
	}
	if images, err := env.store.List(context.Background(), nil); err != nil || len(images) != 0 {
		t.Errorf("images left: %v (%v)", images, err)
	}
	if staged, err := os.ReadDir(tmpDir(env.opts.Root)); err != nil || len(staged) != 0 {
		t.Errorf("staged files left: %v (%v)", staged, err)
	}
	// Layers unpacked but not stored (layerunpack.Differ).
	if unpacked, err := os.ReadDir(filepath.Join(env.opts.Root, "overlay", "staging")); len(unpacked) != 0 || err != nil && !os.IsNotExist(err) {
		t.Errorf("unpacked layers left: %v (%v)", unpacked, err)
	}
}

// A layer blob that does not match its digest is never stored: what was
// unpacked of it as it arrived is removed, and the digest is the error
// reported even when the corrupt data failed to unpack first.
func TestFetchCorruptBlob(t *testing.T) {
	p := newProxy(t, func(p *proxy) { p.corrupt = true })
	env := newTestEnv(t, nil, registry{prefix: p.addr, location: p.addr})
	_, err := env.store.Pull(context.Background(), p.addr+"/library/nginx:latest", nil)
	if err == nil || !strings.Contains(err.Error(), "does not match its digest") {
		t.Fatalf("err = %v", err)
	}
	assertNothingStored(t, env)
}

// A registry that sends more than a layer blob's size fails the pull (the
// fetch stops reading one byte past the size); the layer is not stored.
func TestFetchOversizedBlob(t *testing.T) {
	p := newProxy(t, func(p *proxy) { p.pad = true })
	env := newTestEnv(t, nil, registry{prefix: p.addr, location: p.addr})
	_, err := env.store.Pull(context.Background(), p.addr+"/library/nginx:latest", nil)
	if err == nil || !strings.Contains(err.Error(), "bytes received, the manifest says") {
		t.Fatalf("err = %v", err)
	}
	assertNothingStored(t, env)
}

// A layer that unpacks to other content than its image config's DiffID
// says is not stored: the DiffID is computed in the one pass that
// unpacks it, and checked before the layer is stored.
func TestFetchDiffIDMismatch(t *testing.T) {
	repo := "podunit-test/fetch-lie"
	actual := newTestLayer(t, map[string]string{"etc/real": "real"})
	claimed := newTestLayer(t, map[string]string{"etc/claimed": "claimed"})
	pushImage(t, repo, "1", runtime.GOARCH, []testLayer{actual}, []digest.Digest{claimed.diffID}, nil)
	env := newTestEnv(t, nil)
	_, err := env.store.Pull(context.Background(), testRegistry+"/"+repo+":1", nil)
	if err == nil || !strings.Contains(err.Error(), "unpacks to content with digest "+actual.diffID.String()) {
		t.Fatalf("err = %v", err)
	}
	assertNothingStored(t, env)
}

// Layers containers/image stored (here through skopeo) have the IDs fetch
// computes: a second image on the same base downloads only its own layer,
// and pulling the first again downloads no layer at all.
func TestFetchReusesLayersOfContainersImage(t *testing.T) {
	repo := "podunit-test/fetch-share"
	base := newTestLayer(t, map[string]string{"base": "base"})
	a := newTestLayer(t, map[string]string{"a": "a"})
	b := newTestLayer(t, map[string]string{"b": "b"})
	imgA := pushImage(t, repo, "a", runtime.GOARCH, []testLayer{base, a}, []digest.Digest{base.diffID, a.diffID}, nil)
	pushImage(t, repo, "b", runtime.GOARCH, []testLayer{base, b}, []digest.Digest{base.diffID, b.diffID}, nil)

	p := newProxy(t, nil)
	env := newTestEnv(t, nil, registry{prefix: p.addr, location: p.addr})
	ctx := context.Background()
	driver := env.store.Driver()
	if err := env.store.Close(); err != nil {
		t.Fatal(err)
	}
	env.store = nil
	if out, err := runCmd(ctx, "skopeo", "--policy", env.opts.PolicyPath, "copy", "--src-tls-verify=false",
		"docker://"+testRegistry+"/"+repo+":a",
		fmt.Sprintf("containers-storage:[%s@%s+%s]%s/%s:a", driver, env.opts.Root, env.opts.RunRoot, p.addr, repo)); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	env.open(t)

	idB, err := env.store.Pull(ctx, p.addr+"/"+repo+":b", nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := p.blobCounts()
	if n := counts[blobPath(repo, digest.FromBytes(base.gz))]; n != 0 {
		t.Errorf("the shared base layer was downloaded %d times", n)
	}
	if n := counts[blobPath(repo, digest.FromBytes(b.gz))]; n != 1 {
		t.Errorf("b's own layer was downloaded %d times, want 1", n)
	}
	if layers, _ := env.store.store.Layers(); len(layers) != 3 {
		t.Errorf("%d layers stored, want 3 (base, a, b)", len(layers))
	}
	idA, err := env.store.Pull(ctx, p.addr+"/"+repo+":a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if idA != imgA.configDigest.Encoded() || idA == idB {
		t.Errorf("ids a=%s b=%s, want a=%s", idA, idB, imgA.configDigest.Encoded())
	}
	if n := p.blobCounts()[blobPath(repo, digest.FromBytes(a.gz))]; n != 0 {
		t.Errorf("a's layer, stored by skopeo, was downloaded %d times", n)
	}
	img, _, err := env.store.Status(ctx, p.addr+"/"+repo+":a", true)
	if err != nil || !slices.Contains(img.RepoDigests, p.addr+"/"+repo+"@"+imgA.manifestDigest.String()) {
		t.Fatalf("status of a: %v, %v", img, err)
	}
}

// From a manifest list only this machine's image is downloaded; the
// image is found by the list's digest too.
func TestFetchManifestList(t *testing.T) {
	repo := "podunit-test/fetch-multi"
	native := newTestLayer(t, map[string]string{"native": runtime.GOARCH})
	other := newTestLayer(t, map[string]string{"other": "s390x"})
	arch := "s390x"
	if runtime.GOARCH == arch {
		arch = "amd64"
	}
	imgNative := pushImage(t, repo, "", runtime.GOARCH, []testLayer{native}, []digest.Digest{native.diffID}, nil)
	imgOther := pushImage(t, repo, "", arch, []testLayer{other}, []digest.Digest{other.diffID}, nil)
	index, err := json.Marshal(imgspecv1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: imgspecv1.MediaTypeImageIndex,
		Manifests: []imgspecv1.Descriptor{
			{MediaType: imgspecv1.MediaTypeImageManifest, Digest: imgOther.manifestDigest, Size: int64(len(imgOther.manifest)), Platform: &imgspecv1.Platform{OS: "linux", Architecture: arch}},
			{MediaType: imgspecv1.MediaTypeImageManifest, Digest: imgNative.manifestDigest, Size: int64(len(imgNative.manifest)), Platform: &imgspecv1.Platform{OS: "linux", Architecture: runtime.GOARCH}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	indexDigest := pushManifest(t, repo, "multi", imgspecv1.MediaTypeImageIndex, index)

	p := newProxy(t, nil)
	env := newTestEnv(t, nil, registry{prefix: p.addr, location: p.addr})
	ctx := context.Background()
	id, err := env.store.Pull(ctx, p.addr+"/"+repo+":multi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if id != imgNative.configDigest.Encoded() {
		t.Fatalf("pulled %s, want this machine's image %s", id, imgNative.configDigest.Encoded())
	}
	if n := p.blobCounts()[blobPath(repo, digest.FromBytes(other.gz))]; n != 0 {
		t.Errorf("the other platform's layer was downloaded %d times", n)
	}
	byDigest := p.addr + "/" + repo + "@" + indexDigest.String()
	if id2, err := env.store.Pull(ctx, byDigest, nil); err != nil || id2 != id {
		t.Fatalf("pull by the list's digest: %s, %v", id2, err)
	}
	if img, _, err := env.store.Status(ctx, byDigest, true); err != nil || img.Id != id {
		t.Fatalf("status by the list's digest: %v, %v", img, err)
	}
}

// The signature policy is enforced on single images and on the instance a
// manifest list resolves to; a rejected pull stores nothing.
func TestFetchPolicy(t *testing.T) {
	repo := "podunit-test/fetch-policy"
	l := newTestLayer(t, map[string]string{"policy": "x"})
	img := pushImage(t, repo, "single", runtime.GOARCH, []testLayer{l}, []digest.Digest{l.diffID}, nil)
	index, err := json.Marshal(imgspecv1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: imgspecv1.MediaTypeImageIndex,
		Manifests: []imgspecv1.Descriptor{{MediaType: imgspecv1.MediaTypeImageManifest, Digest: img.manifestDigest,
			Size: int64(len(img.manifest)), Platform: &imgspecv1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	pushManifest(t, repo, "list", imgspecv1.MediaTypeImageIndex, index)

	env := newTestEnv(t, func(o *Options) {
		policy := `{"default":[{"type":"insecureAcceptAnything"}],
			"transports":{"docker":{"` + testRegistry + "/" + repo + `":[{"type":"reject"}]}}}`
		o.PolicyPath = o.PolicyPath + ".rejecting"
		if err := os.WriteFile(o.PolicyPath, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	for _, tag := range []string{"single", "list"} {
		_, err := env.store.Pull(ctx, testRegistry+"/"+repo+":"+tag, nil)
		if !errors.Is(err, errdefs.ErrPermission) || !strings.Contains(err.Error(), "rejected") {
			t.Fatalf("pull of %s: %v", tag, err)
		}
	}
	assertNothingStored(t, env)
	if _, err := env.store.Pull(ctx, tagImage, nil); err != nil {
		t.Fatalf("a repository the policy accepts: %v", err)
	}
}

// Staged blobs and unpacked layers of a daemon that died mid-pull are
// removed when the store is opened again; the directory itself stays for
// the next pull.
func TestStaleStagingRemovedAtOpen(t *testing.T) {
	env := newTestEnv(t, nil)
	staging := tmpDir(env.opts.Root)
	if err := os.MkdirAll(filepath.Join(staging, "pull-123", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "pull-123", "sub", "blob"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "layer-stale"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.store.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	// A layer unpacked by a pull of a daemon that died, not stored
	// (storage prunes these itself only when it shuts down cleanly).
	unpacked := filepath.Join(env.opts.Root, "overlay", "staging", "1234")
	if err := os.MkdirAll(filepath.Join(unpacked, "dir", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unpacked, "staging.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env.open(t)
	left, err := os.ReadDir(staging)
	if err != nil {
		t.Fatalf("staging directory after reopening: %v", err)
	}
	if len(left) != 0 {
		t.Errorf("left in %s after reopening: %v", staging, left)
	}
	if _, err := os.Stat(unpacked); !os.IsNotExist(err) {
		t.Errorf("unpacked layer %s left after reopening: %v", unpacked, err)
	}
}

// The config a pull caches is the one storage gives when the image is read
// back: the pull fills the cache from what it fetched.
func TestFetchCachesConfigAsStored(t *testing.T) {
	repo := "podunit-test/fetch-config"
	l := newTestLayer(t, map[string]string{"f": "config cache"})
	pushImage(t, repo, "1", runtime.GOARCH, []testLayer{l}, []digest.Digest{l.diffID},
		map[string]string{"org.opencontainers.image.title": "podunit test"})
	env := newTestEnv(t, nil)
	s, ctx := env.store, context.Background()
	id, err := s.Pull(ctx, testRegistry+"/"+repo+":1", nil)
	if err != nil {
		t.Fatal(err)
	}
	cached, ok := s.configs.Load(id)
	if !ok {
		t.Fatalf("the pull left image %s's config uncached", id)
	}
	s.configs.Delete(id)
	stored, err := s.config(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cached, stored) {
		t.Errorf("cached at pull %+v\nread from storage %+v", cached, stored)
	}
	if stored.annotations["org.opencontainers.image.title"] != "podunit test" || stored.size == 0 {
		t.Errorf("stored config %+v: want the manifest's annotation and a size", stored)
	}
}

// After a restart, Warm fills the caches from storage: the first
// ListImages then reads nothing from storage's image records but the list.
func TestWarmFillsCachesAfterRestart(t *testing.T) {
	repo := "podunit-test/warm"
	l := newTestLayer(t, map[string]string{"f": "warm"})
	pushImage(t, repo, "1", runtime.GOARCH, []testLayer{l}, []digest.Digest{l.diffID}, nil)
	env := newTestEnv(t, nil)
	ctx := context.Background()
	id, err := env.store.Pull(ctx, testRegistry+"/"+repo+":1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.store.Close(); err != nil {
		t.Fatal(err)
	}
	env.open(t)
	s := env.store
	if _, ok := s.configs.Load(id); ok {
		t.Fatal("a new store already has the config cached")
	}
	s.Warm(ctx)
	c, ok := s.configs.Load(id)
	if !ok {
		t.Fatalf("Warm left image %s's config uncached", id)
	}
	if c.(*imageConfig).names.Load() == nil {
		t.Errorf("Warm left image %s's names unparsed", id)
	}
}
