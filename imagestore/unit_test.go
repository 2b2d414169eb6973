package imagestore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

const testDigest = "sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf"

func TestNormalizeReference(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		invalid  bool
	}{
		{in: "busybox", want: "docker.io/library/busybox:latest"},
		{in: "busybox:1.36", want: "docker.io/library/busybox:1.36"},
		{in: "library/busybox", want: "docker.io/library/busybox:latest"},
		{in: "user/app", want: "docker.io/user/app:latest"},
		{in: "docker.io/busybox", want: "docker.io/library/busybox:latest"},
		{in: "localhost/app", want: "localhost/app:latest"},
		{in: "127.0.0.1:5000/pause:3.9", want: "127.0.0.1:5000/pause:3.9"},
		{in: "registry.k8s.io/pause", want: "registry.k8s.io/pause:latest"},
		{in: "gcr.io/x/y@" + testDigest, want: "gcr.io/x/y@" + testDigest},
		// The digest pins the content; the tag beside it is dropped.
		{in: "gcr.io/x/y:v1@" + testDigest, want: "gcr.io/x/y@" + testDigest},
		{in: "", invalid: true},
		{in: " busybox", invalid: true},
		{in: "BusyBox", invalid: true},
		{in: "busybox:", invalid: true},
		{in: "gcr.io/x/y@sha256:abc", invalid: true},
		{in: testDigest[len("sha256:"):], invalid: true},
		{in: testDigest, invalid: true},
	} {
		got, err := NormalizeReference(tc.in)
		if tc.invalid {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("NormalizeReference(%q) = %v, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("NormalizeReference(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestParseLocalRef(t *testing.T) {
	id := testDigest[len("sha256:"):]
	for _, in := range []string{id, "sha256:" + id} {
		lr, err := parseLocalRef(in)
		if err != nil || lr.id != id || lr.named != nil {
			t.Errorf("parseLocalRef(%q) = %+v, %v; want ID", in, lr, err)
		}
	}
	lr, err := parseLocalRef("busybox")
	if err != nil || lr.id != "" || lr.named.String() != "docker.io/library/busybox:latest" {
		t.Errorf("parseLocalRef(busybox) = %+v, %v", lr, err)
	}
	if _, err := parseLocalRef("a b"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("parseLocalRef(a b) = %v; want ErrInvalid", err)
	}
}

func TestSplitNames(t *testing.T) {
	const md = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	tags, digests := splitNames([]string{
		"gcr.io/a/img:1",
		"gcr.io/a/img:2",
		"registry.k8s.io/img:1",
		"gcr.io/a/img@" + md, // the same digest as the tags yield: reported once
		"docker.io/library/other@" + testDigest,
		"not a name",
	}, md)
	wantTags := []string{"gcr.io/a/img:1", "gcr.io/a/img:2", "registry.k8s.io/img:1"}
	wantDigests := []string{
		"gcr.io/a/img@" + md,
		"registry.k8s.io/img@" + md,
		"docker.io/library/other@" + testDigest,
	}
	if !reflect.DeepEqual(tags, wantTags) {
		t.Errorf("tags = %q; want %q", tags, wantTags)
	}
	if !reflect.DeepEqual(digests, wantDigests) {
		t.Errorf("digests = %q; want %q", digests, wantDigests)
	}
	// Pulled by digest only: no tags (critest "with digest").
	tags, digests = splitNames([]string{"gcr.io/a/img@" + md}, md)
	if len(tags) != 0 || !reflect.DeepEqual(digests, []string{"gcr.io/a/img@" + md}) {
		t.Errorf("digest-only: tags %q digests %q", tags, digests)
	}
}

func TestParseImageUser(t *testing.T) {
	for _, tc := range []struct {
		in   string
		uid  int64 // -1: none
		name string
	}{
		{"", -1, ""},
		{"1002", 1002, ""},
		{"0", 0, ""},
		{"1003:group", 1003, ""},
		{"www-data", -1, "www-data"},
		{"www-data:group", -1, "www-data"},
		{":group", -1, ""},
		{"-1", -1, "-1"},
	} {
		uid, name := parseImageUser(tc.in)
		gotUID := int64(-1)
		if uid != nil {
			gotUID = *uid
		}
		if gotUID != tc.uid || name != tc.name {
			t.Errorf("parseImageUser(%q) = %d, %q; want %d, %q", tc.in, gotUID, name, tc.uid, tc.name)
		}
	}
}

func TestConvertAuth(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("alice:s3cr:et"))
	for _, tc := range []struct {
		name      string
		in        *runtimeapi.AuthConfig
		want      *types.DockerAuthConfig
		wantToken string
		invalid   bool
	}{
		{name: "nil", in: nil},
		{name: "empty", in: &runtimeapi.AuthConfig{ServerAddress: "r.io"}},
		{name: "user/password", in: &runtimeapi.AuthConfig{Username: "bob", Password: "pw"},
			want: &types.DockerAuthConfig{Username: "bob", Password: "pw"}},
		{name: "auth field", in: &runtimeapi.AuthConfig{Auth: b64},
			want: &types.DockerAuthConfig{Username: "alice", Password: "s3cr:et"}},
		{name: "explicit wins over auth", in: &runtimeapi.AuthConfig{Username: "bob", Password: "pw", Auth: b64},
			want: &types.DockerAuthConfig{Username: "bob", Password: "pw"}},
		{name: "identity token", in: &runtimeapi.AuthConfig{IdentityToken: "refresh"},
			want: &types.DockerAuthConfig{IdentityToken: "refresh"}},
		{name: "registry token", in: &runtimeapi.AuthConfig{RegistryToken: "bearer"}, wantToken: "bearer"},
		{name: "bad base64", in: &runtimeapi.AuthConfig{Auth: "%%%"}, invalid: true},
		{name: "no colon", in: &runtimeapi.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("x"))}, invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := convertAuth(tc.in)
			if tc.invalid {
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("err = %v; want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.auth, tc.want) || c.bearerToken != tc.wantToken {
				t.Fatalf("got %+v %q; want %+v %q", c.auth, c.bearerToken, tc.want, tc.wantToken)
			}
			sys := &types.SystemContext{}
			c.apply(sys)
			if !reflect.DeepEqual(sys.DockerAuthConfig, tc.want) || sys.DockerBearerRegistryToken != tc.wantToken {
				t.Fatalf("applied %+v %q", sys.DockerAuthConfig, sys.DockerBearerRegistryToken)
			}
			if (c.key() == "") != (tc.want == nil && tc.wantToken == "") {
				t.Fatalf("key %q for %+v", c.key(), c)
			}
		})
	}
	a, _ := convertAuth(&runtimeapi.AuthConfig{Username: "u", Password: "p1"})
	b, _ := convertAuth(&runtimeapi.AuthConfig{Username: "u", Password: "p2"})
	if a.key() == b.key() {
		t.Error("different passwords share a download key")
	}
}

// registryErr mimics github.com/docker/distribution's errcode.Error, which
// registryErrorCode matches by method set.
type registryErr struct{ code string }

type registryCode string

func (c registryCode) String() string         { return string(c) }
func (e registryErr) Error() string           { return "registry said " + e.code }
func (e registryErr) ErrorCode() registryCode { return registryCode(e.code) }

func TestPullErrorKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"unauthorized", docker.ErrUnauthorizedForCredentials{Err: errors.New("401")}, errdefs.ErrPermission},
		{"forbidden", fmt.Errorf("fetching: %w", docker.UnexpectedHTTPStatusError{StatusCode: 403}), errdefs.ErrPermission},
		{"404", docker.UnexpectedHTTPStatusError{StatusCode: 404}, errdefs.ErrNotFound},
		{"503", docker.UnexpectedHTTPStatusError{StatusCode: 503}, errdefs.ErrUnavailable},
		{"418", docker.UnexpectedHTTPStatusError{StatusCode: 418}, nil},
		{"manifest unknown", fmt.Errorf("reading manifest: %w", registryErr{"MANIFEST_UNKNOWN"}), errdefs.ErrNotFound},
		{"name unknown", registryErr{"NAME_UNKNOWN"}, errdefs.ErrNotFound},
		{"denied", fmt.Errorf("x: %w", registryErr{"DENIED"}), errdefs.ErrPermission},
		{"policy", signature.PolicyRequirementError("rejected"), errdefs.ErrPermission},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, errdefs.ErrUnavailable},
		{"dns", fmt.Errorf("pinging: %w", &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}), errdefs.ErrUnavailable},
		{"blocked", errors.New("registry evil.io is blocked in /etc/containers/registries.conf"), errdefs.ErrPermission},
		{"arch", errors.New("choosing an image from manifest list x: no image found in manifest list for architecture \"arm\""), errdefs.ErrNotFound},
		{"disk full", fmt.Errorf("writing blob: %w", syscall.ENOSPC), errdefs.ErrResourceExhausted},
		{"too many", docker.ErrTooManyRequests, errdefs.ErrUnavailable},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), errdefs.ErrDeadline},
		{"joined", errors.Join(errors.New("mirror failed"), registryErr{"MANIFEST_UNKNOWN"}), errdefs.ErrNotFound},
		{"other", errors.New("something odd"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pullErrorKind(tc.err); got != tc.want {
				t.Fatalf("pullErrorKind(%v) = %v; want %v", tc.err, got, tc.want)
			}
			wrapped := classifyPullError("gcr.io/x/y:1", "gcr.io", tc.err)
			if !errors.Is(wrapped, tc.err) && !errors.Is(wrapped, tc.want) {
				t.Fatalf("classified error %v lost its cause", wrapped)
			}
			if tc.want != nil && !errors.Is(wrapped, tc.want) {
				t.Fatalf("classified error %v is not %v", wrapped, tc.want)
			}
		})
	}
	msg := classifyPullError("gcr.io/x/y:1", "gcr.io", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}).Error()
	if want := "registry gcr.io"; !strings.Contains(msg, want) {
		t.Errorf("message %q does not name %q", msg, want)
	}
}

func TestStallWatch(t *testing.T) {
	var w stallWatch
	var stalled atomic.Int32
	stop := w.start(150*time.Millisecond, func() { stalled.Add(1) })
	// Steady progress keeps the pull alive well past the timeout.
	for range 8 {
		w.touch()
		time.Sleep(50 * time.Millisecond)
	}
	if n := stalled.Load(); n != 0 {
		t.Fatalf("stalled %d times while progressing", n)
	}
	time.Sleep(400 * time.Millisecond)
	if n := stalled.Load(); n != 1 {
		t.Fatalf("stalled %d times after silence; want 1", n)
	}
	w.touch()
	stop()
	if n := stalled.Load(); n != 1 {
		t.Fatalf("stalled %d times; want 1", n)
	}
	// Stopped before the timeout, it never fires.
	var quiet stallWatch
	stop = quiet.start(100*time.Millisecond, func() { stalled.Add(1) })
	stop()
	time.Sleep(200 * time.Millisecond)
	if n := stalled.Load(); n != 1 {
		t.Fatalf("fired after stop: %d", n)
	}
}

func TestPullGroupShares(t *testing.T) {
	g := newPullGroup(2)
	var calls atomic.Int32
	release := make(chan struct{})
	fn := func(ctx context.Context) (string, error) {
		calls.Add(1)
		<-release
		return "id1", nil
	}
	var wg sync.WaitGroup
	results := make(chan string, 3)
	for range 3 {
		wg.Go(func() {
			id, err := g.do(context.Background(), "k", fn)
			if err != nil {
				t.Error(err)
			}
			results <- id
		})
	}
	waitFor(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.flights["k"] != nil && g.flights["k"].waiters == 3
	})
	close(release)
	wg.Wait()
	close(results)
	for id := range results {
		if id != "id1" {
			t.Errorf("result %q", id)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times; want 1", n)
	}
}

func TestPullGroupCancelsWhenAbandoned(t *testing.T) {
	g := newPullGroup(1)
	cancelled := make(chan error, 1)
	fn := func(ctx context.Context) (string, error) {
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return "", ctx.Err()
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	errs := make(chan error, 2)
	go func() { _, err := g.do(ctx1, "k", fn); errs <- err }()
	go func() { _, err := g.do(ctx2, "k", fn); errs <- err }()
	waitFor(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.flights["k"] != nil && g.flights["k"].waiters == 2
	})
	cancel1()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v", err)
	}
	select {
	case err := <-cancelled:
		t.Fatalf("download cancelled while a caller still waits: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel2()
	<-errs
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("download not cancelled after every caller left")
	}
}

func TestPullGroupBounded(t *testing.T) {
	g := newPullGroup(2)
	var running, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			_, _ = g.do(context.Background(), fmt.Sprint(i), func(ctx context.Context) (string, error) {
				release, err := g.acquire(ctx)
				if err != nil {
					return "", err
				}
				defer release()
				n := running.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(30 * time.Millisecond)
				running.Add(-1)
				return "", nil
			})
		})
	}
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak parallel downloads %d; want 2", p)
	}
}

func TestOwnerMeta(t *testing.T) {
	if _, ok := parseOwnerMeta(`{"podunit":true,"kind":"rootfs","owner":"c1"}`); !ok {
		t.Error("own metadata not recognised")
	}
	for _, s := range []string{"", "{}", `{"podunit":false,"owner":"c1"}`, `{"podunit":true}`, "podman's"} {
		if _, ok := parseOwnerMeta(s); ok {
			t.Errorf("foreign metadata %q taken as podunit's", s)
		}
	}
	ids := map[string]bool{}
	for _, pair := range [][2]string{{"c1", "i1"}, {"c1", "i2"}, {"c2", "i1"}, {"c1i", "1"}} {
		id := imageVolumeID(pair[0], pair[1])
		if ids[id] || !imageIDPattern.MatchString(id) {
			t.Errorf("image volume ID %q for %q repeats or is malformed", id, pair)
		}
		ids[id] = true
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPullGroupCancelAllWaits(t *testing.T) {
	g := newPullGroup(1)
	var ended atomic.Bool
	started := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		_, err := g.do(context.Background(), "k", func(ctx context.Context) (string, error) {
			close(started)
			<-ctx.Done()
			time.Sleep(50 * time.Millisecond) // cleanup after cancellation
			ended.Store(true)
			return "", context.Cause(ctx)
		})
		errs <- err
	}()
	<-started
	g.cancelAll()
	if !ended.Load() {
		t.Fatal("cancelAll returned before the download ended")
	}
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "closing") {
		t.Fatalf("waiter got %v", err)
	}
}

// A store switched to durable stays transient while the run root holds
// any record of the transient store, or a file that might.
func TestTransientRecords(t *testing.T) {
	run := t.TempDir()
	if n := transientRecords(run); n != 0 {
		t.Fatalf("empty run root: %d records", n)
	}
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(run, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("overlay-containers/volatile-containers.json", "[]")
	write("overlay-layers/volatile-layers.json", "[]")
	write("overlay-layers/mountpoints.json", `[{"id":"a"}]`)
	if n := transientRecords(run); n != 0 {
		t.Fatalf("only empty record files: %d records", n)
	}
	write("overlay-containers/volatile-containers.json", `[{"id":"a"},{"id":"b"}]`)
	if n := transientRecords(run); n != 2 {
		t.Fatalf("two containers: %d records", n)
	}
	write("vfs-layers/volatile-layers.json", "[{")
	if n := transientRecords(run); n != 3 {
		t.Fatalf("two containers and a torn file: %d records", n)
	}
}

// The names view is cached per image; a tag added or removed, or a new
// manifest digest, must show in the next report.
func TestReportedNamesFollowChanges(t *testing.T) {
	c := &imageConfig{}
	img := &storage.Image{ID: "a", Names: []string{"docker.io/library/busybox:1"}, Digest: testDigest}
	tags, digests := c.reported(img)
	if !reflect.DeepEqual(tags, []string{"docker.io/library/busybox:1"}) || !reflect.DeepEqual(digests, []string{"docker.io/library/busybox@" + testDigest}) {
		t.Fatalf("first report: %q %q", tags, digests)
	}
	tags[0] = "scribbled" // a caller's copy
	if again, _ := c.reported(img); again[0] != "docker.io/library/busybox:1" {
		t.Fatalf("a caller's change leaked into the cache: %q", again)
	}
	img.Names = append(img.Names, "docker.io/library/busybox:2")
	if tags, _ := c.reported(img); len(tags) != 2 {
		t.Fatalf("a new tag is not reported: %q", tags)
	}
	// the last tag gone: reported by its former repository and digest
	img.NamesHistory, img.Names = img.Names, nil
	tags, digests = c.reported(img)
	if len(tags) != 0 || !reflect.DeepEqual(digests, []string{"docker.io/library/busybox@" + testDigest}) {
		t.Fatalf("untagged image: %q %q", tags, digests)
	}
	img.Digest = ""
	if _, digests := c.reported(img); len(digests) != 0 {
		t.Fatalf("no digest any more, still reported: %q", digests)
	}
}
