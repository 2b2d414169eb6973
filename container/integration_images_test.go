//go:build integration

package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/imagestore"
	"go.podman.io/storage/pkg/archive"
	"golang.org/x/sys/unix"
)

// dirImages is an image store whose only image is busybox, and whose
// rootfs "mounts" are real bind mounts, so leak checks mean something.
type dirImages struct {
	root, template string
}

func newDirImages(t *testing.T, root string) *dirImages {
	tpl := filepath.Join(root, ".template")
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(tpl, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "/usr/bin/busybox", filepath.Join(tpl, "bin", "busybox")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	list, err := exec.Command("/usr/bin/busybox", "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			_ = os.Symlink("busybox", filepath.Join(tpl, "bin", a))
		}
	}
	os.WriteFile(filepath.Join(tpl, "etc", "passwd"), []byte("root:x:0:0:root:/:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(tpl, "etc", "group"), []byte("root:x:0:\n"), 0o644)
	return &dirImages{root: root, template: tpl}
}

func (d *dirImages) Resolve(ctx context.Context, ref string) (*imagestore.ImageInfo, error) {
	if ref != "busybox" && ref != "b0b0" {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return &imagestore.ImageInfo{ID: "b0b0", RepoTags: []string{"busybox:latest"},
		Config: imgspecv1.ImageConfig{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}}}, nil
}

func (d *dirImages) CreateContainerRootfs(ctx context.Context, id, imageRef, name string, idmap *imagestore.IDMap) error {
	dst := filepath.Join(d.root, id)
	if err := os.MkdirAll(filepath.Join(dst, "merged"), 0o755); err != nil {
		return err
	}
	out, err := exec.Command("cp", "-a", d.template, filepath.Join(dst, "diff")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func (d *dirImages) MountRootfs(ctx context.Context, id string) (string, error) {
	merged := filepath.Join(d.root, id, "merged")
	if mounted(merged) {
		return merged, nil
	}
	if err := unix.Mount(filepath.Join(d.root, id, "diff"), merged, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("mount rootfs %s: %w", id, err)
	}
	return merged, nil
}

func (d *dirImages) UnmountRootfs(ctx context.Context, id string) error {
	merged := filepath.Join(d.root, id, "merged")
	if !mounted(merged) {
		return nil
	}
	return unix.Unmount(merged, 0)
}

// DeleteRootfs unmounts first, as storage's removal does: RemoveContainer
// leaves the unmount to the reaper's deletion.
func (d *dirImages) DeleteRootfs(ctx context.Context, id string) error {
	if err := d.UnmountRootfs(ctx, id); err != nil {
		return fmt.Errorf("rootfs %s: %w", id, err)
	}
	return os.RemoveAll(filepath.Join(d.root, id))
}

func (d *dirImages) RootfsChanges(ctx context.Context, id string) ([]archive.Change, error) {
	return archive.ChangesDirs(filepath.Join(d.root, id, "diff"), nil, d.template, nil)
}

func (d *dirImages) MountImageVolume(ctx context.Context, id, imageRef string) (string, error) {
	return "", fmt.Errorf("image volumes: %w", errdefs.ErrUnimplemented)
}
func (d *dirImages) UnmountImageVolumes(ctx context.Context, id string) error { return nil }
func (d *dirImages) DeleteImageVolumes(ctx context.Context, id string) error  { return nil }

func mounted(p string) bool {
	for _, line := range mountLines() {
		if f := strings.Fields(line); len(f) > 4 && f[4] == p {
			return true
		}
	}
	return false
}

func mountLines() []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return strings.Split(string(b), "\n")
}
