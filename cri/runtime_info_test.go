package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd/systemdtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func newTestServer(t *testing.T) (*Server, *systemdtest.Fake) {
	cfg := config.Default()
	cfg.CNI.ConfDir = t.TempDir()
	fake := systemdtest.New()
	return New(Deps{Config: func() *config.Config { return &cfg }, Systemd: fake, Version: "1.2.3"}), fake
}

func cond(st *runtimeapi.StatusResponse, typ string) *runtimeapi.RuntimeCondition {
	for _, c := range st.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return nil
}

func TestStatusReflectsSystemdAndCNI(t *testing.T) {
	s, fake := newTestServer(t)
	ctx := context.Background()
	st, err := s.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !cond(st, runtimeapi.RuntimeReady).Status {
		t.Fatal("runtime not ready with a live systemd")
	}
	if f := st.GetFeatures(); !f.GetMountOptions() || !f.GetSupplementalGroupsPolicy() {
		t.Errorf("runtime features %+v: mount_options and supplemental_groups_policy are implemented", f)
	}
	if n := cond(st, runtimeapi.NetworkReady); n.Status || n.Reason == "" {
		t.Fatalf("network ready without CNI config: %+v", n)
	}
	if err := os.WriteFile(filepath.Join(s.cfg().CNI.ConfDir, "10-bridge.conflist"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake.Down = true
	st, _ = s.Status(ctx, &runtimeapi.StatusRequest{})
	if r := cond(st, runtimeapi.RuntimeReady); r.Status || r.Reason != "SystemdUnreachable" {
		t.Fatalf("runtime ready with systemd down: %+v", r)
	}
	if !cond(st, runtimeapi.NetworkReady).Status {
		t.Fatal("network not ready with a CNI config")
	}
}

func TestVersionAndRuntimeConfig(t *testing.T) {
	s, _ := newTestServer(t)
	v, _ := s.Version(context.Background(), &runtimeapi.VersionRequest{})
	if v.RuntimeName != "podunit" || v.RuntimeVersion != "1.2.3" || v.RuntimeApiVersion != "v1" {
		t.Fatalf("version %+v", v)
	}
	rc, _ := s.RuntimeConfig(context.Background(), &runtimeapi.RuntimeConfigRequest{})
	if rc.Linux.CgroupDriver != runtimeapi.CgroupDriver_SYSTEMD {
		t.Fatal("cgroup driver not systemd")
	}
}

func TestToStatus(t *testing.T) {
	for err, want := range map[error]codes.Code{
		fmt.Errorf("pod x: %w", errdefs.ErrNotFound):        codes.NotFound,
		fmt.Errorf("bad: %w", errdefs.ErrInvalid):           codes.InvalidArgument,
		fmt.Errorf("dup: %w", errdefs.ErrExists):            codes.AlreadyExists,
		fmt.Errorf("bus: %w", errdefs.ErrUnavailable):       codes.Unavailable,
		fmt.Errorf("slow: %w", errdefs.ErrDeadline):         codes.DeadlineExceeded,
		fmt.Errorf("state: %w", errdefs.ErrPrecondition):    codes.FailedPrecondition,
		fmt.Errorf("plain"):                                 codes.Unknown,
		status.Error(codes.Aborted, "already a status"):     codes.Aborted,
		fmt.Errorf("wrapped: %w", context.DeadlineExceeded): codes.DeadlineExceeded,
	} {
		if got := status.Code(ToStatus(err)); got != want {
			t.Errorf("ToStatus(%v) = %v, want %v", err, got, want)
		}
	}
}

// Status advertises each handler's own probed features, user namespaces
// included; the empty name is the default handler's.
func TestStatusHandlerFeaturesPerHandler(t *testing.T) {
	cfg := config.Default()
	cfg.CNI.ConfDir = t.TempDir()
	features := map[string]oci.Features{
		"runc": {Source: "runc features", RecursiveReadOnly: true, UserNamespaces: true},
		"crun": {Source: "crun --version", Version: "1.3"},
	}
	s := New(Deps{Config: func() *config.Config { return &cfg }, Systemd: systemdtest.New(), Handlers: func() (string, map[string]oci.Features) {
		return cfg.Runtime.DefaultHandler, features
	}})
	st, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*runtimeapi.RuntimeHandlerFeatures{}
	for _, h := range st.RuntimeHandlers {
		got[h.Name] = h.Features
	}
	if len(got) != 3 || !got[""].RecursiveReadOnlyMounts || !got["runc"].RecursiveReadOnlyMounts || got["crun"].RecursiveReadOnlyMounts {
		t.Errorf("handlers = %v", st.RuntimeHandlers)
	}
	if !got[""].UserNamespaces || !got["runc"].UserNamespaces || got["crun"].UserNamespaces {
		t.Errorf("user namespaces per handler = %v", st.RuntimeHandlers)
	}
	// A handler whose probe failed advertises nothing.
	cfg.Runtime.DefaultHandler = "crun"
	s = New(Deps{Config: func() *config.Config { return &cfg }, Systemd: systemdtest.New(), Handlers: func() (string, map[string]oci.Features) {
		return "crun", map[string]oci.Features{"runc": {}, "crun": {}}
	}})
	st, _ = s.Status(context.Background(), &runtimeapi.StatusRequest{})
	for _, h := range st.RuntimeHandlers {
		if h.Features.RecursiveReadOnlyMounts || h.Features.UserNamespaces {
			t.Errorf("unprobed %q: %v", h.Name, h.Features)
		}
	}
}

// A pod in its own user namespace runs only on a handler that can run it;
// malformed options are InvalidArgument whatever the handler.
func TestRunPodSandboxUserNamespaceNeedsHandler(t *testing.T) {
	cfg := config.Default()
	cfg.CNI.ConfDir = t.TempDir()
	s := New(Deps{Config: func() *config.Config { return &cfg }, Systemd: systemdtest.New(), Handlers: func() (string, map[string]oci.Features) {
		return "runc", map[string]oci.Features{
			"runc": {Source: "runc features", Version: "1.1.5"},
			"crun": {Source: "crun --version", Version: "1.8.1", UserNamespaces: true},
		}
	}})
	m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 100000, Length: 65536}}
	pod := func(u *runtimeapi.UserNamespace) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: u},
		}}}
	}
	ok := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
	for _, tt := range []struct {
		handler string
		u       *runtimeapi.UserNamespace
		want    error
	}{
		{"", ok, errdefs.ErrPrecondition}, // the default handler is runc
		{"runc", ok, errdefs.ErrPrecondition},
		{"runc", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}, errdefs.ErrInvalid},
		{"crun", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m}, errdefs.ErrInvalid},
		{"crun", ok, nil},
		{"runc", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil},
		{"runc", nil, nil},
	} {
		if err := s.checkUserNamespace(pod(tt.u), tt.handler); !errors.Is(err, tt.want) {
			t.Errorf("handler %q options %v: %v, want %v", tt.handler, tt.u, err, tt.want)
		}
	}
}
