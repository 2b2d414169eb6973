package imagestore

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.podman.io/image/v5/pkg/sysregistriesv2"

	"github.com/podunit/podunit/errdefs"
)

const acceptPolicy = `{"default":[{"type":"insecureAcceptAnything"}]}`

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// locationOf is where containers/image, through the store's current system
// context, would pull ref from; "" when no registries.conf entry matches.
func locationOf(t *testing.T, s *Store, ref string) string {
	t.Helper()
	r, err := sysregistriesv2.FindRegistry(s.systemContext(), ref)
	if err != nil {
		t.Fatalf("FindRegistry(%s): %v", ref, err)
	}
	if r == nil {
		return ""
	}
	return r.Location
}

// The store is built bare: Reconfigure touches neither storage nor the
// network, only the configuration files it checks.
func TestReconfigureRereadsRegistriesConf(t *testing.T) {
	dir := t.TempDir()
	reg, policy := filepath.Join(dir, "registries.conf"), filepath.Join(dir, "policy.json")
	writeFile(t, reg, "unqualified-search-registries = []\n")
	writeFile(t, policy, acceptPolicy)
	start := Live{RegistriesConf: reg, PolicyPath: policy, PullProgressTimeout: time.Minute}
	l, err := newLive(start)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{opts: Options{Root: dir, RunRoot: dir}, log: slog.New(slog.DiscardHandler)}
	s.live.Store(l)
	ctx := context.Background()
	const ref = "reload.podunit.test/library/busybox:1.37.0"
	if got := locationOf(t, s, ref); got != "" {
		t.Fatalf("before: %s maps to %q", ref, got)
	}

	writeFile(t, reg, "[[registry]]\nprefix = \"reload.podunit.test\"\nlocation = \"127.0.0.1:5000\"\ninsecure = true\n")
	// containers/image caches the parsed file: without a reload nothing changes
	if got := locationOf(t, s, ref); got != "" {
		t.Fatalf("containers/image re-read registries.conf by itself (%q): the reload would not be needed", got)
	}
	next := start
	next.PinnedImages = []string{"registry.k8s.io/pause:3.10"}
	if err := s.Reconfigure(ctx, next); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	if got := locationOf(t, s, ref); got != "127.0.0.1:5000" {
		t.Fatalf("after reload %s maps to %q, want 127.0.0.1:5000", ref, got)
	}
	if !s.cur().pinned.match("registry.k8s.io/pause:3.10") {
		t.Fatalf("pinned after reload: %v", s.cur().pinned)
	}

	// A broken file is refused and what ran before keeps running, cached
	// registries configuration included.
	writeFile(t, reg, "[[registry]\nprefix = \n")
	if err := s.Reconfigure(ctx, start); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Reconfigure with a broken registries.conf: %v, want ErrInvalid", err)
	}
	if got := locationOf(t, s, ref); got != "127.0.0.1:5000" {
		t.Fatalf("after a refused reload %s maps to %q", ref, got)
	}
	if !s.cur().pinned.match("registry.k8s.io/pause:3.10") {
		t.Fatalf("a refused reload changed the pinned images: %v", s.cur().pinned)
	}
}

func TestReconfigureRefusesWhatWouldNotWork(t *testing.T) {
	dir := t.TempDir()
	reg, policy := filepath.Join(dir, "registries.conf"), filepath.Join(dir, "policy.json")
	writeFile(t, reg, "")
	writeFile(t, policy, acceptPolicy)
	good := Live{RegistriesConf: reg, PolicyPath: policy, PullProgressTimeout: time.Minute, AuthFile: filepath.Join(dir, "auth.json")}
	l, err := newLive(good)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{opts: Options{Root: dir, RunRoot: dir}, log: slog.New(slog.DiscardHandler)}
	s.live.Store(l)
	badPolicy := filepath.Join(dir, "bad-policy.json")
	writeFile(t, badPolicy, `{"default": "nope"}`)
	for name, l := range map[string]Live{
		"policy that does not parse": {RegistriesConf: reg, PolicyPath: badPolicy, PullProgressTimeout: time.Minute},
		"missing policy":             {RegistriesConf: reg, PolicyPath: filepath.Join(dir, "none.json"), PullProgressTimeout: time.Minute},
		"bad pinned image":           {RegistriesConf: reg, PolicyPath: policy, PullProgressTimeout: time.Minute, PinnedImages: []string{"Not A Ref"}},
		"no timeout":                 {RegistriesConf: reg, PolicyPath: policy},
	} {
		if err := s.Reconfigure(context.Background(), l); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if got := s.systemContext().AuthFilePath; got != good.AuthFile {
			t.Errorf("%s: refused, yet the auth file is now %q", name, got)
		}
	}
	moved := good
	moved.AuthFile = filepath.Join(dir, "other-auth.json")
	moved.PullProgressTimeout = time.Second
	if err := s.Reconfigure(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	if got := s.systemContext().AuthFilePath; got != moved.AuthFile {
		t.Errorf("auth file after reload = %q, want %q", got, moved.AuthFile)
	}
	if got := s.cur().PullProgressTimeout; got != time.Second {
		t.Errorf("pull progress timeout after reload = %s", got)
	}
}

// A reload's pinned_images globs replace the old ones: what they match is
// pinned from then on, what only the old ones matched no longer is; the
// pause image stays pinned throughout.
func TestReconfigurePinnedGlobs(t *testing.T) {
	dir := t.TempDir()
	reg, policy := filepath.Join(dir, "registries.conf"), filepath.Join(dir, "policy.json")
	writeFile(t, reg, "")
	writeFile(t, policy, acceptPolicy)
	const pause = "registry.k8s.io/pause:3.10"
	start := Live{RegistriesConf: reg, PolicyPath: policy, PullProgressTimeout: time.Minute, PinnedImages: []string{pause, "docker.io/library/busybox:*"}}
	l, err := newLive(start)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{opts: Options{Root: dir, RunRoot: dir}, log: slog.New(slog.DiscardHandler)}
	s.live.Store(l)
	pinned := func(name string) bool { return s.cur().pinned.match(name) }
	if !pinned(pause) || !pinned("docker.io/library/busybox:1.37.0") || pinned("quay.io/podunit/app:1") {
		t.Fatalf("at start: %+v", s.cur().pinned)
	}

	next := start
	next.PinnedImages = []string{pause, "quay.io/podunit/*"}
	if err := s.Reconfigure(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if !pinned(pause) || pinned("docker.io/library/busybox:1.37.0") || !pinned("quay.io/podunit/app:1") {
		t.Errorf("after the reload: %+v", s.cur().pinned)
	}

	// A malformed glob is refused and the globs in force stay.
	bad := start
	bad.PinnedImages = []string{pause, "quay.io/[podunit"}
	if err := s.Reconfigure(context.Background(), bad); err == nil {
		t.Fatal("a malformed glob was accepted")
	}
	if !pinned("quay.io/podunit/app:1") || pinned("docker.io/library/busybox:1.37.0") {
		t.Errorf("after a refused reload: %+v", s.cur().pinned)
	}
}
