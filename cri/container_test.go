package cri

import (
	"context"
	"errors"
	"fmt"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"os"
	"path/filepath"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/sandbox"
	"github.com/podunit/podunit/systemd/systemdtest"
	"github.com/podunit/podunit/unitprops"
	"go.podman.io/storage/pkg/archive"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Minimal collaborators for the container manager: the RPCs only translate,
// the manager's own tests cover its behaviour.
type ctrTestImages struct{ dir string }

func (i ctrTestImages) Resolve(ctx context.Context, ref string) (*imagestore.ImageInfo, error) {
	if ref != "busybox" {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return &imagestore.ImageInfo{ID: "1234"}, nil
}
func (i ctrTestImages) CreateContainerRootfs(ctx context.Context, id, ref, name string, _ *imagestore.IDMap) error {
	return os.MkdirAll(filepath.Join(i.dir, id), 0o755)
}
func (i ctrTestImages) MountRootfs(ctx context.Context, id string) (string, error) {
	return filepath.Join(i.dir, id), nil
}
func (i ctrTestImages) UnmountRootfs(ctx context.Context, id string) error { return nil }
func (i ctrTestImages) DeleteRootfs(ctx context.Context, id string) error {
	return os.RemoveAll(filepath.Join(i.dir, id))
}

func (i ctrTestImages) MountImageVolume(ctx context.Context, id, ref string) (string, error) {
	return "", errdefs.ErrUnimplemented
}
func (i ctrTestImages) RootfsChanges(ctx context.Context, id string) ([]archive.Change, error) {
	return nil, nil
}
func (i ctrTestImages) UnmountImageVolumes(ctx context.Context, id string) error { return nil }
func (i ctrTestImages) DeleteImageVolumes(ctx context.Context, id string) error  { return nil }

type ctrTestRuntime struct{}

func (ctrTestRuntime) Name() string                                { return "runc" }
func (ctrTestRuntime) CreateArgv(id, b, p, l, c string) []string   { return []string{"/bin/true"} }
func (ctrTestRuntime) StartArgv(id, l string) []string             { return []string{"/bin/true"} }
func (ctrTestRuntime) DeleteArgv(id string) []string               { return nil }
func (ctrTestRuntime) Delete(ctx context.Context, id string) error { return nil }
func (ctrTestRuntime) OwnCgroup() bool                             { return true }
func (ctrTestRuntime) CheckpointArgv(id string, ck oci.Checkpoint) []string {
	return []string{"/bin/true"}
}
func (ctrTestRuntime) RestoreArgv(id, b, p, l string, ck oci.Checkpoint) []string {
	return []string{"/bin/true"}
}
func (ctrTestRuntime) Checkpoint(ctx context.Context, id string, ck oci.Checkpoint) error {
	return errdefs.ErrUnimplemented
}
func (ctrTestRuntime) Pause(ctx context.Context, id string) error  { return nil }
func (ctrTestRuntime) Resume(ctx context.Context, id string) error { return nil }
func (ctrTestRuntime) Features(ctx context.Context) (oci.Features, error) {
	return oci.Features{Source: "test"}, nil
}

func (ctrTestRuntime) Update(ctx context.Context, id string, r *specs.LinuxResources) error {
	return nil
}
func (ctrTestRuntime) Exec(ctx context.Context, id string, p oci.ExecProcess) (int, error) {
	fmt.Fprint(p.Stdout, "out")
	fmt.Fprint(p.Stderr, "err")
	return 4, nil
}

// newManagers builds the real sandbox and container managers on fake
// systemd, network, images and runtime; nothing needs root until a pod
// runs. hub, if not nil, receives the container events.
func newManagers(t testing.TB, hub *events.Hub) (*sandbox.Manager, *container.Manager) {
	t.Helper()
	pods, ctrs, _ := newManagersSD(t, hub)
	return pods, ctrs
}

// newManagersSD also returns the pods' systemd.
func newManagersSD(t testing.TB, hub *events.Hub) (*sandbox.Manager, *container.Manager, *systemdtest.Fake) {
	t.Helper()
	dir := t.TempDir()
	podSD := systemdtest.New()
	if err := os.MkdirAll(filepath.Join(dir, "cgroup"), 0o755); err != nil {
		t.Fatal(err)
	}
	pods, err := sandbox.New(sandbox.Options{
		StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"),
		Network: podTestNet{}, Systemd: podSD, Handlers: []string{"runc"}, CgroupRoot: filepath.Join(dir, "cgroup"),
		ParentSlice: config.Default().Systemd.ParentSlice, OpTimeout: config.Default().Systemd.CallTimeout.D(),
	})
	if err != nil {
		t.Fatal(err)
	}
	deps := container.Deps{
		Systemd: systemdtest.New(), Images: ctrTestImages{dir: filepath.Join(dir, "rootfs")},
		Pods: container.SandboxPods(pods), Runtimes: map[string]oci.Runtime{"runc": ctrTestRuntime{}},
	}
	if hub != nil {
		deps.Events = hub
	}
	opts := container.Options{
		StateDir: filepath.Join(dir, "cstate"), RunDir: filepath.Join(dir, "crun"), Self: "/podunit",
		Caps: unitprops.Caps{SystemdVersion: 252}, CgroupRoot: "/sys/fs/cgroup",
	}
	if err := opts.SetRuntime(config.Default().Runtime); err != nil {
		t.Fatal(err)
	}
	ctrs, err := container.New(opts, deps)
	if err != nil {
		t.Fatal(err)
	}
	return pods, ctrs, podSD
}

func TestContainerRPCs(t *testing.T) {
	ctx := context.Background()
	s := podServer(t)
	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("ctr", nil), RuntimeHandler: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	pod := run.PodSandboxId
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sh"},
		Labels:   map[string]string{"a": "b"},
	}
	cr, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod[:12], Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.ContainerId
	if _, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod[:12], Config: cfg}); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("duplicate create: %v", err)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Status.ImageId != "1234" || st.Info["info"] == "" {
		t.Fatalf("status %v %v", st, err)
	}
	lr, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"a": "b"}}})
	if err != nil || len(lr.Containers) != 1 || lr.Containers[0].Id != id || lr.Containers[0].PodSandboxId != pod {
		t.Errorf("list %v %v", lr, err)
	}
	er, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"x"}, Timeout: 5})
	if err != nil || string(er.Stdout) != "out" || string(er.Stderr) != "err" || er.ExitCode != 4 {
		t.Errorf("exec %v %v", er, err)
	}
	if _, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 26}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  *runtimeapi.CheckpointContainerRequest
		want error
	}{
		{&runtimeapi.CheckpointContainerRequest{ContainerId: "nosuch", Location: "/tmp/x.tar"}, errdefs.ErrNotFound},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: "x.tar"}, errdefs.ErrInvalid},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: "/tmp/x.tar", Timeout: -1}, errdefs.ErrInvalid},
		// The test runtime probes no checkpoint support.
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(t.TempDir(), "x.tar")}, errdefs.ErrPrecondition},
	} {
		if _, err := s.CheckpointContainer(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("CheckpointContainer(%v): %v, want %v", tc.req, err, tc.want)
		}
	}
	st, _ = s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if st.Status.GetResources().GetLinux().GetMemoryLimitInBytes() != 1<<26 {
		t.Errorf("resources %v", st.Status.GetResources())
	}
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	if _, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("status after remove: %v", err)
	}
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Errorf("stop of a removed container: %v", err)
	}
	// StopPodSandbox/RemovePodSandbox take the containers first (podlife),
	// and a stopped pod takes no new ones.
	cr2, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr2.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cr2.ContainerId})
	if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("after StopPodSandbox: %v", st.GetStatus())
	}
	late := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "late"}, Image: cfg.Image, Command: cfg.Command}
	if _, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: late}); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Errorf("create in a stopped pod: %v", err)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if lr, _ := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); len(lr.GetContainers()) != 0 {
		t.Errorf("containers left after RemovePodSandbox: %v", lr.GetContainers())
	}
	bad := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "x"}, Image: &runtimeapi.ImageSpec{Image: "nope"}}
	if _, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("removed pod: %v", err)
	}
}
