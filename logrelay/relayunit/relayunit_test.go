package relayunit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCommandPrefersTheSmallBinary(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "podunit")
	if got := Command(self); !slices.Equal(got, []string{self, "_logrelay"}) {
		t.Fatalf("without the small binary: %q", got)
	}
	small := filepath.Join(dir, BinaryName)
	if err := os.WriteFile(small, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Command(self); got[0] != self {
		t.Fatalf("a non-executable file was taken: %q", got)
	}
	os.Chmod(small, 0o755)
	if got := Command(self); !slices.Equal(got, []string{small}) {
		t.Fatalf("with the small binary: %q", got)
	}
}
