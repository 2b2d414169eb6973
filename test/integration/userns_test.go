//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUserNamespacePod: a hostUsers: false pod on the crun handler runs its
// container in the pod's user namespace with the pod's mapping, sees its
// image's files owned by root and an idmapped volume owned by root, writes
// both with the mapped host IDs, and leaves nothing behind once removed.
// On the default handler (Debian's runc 1.1, no idmapped mounts) the same
// pod is refused.
func TestUserNamespacePod(t *testing.T) {
	e := StartEnv(t)
	ctx := harness.Context(t, 3*time.Minute)
	const hostID = 200000
	mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: hostID, Length: 65536}}

	vol := filepath.Join(e.H.StateDir, "userns", "vol")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "from-host"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pc := PodConfig("userns")
	pc.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		Pid:           runtimeapi.NamespaceMode_CONTAINER,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping},
	}}
	if _, err := e.P.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("user namespace pod on the default handler (runc 1.1): %v, want FailedPrecondition", err)
	}
	pr, err := e.P.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc, RuntimeHandler: "crun"})
	if err != nil {
		t.Fatal(err)
	}
	cc := ContainerConfig("userns")
	cc.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: pc.Linux.SecurityContext.NamespaceOptions,
	}}
	cc.Mounts = []*runtimeapi.Mount{{
		ContainerPath: "/vol", HostPath: harness.StateDirInside + "/userns/vol",
		UidMappings: mapping, GidMappings: mapping, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
	}}
	cr, err := e.P.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pr.PodSandboxId, Config: cc, SandboxConfig: pc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.P.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	execIn := func(cmd string) string {
		t.Helper()
		r, err := e.P.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cr.ContainerId, Cmd: []string{"sh", "-c", cmd}, Timeout: 20})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %q: %v %d %s%s", cmd, err, r.GetExitCode(), r.GetStdout(), r.GetStderr())
		}
		return strings.Join(strings.Fields(string(r.Stdout)), " ")
	}
	if got := execIn("cat /proc/self/uid_map /proc/self/gid_map"); got != "0 200000 65536 0 200000 65536" {
		t.Errorf("maps inside = %q", got)
	}
	// The image's root-owned files are root's inside (idmapped rootfs),
	// and root can write where the image lets root write.
	if got := execIn("stat -c %u:%g / /bin /etc/passwd; touch /etc/written; stat -c %u:%g /etc/written"); got != "0:0 0:0 0:0 0:0" {
		t.Errorf("rootfs owners inside = %q", got)
	}
	// The volume is idmapped too: the host's root-owned file is root's
	// inside, and what the container writes belongs to the mapped root.
	if got := execIn("stat -c %u:%g /vol/from-host; echo hi > /vol/from-ctr; stat -c %u:%g /vol/from-ctr"); got != "0:0 0:0" {
		t.Errorf("volume owners inside = %q", got)
	}
	st, err := os.Stat(filepath.Join(vol, "from-ctr"))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Sys().(*syscall.Stat_t); s.Uid != hostID || s.Gid != hostID {
		t.Errorf("the container's file is %d:%d on the host, want %d:%d", s.Uid, s.Gid, hostID, hostID)
	}
	e.CheckInvariants(ctx, "with a user namespace pod")
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Fatal(err)
	}
	s := e.CheckInvariants(ctx, "after removing the user namespace pod")
	if left := s.Empty(); len(left) > 0 {
		t.Fatalf("left after RemovePodSandbox: %v", left)
	}
}
