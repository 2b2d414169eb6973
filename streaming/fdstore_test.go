package streaming

import (
	"log/slog"
	"os"
	"slices"
	"testing"
)

// Descriptors an older podunit parked come back at start; they are
// dropped from the store, not only closed, or they would come back again.
func TestReleaseStored(t *testing.T) {
	store := &memStore{}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := store.Store(stdinFDPrefix+"c1", w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	sockR, sockW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer sockR.Close()
	defer sockW.Close()
	stored, rest := SplitActivationFiles(append(store.restart(), sockR))
	if len(stored) != 1 || len(rest) != 1 || rest[0] != sockR {
		t.Fatalf("stored %v, rest %v", stored, rest)
	}
	ReleaseStored(stored, store, slog.Default())
	if !slices.Contains(store.entries(), "remove "+stdinFDPrefix+"c1") || len(store.restart()) != 0 {
		t.Fatalf("store still holds it: %q", store.entries())
	}
	if _, err := stored[0].Write([]byte("x")); err == nil {
		t.Error("released descriptor still open")
	}
}
