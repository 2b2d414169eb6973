package container

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
)

func (e *env) spec(id string) *specs.Spec {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.opts.RunDir, id, "bundle", "config.json"))
	if err != nil {
		e.t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		e.t.Fatal(err)
	}
	return &s
}

// runtime.default_capabilities, default_ulimits and seccomp_profile reach
// the bundle of a new container.
func TestOperatorDefaultsReachSpec(t *testing.T) {
	e := newEnv(t)
	profile := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := config.Default().Runtime
	r.DefaultCapabilities = []string{"CHOWN", "cap_kill"}
	r.DefaultUlimits = []string{"nofile=4096:8192", "core=0"}
	r.SeccompProfile = profile
	if err := e.opts.SetRuntime(r); err != nil {
		t.Fatal(err)
	}
	e.m = e.newManager()
	cfg := containerConfig("x")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
	if err != nil {
		t.Fatal(err)
	}
	s := e.spec(id)
	if got := s.Process.Capabilities.Bounding; !slices.Equal(got, []string{"CAP_CHOWN", "CAP_KILL"}) {
		t.Errorf("capabilities = %v", got)
	}
	want := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 4096, Hard: 8192}, {Type: "RLIMIT_CORE"}}
	if !slices.Equal(s.Process.Rlimits, want) {
		t.Errorf("rlimits = %+v, want %+v", s.Process.Rlimits, want)
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != specs.ActErrno || len(sc.Syscalls) != 1 || !slices.Equal(sc.Syscalls[0].Names, []string{"read", "write"}) {
		t.Errorf("seccomp = %+v, want the configured profile", sc)
	}

	// The defaults: containerd's 14 capabilities, no rlimits, the
	// built-in profile (which allows far more than two syscalls).
	d := newEnv(t)
	s = d.spec(func() string {
		id, err := d.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}())
	if len(s.Process.Capabilities.Bounding) != 14 || len(s.Process.Rlimits) != 0 || s.Linux.Seccomp == nil || len(s.Linux.Seccomp.Syscalls) < 2 {
		t.Errorf("default spec: caps %v rlimits %v seccomp %d rules", s.Process.Capabilities.Bounding, s.Process.Rlimits, len(s.Linux.Seccomp.Syscalls))
	}
}

func TestSetRuntimeRejectsBadSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"defaultAction":`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bad, filepath.Join(dir, "missing.json")} {
		r := config.Default().Runtime
		r.SeccompProfile = p
		var o Options
		if err := o.SetRuntime(r); err == nil || !strings.Contains(err.Error(), "runtime.seccomp_profile") {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// A recursive read-only mount is refused with InvalidArgument on a handler
// that cannot make it, and made on one that can.
func TestCreateRecursiveReadOnlyPerHandler(t *testing.T) {
	e := newEnv(t)
	cfg := containerConfig("ro")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true, RecursiveReadOnly: true}}
	e.deps.Features = map[string]oci.Features{"runc": {Source: "runc features", Version: "1.0.0"}}
	e.m = e.newManager()
	if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "recursive read-only") {
		t.Fatalf("rro on a handler without it: %v", err)
	}
	e.assertClean()

	e.deps.Features = map[string]oci.Features{"runc": {Source: "runc features", RecursiveReadOnly: true}}
	e.m = e.newManager()
	id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range e.spec(id).Mounts {
		if m.Destination == "/data" && !slices.Contains(m.Options, "rro") {
			t.Errorf("/data options %v", m.Options)
		}
	}
}

// Each handler is asked once; one that cannot answer gets no features and
// a warning naming it.
func TestProbeFeatures(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	got := ProbeFeatures(ctx, map[string]oci.Runtime{
		"runc":   &fakeRuntime{features: oci.Features{Source: "runc features", Version: "1.1.5", RecursiveReadOnly: true}},
		"crun":   &fakeRuntime{features: oci.Features{Source: "crun --version", Version: "1.3"}},
		"broken": &fakeRuntime{featuresErr: errors.New("exec: no such file")},
	}, log)
	if !got["runc"].RecursiveReadOnly || got["crun"].RecursiveReadOnly || got["crun"].Version != "1.3" || got["broken"].Source != "" {
		t.Errorf("features = %+v", got)
	}
	out := logs.String()
	for _, want := range []string{"handler=runc features.source=\"runc features\"", "features.recursive_read_only=true", "handler=broken err=\"exec: no such file\""} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
