package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/apparmor"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
)

// fakeAppArmorHost is an AppArmor host in a temp dir whose profiles file
// lists critest's deny-write profile and whose parser "loads" the default.
func fakeAppArmorHost(t *testing.T) (*apparmor.Host, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "securityfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "securityfs", "profiles")
	if err := os.WriteFile(profiles, []byte("cri-validate-apparmor-test-deny-write (enforce)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	parser := filepath.Join(dir, "apparmor_parser")
	script := fmt.Sprintf("#!/bin/sh\necho run >> %s/runs\ncat >/dev/null\necho '%s (enforce)' >> %s\n", dir, apparmor.DefaultProfile, profiles)
	if err := os.WriteFile(parser, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h := apparmor.NewHost(nil)
	h.SecurityFS = filepath.Join(dir, "securityfs")
	h.ConfigDir = filepath.Join(dir, "apparmor.d")
	h.Parser = parser
	return h, dir
}

func TestCreateAppArmor(t *testing.T) {
	e := newEnv(t)
	aa, dir := fakeAppArmorHost(t)
	e.opts.Host = oci.Host{AppArmorEnabled: true, AppArmorDefaultProfile: apparmor.DefaultProfile, AppArmor: aa}
	e.m = e.newManager()

	cfg := containerConfig("missing")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/non-existent-profile"}
	if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrPrecondition) ||
		!strings.Contains(err.Error(), `"non-existent-profile" is not loaded`) {
		t.Fatalf("unloaded localhost profile: err = %v", err)
	}
	e.assertClean()

	for name, tt := range map[string]struct {
		sc   *runtimeapi.LinuxContainerSecurityContext
		want string
	}{
		"unset": {sc: nil, want: apparmor.DefaultProfile},
		"typed preferred": {sc: &runtimeapi.LinuxContainerSecurityContext{
			ApparmorProfile: "localhost/non-existent-profile",
			Apparmor: &runtimeapi.SecurityProfile{
				ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/cri-validate-apparmor-test-deny-write",
			},
		}, want: "cri-validate-apparmor-test-deny-write"},
		"unconfined": {sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "unconfined"}},
	} {
		cfg := containerConfig(strings.ReplaceAll(name, " ", "-"))
		cfg.Linux.SecurityContext = tt.sc
		id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := e.bundleSpec(id).Process.ApparmorProfile; got != tt.want {
			t.Errorf("%s: profile %q, want %q", name, got, tt.want)
		}
	}
	if runs, _ := os.ReadFile(filepath.Join(dir, "runs")); string(runs) != "run\n" {
		t.Errorf("parser runs %q, want one", runs)
	}
}
