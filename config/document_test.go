package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped sample must be exactly what the struct renders, and must load
// back to the defaults.
func TestShippedSampleMatchesStruct(t *testing.T) {
	want, err := Documented(Default())
	if err != nil {
		t.Fatal(err)
	}
	sample := filepath.Join("..", "contrib", "config", "podunit.toml")
	got, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: regenerate with `bin/podunit config --documented --config /dev/null > %s`", sample, sample)
	}
	c, _, err := Load(sample)
	if err != nil {
		t.Fatalf("sample does not load: %v", err)
	}
	if c.Systemd.CallTimeout != Default().Systemd.CallTimeout || c.Runtime.Handlers["crun"].Path != "/usr/bin/crun" {
		t.Fatalf("sample loads to %+v", c)
	}
	for _, key := range []string{"call_timeout", "[runtime.handlers.runc]", "pull_progress_timeout", "# CRI unix socket"} {
		if !strings.Contains(string(got), key) {
			t.Errorf("sample lacks %q", key)
		}
	}
}
