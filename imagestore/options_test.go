package imagestore

import (
	"errors"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
)

// testOptions are the shipped defaults (package config) with the store's
// directories moved to root and run.
func testOptions(root, run string) Options {
	d := config.Default().Image
	return Options{
		Root: root, RunRoot: run, Transient: d.StorageTransient,
		RegistriesConf: d.RegistriesConf, PolicyPath: d.PolicyPath,
		PullProgressTimeout: d.PullProgressTimeout.D(), MaxParallelPulls: d.MaxParallelPulls,
	}
}

func TestNewRejectsMissingOptions(t *testing.T) {
	o := testOptions(t.TempDir(), t.TempDir())
	o.PolicyPath, o.MaxParallelPulls = "", 0
	if _, err := New(t.Context(), o); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("New without PolicyPath and MaxParallelPulls: %v", err)
	}
}
