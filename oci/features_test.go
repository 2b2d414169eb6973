package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
)

// testdata/features: runc-1.1.5.json and crun-1.8.1.version are what
// Debian 12's runc and crun print on the build host; runc-no-rro.json
// (rro/rrw removed), runc-idmap.json (mountExtensions.idmap on, as runc
// 1.2 reports it) and crun-1.3.version are edited copies.
func readFeatures(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "features", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	fullKernel = Kernel{MountSetattr: true, UserNamespaces: true}
	oldKernel  = Kernel{UserNamespaces: true} // before Linux 5.12
)

func TestFeaturesFromSpec(t *testing.T) {
	tests := []struct {
		file        string
		k           Kernel
		rro, userns bool
		wantVersion string
	}{
		{file: "runc-1.1.5.json", k: fullKernel, rro: true, wantVersion: "1.1.5+ds1"},
		// rro needs mount_setattr even where runc knows the option.
		{file: "runc-1.1.5.json", k: oldKernel, wantVersion: "1.1.5+ds1"},
		{file: "runc-no-rro.json", k: fullKernel, wantVersion: "1.1.5+ds1"},
		// user namespaces need idmapped mounts, which runc 1.1 lacks.
		{file: "runc-idmap.json", k: fullKernel, rro: true, userns: true, wantVersion: "1.2.0"},
		{file: "runc-idmap.json", k: Kernel{MountSetattr: true}, rro: true, wantVersion: "1.2.0"},
	}
	for _, tt := range tests {
		f, err := FeaturesFromSpec("runc features", readFeatures(t, tt.file), tt.k)
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if f.RecursiveReadOnly != tt.rro || f.UserNamespaces != tt.userns || f.Version != tt.wantVersion || f.Source != "runc features" {
			t.Errorf("%s %+v: %+v, want rro=%t userns=%t version %q", tt.file, tt.k, f, tt.rro, tt.userns, tt.wantVersion)
		}
	}
	if _, err := FeaturesFromSpec("runc features", []byte("Usage: runc"), fullKernel); err == nil {
		t.Error("garbage decoded")
	}
}

func TestFeaturesFromCrunVersion(t *testing.T) {
	tests := []struct {
		out         string
		k           Kernel
		rro, userns bool
		version     string
	}{
		{out: string(readFeatures(t, "crun-1.8.1.version")), k: fullKernel, rro: true, userns: true, version: "1.8.1"},
		{out: string(readFeatures(t, "crun-1.8.1.version")), k: oldKernel, version: "1.8.1"},
		// Before 1.4 crun has no recursive mount options, before 1.8.1
		// its idmapped mounts take inverted mappings.
		{out: string(readFeatures(t, "crun-1.3.version")), k: fullKernel, version: "1.3"},
		{out: "crun version 1.4\n", k: fullKernel, rro: true, version: "1.4"},
		{out: "crun version 1.8\n", k: fullKernel, rro: true, version: "1.8"},
		{out: "crun version 1.20.1-dirty\n", k: fullKernel, rro: true, userns: true, version: "1.20.1-dirty"},
	}
	for _, tt := range tests {
		f, err := FeaturesFromCrunVersion(tt.out, tt.k)
		if err != nil {
			t.Fatalf("%q: %v", tt.out, err)
		}
		if f.RecursiveReadOnly != tt.rro || f.UserNamespaces != tt.userns || f.Version != tt.version || f.Source != "crun --version" {
			t.Errorf("%q %+v: %+v, want rro=%t userns=%t version %q", tt.out, tt.k, f, tt.rro, tt.userns, tt.version)
		}
	}
	f, _ := FeaturesFromCrunVersion(string(readFeatures(t, "crun-1.8.1.version")), fullKernel)
	if !slices.Contains(f.Flags, "+SECCOMP") || !slices.Contains(f.Flags, "+SYSTEMD") {
		t.Errorf("flags = %v", f.Flags)
	}
	for _, bad := range []string{"", "crun version x.y\n", "runc version 1.1.5\n", "crun version 1\n"} {
		if _, err := FeaturesFromCrunVersion(bad, fullKernel); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// fakeRuntimeBinary writes a shell script standing in for runc or crun:
// `features` prints featuresOut (or fails with crun 1.8's message when
// empty), `--version` prints versionOut. The global flags come first,
// as podunit passes them.
func fakeRuntimeBinary(t *testing.T, featuresOut, versionOut []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range map[string][]byte{"features.out": featuresOut, "version.out": versionOut} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	features := `cat ` + dir + `/features.out`
	if len(featuresOut) == 0 {
		features = `echo "unknown command features" >&2; exit 1`
	}
	script := "#!/bin/sh\nfor a; do last=$a; done\n" +
		"case \"$last\" in\n" +
		"features) " + features + " ;;\n" +
		"--version) cat " + dir + "/version.out ;;\n" +
		"*) exit 2 ;;\nesac\n"
	bin := filepath.Join(dir, "runtime")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Each handler is asked itself: a runc without rro and Debian's crun 1.8.1
// (no features command, version fallback) give different answers.
func TestCLIFeaturesPerHandler(t *testing.T) {
	k := ProbeKernel()
	runc := NewRunc(CLIConfig{Binary: fakeRuntimeBinary(t, readFeatures(t, "runc-no-rro.json"), nil), Root: "/r"})
	crun := NewCrun(CLIConfig{Binary: fakeRuntimeBinary(t, nil, readFeatures(t, "crun-1.8.1.version")), Root: "/c"})
	rf, err := runc.Features(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cf, err := crun.Features(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rf.Source != "runc features" || rf.RecursiveReadOnly || rf.UserNamespaces {
		t.Errorf("runc without rro: %+v", rf)
	}
	if cf.Source != "crun --version" || cf.Version != "1.8.1" || cf.RecursiveReadOnly != k.MountSetattr {
		t.Errorf("crun 1.8.1 (kernel %+v): %+v", k, cf)
	}
	if k.MountSetattr && rf.RecursiveReadOnly == cf.RecursiveReadOnly {
		t.Errorf("handlers answer alike: %+v %+v", rf, cf)
	}

	// A runc that cannot answer is an error, not a fallback.
	broken := NewRunc(CLIConfig{Binary: fakeRuntimeBinary(t, nil, readFeatures(t, "crun-1.8.1.version")), Root: "/r"})
	if f, err := broken.Features(t.Context()); err == nil || !strings.Contains(err.Error(), "unknown command features") {
		t.Errorf("runc without features: %+v, %v", f, err)
	}
}

func TestCLIFeaturesTimeout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "crun")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := NewCrun(CLIConfig{Binary: bin, Root: "/c"}).Features(ctx)
	if !errors.Is(err, errdefs.ErrDeadline) {
		t.Errorf("err = %v, want a deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("probe took %v", d)
	}
}
