package container

import (
	"context"
	"fmt"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Plugins are the node's NRI plugins (package nri): they see containers
// come and go and may adjust one while it is created. Deps.Plugins nil
// means none. A failing Create/Start/Update hook fails the CRI call; the
// others only inform.
type Plugins interface {
	// BlockSync holds off registering a new plugin until unblock is
	// called: a container is then either in the plugin's initial
	// synchronization or reaches it as a CreateContainer event.
	BlockSync() (unblock func())
	// CreateContainer lets the plugins adjust spec in place; it returns
	// the container's resources after their adjustment.
	CreateContainer(ctx context.Context, c *Info, spec *specs.Spec) (*runtimeapi.LinuxContainerResources, error)
	PostCreateContainer(ctx context.Context, c *Info)
	StartContainer(ctx context.Context, c *Info) error
	PostStartContainer(ctx context.Context, c *Info)
	// UpdateContainer returns the resources to apply (the plugins may
	// change the request).
	UpdateContainer(ctx context.Context, c *Info, res *runtimeapi.LinuxContainerResources) (*runtimeapi.LinuxContainerResources, error)
	PostUpdateContainer(ctx context.Context, c *Info)
	StopContainer(ctx context.Context, c *Info)
	RemoveContainer(ctx context.Context, c *Info)
}

// Info is a container as plugins see it.
type Info struct {
	ID, PodID, Name string
	State           State
	Config          *runtimeapi.ContainerConfig
	Resources       *runtimeapi.LinuxContainerResources
	CgroupsPath     string
	Pid             uint32
	CreatedAt       int64
	StartedAt       int64
	FinishedAt      int64
	ExitCode        int32
	Reason, Message string
}

func (r *record) info(pid int) *Info {
	return &Info{
		ID: r.ID, PodID: r.PodID, Name: r.Metadata.GetName(), State: r.State,
		Config: r.Config, Resources: r.Resources,
		CgroupsPath: systemd.UnitCgroupPath(r.Slice, r.Unit) + "/container",
		Pid:         uint32(pid), CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		ExitCode: r.ExitCode, Reason: r.Reason, Message: r.Message,
	}
}

// Infos are the current containers for a plugin's synchronization.
func (m *Manager) Infos(ctx context.Context) []*Info {
	recs := m.snapshot(ctx)
	out := make([]*Info, 0, len(recs))
	for _, r := range recs {
		pid := 0
		if c, err := m.get(r.ID); err == nil {
			c.mu.Lock()
			pid = c.init.pid
			c.mu.Unlock()
		}
		out = append(out, r.info(pid))
	}
	return out
}

// pluginCtx bounds an informing hook run on behalf of an operation whose
// own context may be short or spent (an exit seen by a status read).
func pluginCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// adjustRequest is a container being created, as its plugins adjust it.
type adjustRequest struct {
	id, podID string
	cfg       *runtimeapi.ContainerConfig
	spec      *specs.Spec
	rt        oci.Runtime
}

// adjustByPlugins lets the plugins adjust a new container: its spec in
// place, and its resources in cfg (the unit's limits and ContainerStatus
// come from there) and in the spec's limits.
func (m *Manager) adjustByPlugins(ctx context.Context, r adjustRequest) (*Info, error) {
	name := r.cfg.GetMetadata().GetName()
	info := &Info{
		ID: r.id, PodID: r.podID, Name: name, State: StateCreated,
		Config: r.cfg, Resources: r.cfg.GetLinux().GetResources(), CreatedAt: time.Now().UnixNano(),
	}
	if r.spec.Linux != nil {
		info.CgroupsPath = r.spec.Linux.CgroupsPath
	}
	res, err := m.plugins.CreateContainer(ctx, info, r.spec)
	if err != nil {
		return nil, fmt.Errorf("create container %q: %w", name, err)
	}
	if info.Resources == nil && proto.Equal(res, &runtimeapi.LinuxContainerResources{}) {
		return info, nil
	}
	if err := m.checkUnified(r.rt, res.GetUnified()); err != nil {
		return nil, fmt.Errorf("create container %q: NRI adjustment: %w", name, err)
	}
	lr, err := oci.LinuxResources(res)
	if err != nil {
		return nil, fmt.Errorf("create container %q: NRI adjustment: %w", name, err)
	}
	oci.SetLimits(r.spec, lr)
	if r.cfg.Linux == nil {
		r.cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	r.cfg.Linux.Resources = res
	info.Resources = res
	return info, nil
}

// pluginsStopped tells the plugins a container exited; every
// running → exited transition calls it once, as it publishes STOPPED.
func (m *Manager) pluginsStopped(ctx context.Context, r *record) {
	if m.plugins == nil {
		return
	}
	pctx, cancel := pluginCtx(ctx)
	defer cancel()
	m.plugins.StopContainer(pctx, r.info(0))
}

// Info is one container as plugins see it.
func (m *Manager) Info(ctx context.Context, id string) (*Info, error) {
	c, err := m.get(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec == nil {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return c.rec.info(c.init.pid), nil
}

// ApplyResources changes a container's limits as a plugin asked, without
// asking the plugins again.
func (m *Manager) ApplyResources(ctx context.Context, id string, res *runtimeapi.LinuxContainerResources) error {
	return m.updateResources(ctx, id, res, false)
}
