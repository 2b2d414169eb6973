package isothread

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// What fn changes in the filesystem context stays on its thread: the
// process's working directory is the same after a chdir inside, and fn's
// error comes back.
func TestRunConfinesTheFilesystemContext(t *testing.T) {
	before, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var inside string
	if err := Run(func() error {
		if err := unix.Chdir(dir); err != nil {
			return err
		}
		inside, err = os.Getwd()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inside != dir {
		t.Errorf("working directory inside: %q, want %q", inside, dir)
	}
	if after, err := os.Getwd(); err != nil || after != before {
		t.Errorf("working directory of the process after Run: %q, %v; want %q", after, err, before)
	}
	boom := errors.New("boom")
	if err := Run(func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Run returned %v, want fn's error", err)
	}
}
