package cri

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/imagestore"
)

// TestMain lets go.podman.io/storage re-execute the test binary to apply
// layers (imagestore.Reexec); it must stay the package's only TestMain.
func TestMain(m *testing.M) {
	if imagestore.Reexec() {
		return
	}
	os.Exit(m.Run())
}

// fakeRegistry serves one single-layer OCI image, read-only, over the
// distribution API subset a pull uses: enough to test the RPCs end to end
// without the shared test registry.
type fakeRegistry struct {
	blobs     map[string][]byte // digest -> content
	manifests map[string][]byte // tag or digest -> manifest
}

func sha(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

func newFakeRegistry(t *testing.T, user string) *fakeRegistry {
	t.Helper()
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	content := []byte("hello from podunit\n")
	if err := tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(content)
	_ = tw.Close()
	var gzBuf bytes.Buffer
	gz := gzip.NewWriter(&gzBuf)
	_, _ = gz.Write(tarBuf.Bytes())
	_ = gz.Close()
	layer := gzBuf.Bytes()

	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"User": user, "Cmd": []string{"/hello"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{sha(tarBuf.Bytes())}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config), "size": len(config)},
		"layers": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(layer), "size": len(layer),
		}},
		"annotations": map[string]string{"org.example.test": "yes"},
	})
	return &fakeRegistry{
		blobs:     map[string][]byte{sha(layer): layer, sha(config): config},
		manifests: map[string][]byte{"v1": manifest, sha(manifest): manifest},
	}
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	notFound := func(code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"errors":[{"code":%q,"message":"not here"}]}`, code)
	}
	p := r.URL.Path
	switch {
	case p == "/v2/" || p == "/v2":
		w.WriteHeader(http.StatusOK)
	case strings.HasPrefix(p, "/v2/test/img/manifests/"):
		m, ok := f.manifests[strings.TrimPrefix(p, "/v2/test/img/manifests/")]
		if !ok {
			notFound("MANIFEST_UNKNOWN")
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", sha(m))
		w.Header().Set("Content-Length", fmt.Sprint(len(m)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(m)
		}
	case strings.HasPrefix(p, "/v2/test/img/blobs/"):
		b, ok := f.blobs[strings.TrimPrefix(p, "/v2/test/img/blobs/")]
		if !ok {
			notFound("BLOB_UNKNOWN")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(b)
		}
	default:
		notFound("NAME_UNKNOWN")
	}
}

// newImageServer serves the fake registry and opens a store that pulls
// from it over plain HTTP.
func newImageServer(t *testing.T) (*Server, string) {
	t.Helper()
	reg := httptest.NewServer(newFakeRegistry(t, "1234"))
	t.Cleanup(reg.Close)
	addr := strings.TrimPrefix(reg.URL, "http://")

	dir := t.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	policy := filepath.Join(dir, "policy.json")
	regs := fmt.Sprintf("[[registry]]\nlocation = %q\ninsecure = true\n\n[[registry]]\nprefix = \"refused.test\"\nlocation = \"127.0.0.1:1\"\ninsecure = true\n", addr)
	if err := os.WriteFile(conf, []byte(regs), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := imagestore.New(context.Background(), imagestore.Options{
		Root:           filepath.Join(dir, "root"),
		RunRoot:        filepath.Join(dir, "run"),
		Driver:         "vfs", // any filesystem, no mounts to clean up
		RegistriesConf: conf,
		PolicyPath:     policy,
		PinnedImages:   []string{addr + "/test/img:v1"},
		// the shipped defaults
		PullProgressTimeout: config.Default().Image.PullProgressTimeout.D(),
		MaxParallelPulls:    config.Default().Image.MaxParallelPulls,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return &Server{images: store, log: slog.New(slog.DiscardHandler)}, addr
}

func spec(ref string) *runtimeapi.ImageSpec { return &runtimeapi.ImageSpec{Image: ref} }

func wantCode(t *testing.T, err error, code codes.Code, mention string) {
	t.Helper()
	st := status.Convert(ToStatus(err))
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), mention) {
		t.Fatalf("error %v (code %s); want %s mentioning %q", err, st.Code(), code, mention)
	}
}

func TestImageService(t *testing.T) {
	s, addr := newImageServer(t)
	ctx := context.Background()
	ref := addr + "/test/img:v1"

	pulled, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec(ref)})
	if err != nil {
		t.Fatal(err)
	}
	id := pulled.ImageRef
	if len(id) != 64 {
		t.Fatalf("image_ref %q is not an image ID", id)
	}

	st, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec(ref), Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	img := st.GetImage()
	if img.GetId() != id || len(img.GetRepoTags()) != 1 || img.GetRepoTags()[0] != ref ||
		len(img.GetRepoDigests()) != 1 || !strings.HasPrefix(img.GetRepoDigests()[0], addr+"/test/img@sha256:") ||
		img.GetUid().GetValue() != 1234 || img.GetUsername() != "" || img.GetSize() == 0 || !img.GetPinned() ||
		img.GetSpec().GetAnnotations()["org.example.test"] != "yes" {
		t.Fatalf("status %v", img)
	}
	if !strings.Contains(st.GetInfo()["info"], `"imageSpec"`) {
		t.Fatalf("verbose info %v", st.GetInfo())
	}
	quiet, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec(id)})
	if err != nil || quiet.GetInfo() != nil || quiet.GetImage().GetId() != id {
		t.Fatalf("non-verbose status by ID: %v, %v", quiet, err)
	}

	list, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(list.GetImages()) != 1 || list.GetImages()[0].GetId() != id {
		t.Fatalf("ListImages = %v, %v", list, err)
	}
	list, err = s.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: spec("busybox")}})
	if err != nil || len(list.GetImages()) != 0 {
		t.Fatalf("filtered ListImages = %v, %v", list, err)
	}

	fs, err := s.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(fs.GetImageFilesystems()) != 1 || fs.GetImageFilesystems()[0].GetUsedBytes().GetValue() == 0 ||
		fs.GetImageFilesystems()[0].GetFsId().GetMountpoint() == "" || len(fs.GetContainerFilesystems()) != 1 {
		t.Fatalf("ImageFsInfo = %v, %v", fs, err)
	}

	if _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec(id)}); err != nil {
		t.Fatal(err)
	}
	st, err = s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec(ref)})
	if err != nil || st.GetImage() != nil {
		t.Fatalf("status after removal: %v, %v", st, err)
	}
	if _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec(ref)}); err != nil {
		t.Fatalf("removing an absent image: %v", err)
	}
}

func TestImageServiceErrors(t *testing.T) {
	s, addr := newImageServer(t)
	ctx := context.Background()

	_, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec(addr + "/test/img:nope")})
	wantCode(t, err, codes.NotFound, addr)
	_, err = s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec("refused.test/img:1")})
	wantCode(t, err, codes.Unavailable, "refused.test")
	tctx, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	_, err = s.PullImage(tctx, &runtimeapi.PullImageRequest{Image: spec(addr + "/test/img:v1")})
	wantCode(t, err, codes.DeadlineExceeded, "")

	for _, bad := range []string{"", "Bad Ref", "img@sha256:123"} {
		_, err = s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec(bad)})
		wantCode(t, err, codes.InvalidArgument, "")
		_, err = s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec(bad)})
		wantCode(t, err, codes.InvalidArgument, "")
		_, err = s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec(bad)})
		wantCode(t, err, codes.InvalidArgument, "")
	}
}
