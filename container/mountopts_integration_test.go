//go:build integration

package container

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// bindMountOptions mounts one host directory twice, once with the KEP-5855
// options, under runc and crun: a script in it runs from the plain mount and
// is refused from the noexec one, whose mountinfo carries all three flags;
// an option outside the three is refused before anything exists.
func (ie *inside) bindMountOptions(ctx context.Context, t *testing.T) {
	dir := filepath.Join(itestDir, "mountopts")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := ie.manager(t)
	for _, name := range []string{"mountopts", "crun-mountopts"} {
		cfg := shConfig(name, "sleep 1000")
		cfg.Mounts = []*runtimeapi.Mount{
			{ContainerPath: "/plain", HostPath: dir},
			{ContainerPath: "/hardened", HostPath: dir, MountOptions: []string{"noexec", "nodev", "nosuid"}},
		}
		id := ie.run(ctx, t, m, cfg)
		for _, c := range []struct {
			cmd, want string
			code      int32
		}{
			{`/plain/run.sh`, "ran\n", 0},
			{`/hardened/run.sh 2>/dev/null`, "", 126},
			{`grep ' /hardened ' /proc/self/mountinfo | grep -c 'noexec' ; grep ' /hardened ' /proc/self/mountinfo | grep 'nosuid' | grep -c 'nodev'`, "1\n1\n", 0},
			{`grep ' /plain ' /proc/self/mountinfo | grep -c noexec`, "0\n", 1},
		} {
			out, stderr, code, err := m.ExecSync(ctx, id, []string{"sh", "-c", c.cmd}, 10)
			if err != nil || code != c.code || string(out) != c.want {
				t.Errorf("%s: exec %q: %q (stderr %q, code %d, %v), want %q code %d", name, c.cmd, out, stderr, code, err, c.want, c.code)
			}
		}
		if err := m.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	bad := shConfig("mountopts-bad", "sleep 1000")
	bad.Mounts = []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: dir, MountOptions: []string{"noexec", "exec"}}}
	if _, err := m.Create(ctx, "pod-mountopts-bad", bad, nil); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `"exec"`) {
		t.Errorf("mount option exec: %v, want ErrInvalid naming it", err)
	}
	ie.assertNoLeaks(ctx, t)
}
