package container

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/statefile"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakePlugins records the hooks called and adjusts as told.
type fakePlugins struct {
	mu       sync.Mutex
	events   []string
	blocked  int
	createFn func(c *Info, s *specs.Spec) (*runtimeapi.LinuxContainerResources, error)
	updateFn func(c *Info, r *runtimeapi.LinuxContainerResources) (*runtimeapi.LinuxContainerResources, error)
	startErr error
}

func (f *fakePlugins) add(ev string, c *Info) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev+" "+string(c.State))
}

func (f *fakePlugins) got() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.events, ", ")
}

func (f *fakePlugins) BlockSync() func() {
	f.mu.Lock()
	f.blocked++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.blocked--
		f.mu.Unlock()
	}
}

func (f *fakePlugins) CreateContainer(_ context.Context, c *Info, s *specs.Spec) (*runtimeapi.LinuxContainerResources, error) {
	f.add("create", c)
	f.mu.Lock()
	blocked := f.blocked
	f.mu.Unlock()
	if blocked != 1 {
		return nil, fmt.Errorf("create hook called with %d sync blocks held, want 1", blocked)
	}
	if f.createFn != nil {
		return f.createFn(c, s)
	}
	return c.Resources, nil
}

func (f *fakePlugins) PostCreateContainer(_ context.Context, c *Info) { f.add("postcreate", c) }

func (f *fakePlugins) StartContainer(_ context.Context, c *Info) error {
	f.add("start", c)
	return f.startErr
}

func (f *fakePlugins) PostStartContainer(_ context.Context, c *Info) { f.add("poststart", c) }

func (f *fakePlugins) UpdateContainer(_ context.Context, c *Info, r *runtimeapi.LinuxContainerResources) (*runtimeapi.LinuxContainerResources, error) {
	f.add("update", c)
	if f.updateFn != nil {
		return f.updateFn(c, r)
	}
	return r, nil
}

func (f *fakePlugins) PostUpdateContainer(_ context.Context, c *Info) { f.add("postupdate", c) }
func (f *fakePlugins) StopContainer(_ context.Context, c *Info)       { f.add("stop", c) }
func (f *fakePlugins) RemoveContainer(_ context.Context, c *Info)     { f.add("remove", c) }

func newPluginEnv(t *testing.T) (*env, *fakePlugins) {
	e := newEnv(t)
	p := &fakePlugins{}
	e.deps.Plugins = p
	e.m = e.newManager()
	return e, p
}

func bundleSpec(t *testing.T, e *env, id string) *specs.Spec {
	t.Helper()
	var s specs.Spec
	if err := statefile.Read(filepath.Join(e.opts.RunDir, id, "bundle", "config.json"), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// Plugins see every lifecycle step once, in order, and an exit the
// container made on its own is a stop like any other.
func TestPluginsLifecycle(t *testing.T) {
	e, p := newPluginEnv(t)
	ctx := context.Background()
	id := e.create("pod1", "app")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuShares: 256}); err != nil {
		t.Fatal(err)
	}
	e.exit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1"})
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("state %v", st.State)
	}
	e.status(id) // a second look must not tell the plugins again
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	want := "create created, postcreate created, start created, poststart running, update running, postupdate running, stop exited, remove exited"
	if got := p.got(); got != want {
		t.Errorf("hooks:\n got %s\nwant %s", got, want)
	}
	if p.blocked != 0 {
		t.Errorf("%d sync blocks left held", p.blocked)
	}
}

// An adjustment reaches the bundle, the record's resources (ContainerStatus)
// and the unit's properties.
func TestPluginsAdjustCreate(t *testing.T) {
	e, p := newPluginEnv(t)
	p.createFn = func(c *Info, s *specs.Spec) (*runtimeapi.LinuxContainerResources, error) {
		s.Process.Env = append(s.Process.Env, "INJECTED=1")
		r := proto.Clone(c.Resources).(*runtimeapi.LinuxContainerResources)
		r.MemoryLimitInBytes, r.CpusetCpus = 128<<20, "0"
		return r, nil
	}
	id := e.create("pod1", "app")
	s := bundleSpec(t, e, id)
	if !strings.Contains(strings.Join(s.Process.Env, " "), "INJECTED=1") {
		t.Errorf("env %q", s.Process.Env)
	}
	if l := s.Linux.Resources.Memory.Limit; l == nil || *l != 128<<20 || s.Linux.Resources.CPU.Cpus != "0" {
		t.Errorf("spec limits %+v %+v", s.Linux.Resources.Memory, s.Linux.Resources.CPU)
	}
	if st := e.status(id); st.Resources.GetLinux().GetMemoryLimitInBytes() != 128<<20 || st.Resources.GetLinux().GetCpuShares() != 512 {
		t.Errorf("status resources %v", st.Resources)
	}
	if err := e.m.Start(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if got := e.sd.Units[unitName(id)].Props["MemoryMax"]; got != uint64(128<<20) {
		t.Errorf("unit MemoryMax %v", got)
	}
}

// A plugin's refusal fails the create and leaves nothing behind, and the
// plugins hear of no container; a failing start hook keeps it created.
func TestPluginsRefuse(t *testing.T) {
	e, p := newPluginEnv(t)
	p.createFn = func(*Info, *specs.Spec) (*runtimeapi.LinuxContainerResources, error) {
		return nil, fmt.Errorf("NRI adjustment: scheduler: %w", errdefs.ErrPrecondition)
	}
	_, err := e.m.Create(context.Background(), "pod1", containerConfig("app"), sandboxConfig("pod1"))
	if !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), "scheduler") {
		t.Fatalf("create: %v", err)
	}
	if l, _ := e.m.List(context.Background(), nil); len(l) != 0 {
		t.Errorf("listed after failed create: %v", l)
	}
	if ents := entries(e.opts.StateDir); len(ents) != 0 {
		t.Errorf("state left: %v", ents)
	}
	// the name is free again
	p.createFn = nil
	p.startErr = errors.New("no cpus left")
	id := e.create("pod1", "app")
	if err := e.m.Start(context.Background(), id); err == nil || !strings.Contains(err.Error(), "no cpus left") {
		t.Fatalf("start: %v", err)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("state after refused start %v", st.State)
	}
	if _, ok := e.sd.Units[unitName(id)]; ok {
		t.Error("unit started despite the refusal")
	}
}

// Updates the plugins change are applied as changed; those they asked for
// (ApplyResources) do not go back to them.
func TestPluginsUpdate(t *testing.T) {
	e, p := newPluginEnv(t)
	p.updateFn = func(_ *Info, r *runtimeapi.LinuxContainerResources) (*runtimeapi.LinuxContainerResources, error) {
		r = proto.Clone(r).(*runtimeapi.LinuxContainerResources)
		r.CpusetCpus = "1"
		return r, nil
	}
	ctx := context.Background()
	id := e.create("pod1", "app")
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if r := e.status(id).Resources.GetLinux(); r.GetCpusetCpus() != "1" || r.GetMemoryLimitInBytes() != 32<<20 {
		t.Errorf("resources %v", r)
	}
	before := p.got()
	if err := e.m.ApplyResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuQuota: 50000, CpuPeriod: 100000}); err != nil {
		t.Fatal(err)
	}
	if p.got() != before {
		t.Errorf("plugins asked about their own update: %s", p.got())
	}
	if r := e.status(id).Resources.GetLinux(); r.GetCpuQuota() != 50000 {
		t.Errorf("resources %v", r)
	}
	infos := e.m.Infos(ctx)
	if len(infos) != 1 || infos[0].ID != id || infos[0].Name != "app" || infos[0].State != StateCreated {
		t.Errorf("infos %+v", infos)
	}
}
