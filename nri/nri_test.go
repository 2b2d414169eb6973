package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/sandbox"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakePods struct{ pods map[string]*sandbox.Sandbox }

func (f *fakePods) Get(_ context.Context, id string) (*sandbox.Sandbox, error) {
	if sb, ok := f.pods[id]; ok {
		return sb, nil
	}
	return nil, fmt.Errorf("pod %s: %w", id, errdefs.ErrNotFound)
}

func (f *fakePods) List(context.Context) []*sandbox.Sandbox {
	var out []*sandbox.Sandbox
	for _, sb := range f.pods {
		out = append(out, sb)
	}
	return out
}

type fakeContainers struct {
	mu      sync.Mutex
	ctrs    map[string]*container.Info
	applied map[string]*runtimeapi.LinuxContainerResources
	stopped []string
}

func (f *fakeContainers) Infos(context.Context) []*container.Info {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*container.Info
	for _, c := range f.ctrs {
		out = append(out, c)
	}
	return out
}

func (f *fakeContainers) Info(_ context.Context, id string) (*container.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.ctrs[id]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
}

func (f *fakeContainers) ApplyResources(_ context.Context, id string, res *runtimeapi.LinuxContainerResources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied[id] = res
	return nil
}

func (f *fakeContainers) Stop(_ context.Context, id string, _ int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, id)
	return nil
}

func (f *fakeContainers) appliedTo(id string) *runtimeapi.LinuxContainerResources {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied[id]
}

// plugin is a test NRI plugin.
type plugin struct {
	mu       sync.Mutex
	synced   []string
	events   []string
	runErr   error
	adjust   *api.ContainerAdjustment
	updates  []*api.ContainerUpdate
	ready    chan struct{}
	syncOnce sync.Once
	noUpdate bool
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	for _, x := range pods {
		p.synced = append(p.synced, "pod "+x.GetId()+" "+x.GetName())
	}
	for _, x := range ctrs {
		p.synced = append(p.synced, "container "+x.GetId()+" "+x.GetName()+" "+x.GetState().String())
	}
	p.mu.Unlock()
	p.syncOnce.Do(func() { close(p.ready) })
	return nil, nil
}

func (p *plugin) event(e string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.event("run " + pod.GetId() + " " + pod.GetNamespace() + "/" + pod.GetName())
	if pod.GetId() == "probe" {
		return nil
	}
	return p.runErr
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.event("create " + c.GetName() + " in " + pod.GetId() + " args " + strings.Join(c.GetArgs(), " "))
	return p.adjust, p.updates, nil
}

func (p *plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, r *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	none := p.noUpdate
	p.mu.Unlock()
	if none {
		return nil, nil
	}
	p.event(fmt.Sprintf("update %s cpus %q", c.GetName(), r.GetCpu().GetCpus()))
	u := &api.ContainerUpdate{}
	u.SetContainerId(c.GetId())
	u.SetLinuxCPUSetCPUs("3")
	return []*api.ContainerUpdate{u}, nil
}

func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.event("stop " + c.GetName() + " " + c.GetState().String())
	return nil, nil
}

func (p *plugin) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

type rig struct {
	rt   *Runtime
	pods *fakePods
	ctrs *fakeContainers
	sock string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{
		pods: &fakePods{pods: map[string]*sandbox.Sandbox{"pod1": {
			ID: "pod1", CgroupParent: "/kubepods.slice/pod1.slice", IPs: []string{"10.0.0.2"},
			Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"}},
		}}},
		ctrs: &fakeContainers{applied: map[string]*runtimeapi.LinuxContainerResources{}, ctrs: map[string]*container.Info{
			"c1": {ID: "c1", PodID: "pod1", Name: "old", State: container.StateRunning, Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2}},
		}},
		sock: filepath.Join(dir, "nri.sock"),
	}
	rt, err := New(Options{
		SocketPath: r.sock, PluginPath: filepath.Join(dir, "plugins"), PluginConfigPath: filepath.Join(dir, "conf.d"),
		RegistrationTimeout: 5 * time.Second, RequestTimeout: 2 * time.Second, Version: "test", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	rt.Attach(Deps{Pods: r.pods, Containers: r.ctrs})
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	r.rt = rt
	return r
}

func (r *rig) connect(t *testing.T, p *plugin) stub.Stub {
	t.Helper()
	p.ready = make(chan struct{})
	s, err := stub.New(p, stub.WithSocketPath(r.sock), stub.WithPluginName("test"), stub.WithPluginIdx("10"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); s.Stop() })
	select {
	case <-p.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("plugin not synchronized")
	}
	// The plugin is registered only once its Synchronize answer is in:
	// wait until it sees events.
	probe := &sandbox.Sandbox{ID: "probe", Config: &runtimeapi.PodSandboxConfig{}}
	eventually(t, "plugin registration", func() bool {
		_ = r.rt.RunPodSandbox(context.Background(), probe)
		return slices.ContainsFunc(p.got(), func(e string) bool { return strings.HasPrefix(e, "run probe") })
	})
	p.mu.Lock()
	p.events = nil
	p.mu.Unlock()
	return s
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A plugin is synchronized with the node, sees events with the pod's
// identity, and its adjustment lands in the spec and the resources.
func TestPluginRoundTrip(t *testing.T) {
	r := newRig(t)
	p := &plugin{}
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("FROM_PLUGIN", "1")
	adj.SetLinuxMemoryLimit(128 << 20)
	p.adjust = adj
	other := &api.ContainerUpdate{}
	other.SetContainerId("c1")
	other.SetLinuxCPUShares(100)
	p.updates = []*api.ContainerUpdate{other}
	s := r.connect(t, p)
	if got, want := strings.Join(p.synced, "; "), "pod pod1 web; container c1 old CONTAINER_RUNNING"; got != want {
		t.Errorf("sync %q, want %q", got, want)
	}

	ctx := context.Background()
	if err := r.rt.RunPodSandbox(ctx, r.pods.pods["pod1"]); err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"/app"}, Env: []string{"PATH=/bin"}}, Linux: &specs.Linux{}}
	info := &container.Info{ID: "c2", PodID: "pod1", Name: "app", State: container.StateCreated,
		Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512}}
	res, err := r.rt.CreateContainer(ctx, info, spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetMemoryLimitInBytes() != 128<<20 || res.GetCpuShares() != 512 {
		t.Errorf("resources %v", res)
	}
	if !slices.Contains(spec.Process.Env, "FROM_PLUGIN=1") {
		t.Errorf("env %q", spec.Process.Env)
	}
	eventually(t, "update of c1", func() bool { return r.ctrs.appliedTo("c1").GetCpuShares() == 100 })

	r.ctrs.ctrs["c2"] = info
	got, err := r.rt.UpdateContainer(ctx, info, &runtimeapi.LinuxContainerResources{CpusetCpus: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetCpusetCpus() != "3" {
		t.Errorf("update: plugin's cpuset not applied: %v", got)
	}
	p.mu.Lock()
	p.noUpdate = true
	p.mu.Unlock()
	r.ctrs.mu.Lock()
	r.ctrs.applied = map[string]*runtimeapi.LinuxContainerResources{}
	r.ctrs.mu.Unlock()
	if got, err := r.rt.UpdateContainer(ctx, info, &runtimeapi.LinuxContainerResources{CpusetCpus: "2"}); err != nil || got.GetCpusetCpus() != "2" {
		t.Errorf("update nobody changed: %v, %v", got, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(r.ctrs.applied); n != 0 {
		t.Errorf("an unchanged update touched %d containers", n)
	}
	info.State = container.StateExited
	r.rt.StopContainer(ctx, info)
	want := []string{"run pod1 default/web", "create app in pod1 args /app", `update app cpus "1"`, "stop app CONTAINER_STOPPED"}
	if !slices.Equal(p.got(), want) {
		t.Errorf("events\n got %q\nwant %q", p.got(), want)
	}

	// unsolicited updates: applied, or reported failed
	u := &api.ContainerUpdate{}
	u.SetContainerId("c1")
	u.SetLinuxMemoryLimit(1 << 30)
	gone := &api.ContainerUpdate{}
	gone.SetContainerId("nope")
	gone.SetLinuxMemoryLimit(1 << 30)
	gone.SetIgnoreFailure()
	failed, err := s.UpdateContainers([]*api.ContainerUpdate{u, gone})
	if err != nil || len(failed) != 1 || failed[0].GetContainerId() != "nope" {
		t.Errorf("UpdateContainers: failed %v, err %v", failed, err)
	}
	if r.ctrs.appliedTo("c1").GetMemoryLimitInBytes() != 1<<30 {
		t.Errorf("c1 resources %v", r.ctrs.appliedTo("c1"))
	}
	bad := &api.ContainerUpdate{}
	bad.SetContainerId("c1")
	bad.SetLinuxPidLimits(5)
	if _, err := s.UpdateContainers([]*api.ContainerUpdate{bad}); err == nil || !strings.Contains(err.Error(), "pids limit") {
		t.Errorf("unsupported update: %v", err)
	}
}

// A plugin's error fails RunPodSandbox; an adjustment podunit cannot
// apply fails CreateContainer.
func TestPluginRefusals(t *testing.T) {
	r := newRig(t)
	p := &plugin{runErr: errors.New("no room")}
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxScheduler(&api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_FIFO, Priority: 1})
	p.adjust = adj
	r.connect(t, p)
	ctx := context.Background()
	if err := r.rt.RunPodSandbox(ctx, r.pods.pods["pod1"]); err == nil || !strings.Contains(err.Error(), "no room") {
		t.Errorf("run: %v", err)
	}
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"/app"}}, Linux: &specs.Linux{}}
	_, err := r.rt.CreateContainer(ctx, &container.Info{ID: "c2", PodID: "pod1", Name: "app"}, spec)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "scheduler") {
		t.Errorf("create: %v", err)
	}
	if _, err := r.rt.CreateContainer(ctx, &container.Info{ID: "c3", PodID: "gone", Name: "app"}, spec); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("create in unknown pod: %v", err)
	}
}

// Exits found while the managers recover, before Start, go to nobody.
func TestEventsBeforeStart(t *testing.T) {
	rt, err := New(Options{SocketPath: filepath.Join(t.TempDir(), "nri.sock"), RegistrationTimeout: time.Second, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rt.StopContainer(context.Background(), &container.Info{ID: "c1", PodID: "pod1"})
	if err := rt.Start(); err == nil {
		t.Error("Start before Attach succeeded")
	}
}
