package config

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every operator default names its key when it is wrong.
func TestValidateOperatorDefaults(t *testing.T) {
	tests := []struct {
		name string
		set  func(*Config)
		key  string
	}{
		{"unknown capability", func(c *Config) { c.Runtime.DefaultCapabilities = []string{"CHOWN", "CAP_FLY"} }, `runtime.default_capabilities: unknown capability "CAP_FLY"`},
		{"empty capability", func(c *Config) { c.Runtime.DefaultCapabilities = []string{""} }, "runtime.default_capabilities"},
		{"ulimit without =", func(c *Config) { c.Runtime.DefaultUlimits = []string{"nofile"} }, "runtime.default_ulimits"},
		{"unknown ulimit", func(c *Config) { c.Runtime.DefaultUlimits = []string{"files=10"} }, `runtime.default_ulimits: "files=10": unknown limit`},
		{"ulimit soft above hard", func(c *Config) { c.Runtime.DefaultUlimits = []string{"nofile=20:10"} }, "soft limit above hard"},
		{"ulimit not a number", func(c *Config) { c.Runtime.DefaultUlimits = []string{"nproc=many"} }, "runtime.default_ulimits"},
		{"ulimit twice", func(c *Config) { c.Runtime.DefaultUlimits = []string{"nofile=1", "NOFILE=2"} }, "runtime.default_ulimits: nofile given twice"},
		{"relative seccomp profile", func(c *Config) { c.Runtime.SeccompProfile = "seccomp.json" }, "runtime.seccomp_profile"},
		{"bad pin glob", func(c *Config) { c.Image.PinnedImages = []string{"registry.k8s.io/[pause"} }, "image.pinned_images"},
		{"empty pin", func(c *Config) { c.Image.PinnedImages = []string{""} }, "image.pinned_images"},
	}
	for _, tt := range tests {
		c := Default()
		tt.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%s: %v, want mention of %s", tt.name, err, tt.key)
		}
	}
	c := Default()
	c.Runtime.DefaultCapabilities = []string{"net_admin", "CAP_SYS_PTRACE", "CHECKPOINT_RESTORE"}
	c.Runtime.DefaultUlimits = []string{"nofile=1048576:1048576", "core=-1", "nproc=unlimited:unlimited", "memlock=64"}
	c.Runtime.SeccompProfile = "/etc/podunit/seccomp.json"
	c.Image.PinnedImages = []string{"registry.k8s.io/*", "docker.io/library/busybox:1.36"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestUlimits(t *testing.T) {
	r := Runtime{DefaultUlimits: []string{"nofile=1048576:1048576", "core=-1", "nproc=4096:unlimited", "memlock=64"}}
	got, err := r.Ulimits()
	if err != nil {
		t.Fatal(err)
	}
	want := []Ulimit{
		{Name: "nofile", Soft: 1048576, Hard: 1048576},
		{Name: "core", Soft: math.MaxUint64, Hard: math.MaxUint64},
		{Name: "nproc", Soft: 4096, Hard: math.MaxUint64},
		{Name: "memlock", Soft: 64, Hard: 64},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Ulimits = %+v, want %+v", got, want)
	}
}

// The defaults keep what podunit gave containers before they were
// configurable (containerd's 14 capabilities, no limits, the built-in
// seccomp profile), and a file can replace each.
func TestOperatorDefaultsLoad(t *testing.T) {
	d := Default()
	if len(d.Runtime.DefaultCapabilities) != 14 || len(d.Runtime.DefaultUlimits) != 0 || d.Runtime.SeccompProfile != "" || len(d.Image.PinnedImages) != 0 {
		t.Fatalf("defaults changed: %+v %+v", d.Runtime, d.Image.PinnedImages)
	}
	p := filepath.Join(t.TempDir(), "podunit.toml")
	write(t, p, `[image]
pinned_images = ["registry.k8s.io/*"]
[runtime]
default_capabilities = ["CHOWN", "KILL"]
default_ulimits = ["nofile=4096:8192"]
seccomp_profile = "/etc/podunit/seccomp.json"
`)
	c, _, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Runtime.DefaultCapabilities, []string{"CHOWN", "KILL"}) || !slices.Equal(c.Runtime.DefaultUlimits, []string{"nofile=4096:8192"}) ||
		c.Runtime.SeccompProfile != "/etc/podunit/seccomp.json" || !slices.Equal(c.Image.PinnedImages, []string{"registry.k8s.io/*"}) {
		t.Errorf("loaded %+v %+v", c.Runtime, c.Image)
	}
}
