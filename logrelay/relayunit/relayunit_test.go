package relayunit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The relay runs as the small binary beside podunit's when there is one
// (what counts as one is selfbin.Sibling's, tested there), as podunit's
// own hidden command otherwise.
func TestCommandPrefersTheSmallBinary(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "podunit")
	if got := Command(self); !slices.Equal(got, []string{self, "_logrelay"}) {
		t.Fatalf("without the small binary: %q", got)
	}
	small := filepath.Join(dir, BinaryName)
	if err := os.WriteFile(small, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Command(self); !slices.Equal(got, []string{small}) {
		t.Fatalf("with the small binary: %q", got)
	}
}
