//go:build integration

package container

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// pluginAdjust runs busybox adjusted the way NRI plugins adjust (package
// nri maps a ContainerAdjustment onto exactly these changes): a device, an
// environment variable, a bind mount and a memory limit reach the running
// container under runc, and the plugins see its exit.
func (ie *inside) pluginAdjust(ctx context.Context, t *testing.T) {
	src := filepath.Join(itestDir, "nri-mounted")
	if err := os.WriteFile(src, []byte("from-a-plugin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &fakePlugins{createFn: func(c *Info, s *specs.Spec) (*runtimeapi.LinuxContainerResources, error) {
		s.Process.Env = append(s.Process.Env, "NRI_TEST=adjusted")
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc/nri-test", Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
		major, minor := int64(1), int64(3)
		s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: "/dev/nri-null", Type: "c", Major: 1, Minor: 3})
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rw"})
		r := proto.Clone(c.Resources).(*runtimeapi.LinuxContainerResources)
		r.MemoryLimitInBytes = 40 << 20
		return r, nil
	}}
	deps := ie.deps
	deps.Plugins = p
	m, err := New(ie.opts, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	id := ie.run(ctx, t, m, shConfig("nri", "sleep 1000"))
	for _, c := range []struct{ cmd, want string }{
		{`echo $NRI_TEST`, "adjusted\n"},
		{`cat /etc/nri-test`, "from-a-plugin\n"},
		{`echo x >/dev/nri-null && echo written`, "written\n"},
	} {
		out, stderr, code, err := m.ExecSync(ctx, id, []string{"sh", "-c", c.cmd}, 10)
		if err != nil || code != 0 || string(out) != c.want {
			t.Errorf("exec %q: %q (stderr %q, code %d, %v), want %q", c.cmd, out, stderr, code, err, c.want)
		}
	}
	memFile := [2]string{"memory", "memory.limit_in_bytes"}
	if ie.opts.Caps.CgroupV2 {
		memFile = [2]string{"", "memory.max"}
	}
	if got := cgroupFile(memFile[0], unitName(id), memFile[1]); got != "41943040" {
		t.Errorf("unit %s = %s, want the plugin's limit", memFile[1], got)
	}
	if err := m.Stop(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	want := "create created, postcreate created, start created, poststart running, stop exited, remove exited"
	if got := p.got(); got != want {
		t.Errorf("hooks:\n got %s\nwant %s", got, want)
	}
	ie.assertNoLeaks(ctx, t)
}
