//go:build integration

package container

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cdiDevices runs busybox with CDI devices from a spec file in its own
// spec directory, written after the manager started (as a device plugin
// would): the device node, the environment and the mount reach the
// container, and an unknown device leaves nothing behind.
func (ie *inside) cdiDevices(ctx context.Context, t *testing.T) {
	dir := filepath.Join(itestDir, "cdi")
	src := filepath.Join(itestDir, "cdi-mounted")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("from-the-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := ie.opts
	if err := opts.SetCDI(config.CDI{Enabled: true, SpecDirs: []string{"/etc/cdi", dir}}); err != nil {
		t.Fatal(err)
	}
	m, err := New(opts, ie.deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "podunit-test.json"), []byte(testCDISpec(src)), 0o644); err != nil {
		t.Fatal(err)
	}

	cfg := shConfig("cdi", "sleep 1000")
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podunit.test/null=one"}}
	cfg.Annotations = map[string]string{"cdi.k8s.io/podunit-test": "podunit.test/null=two"}
	id := ie.run(ctx, t, m, cfg)
	for _, c := range []struct{ cmd, want string }{
		// 1:3 is /dev/null's device number; writing checks the device cgroup.
		{`test -c /dev/cdi-null && stat -c '%F %t:%T' /dev/cdi-null && echo x >/dev/cdi-null && echo written`, "character special file 1:3\nwritten\n"},
		{`echo $CDI_TEST`, "one\n"},
		{`echo $CDI_TWO; test -c /dev/cdi-null2 && echo two-present`, "2\ntwo-present\n"},
		{`cat /etc/cdi-test`, "from-the-host\n"},
	} {
		out, stderr, code, err := m.ExecSync(ctx, id, []string{"sh", "-c", c.cmd}, 10)
		if err != nil || code != 0 || string(out) != c.want {
			t.Errorf("exec %q: %q (stderr %q, code %d, %v), want %q", c.cmd, out, stderr, code, err, c.want)
		}
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}

	bad := shConfig("cdi-unknown", "sleep 1000")
	bad.CDIDevices = []*runtimeapi.CDIDevice{{Name: "podunit.test/null=nine"}}
	if _, err := m.Create(ctx, "pod-cdi-unknown", bad, nil); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "podunit.test/null=nine") {
		t.Errorf("unknown CDI device: %v, want ErrInvalid naming it", err)
	}
	ie.assertNoLeaks(ctx, t)
}
