// Package nri serves the runtime side of the Node Resource Interface
// (github.com/containerd/nri) through its adaptation package, as
// containerd and CRI-O do: plugins connect to a socket (or are started from
// a directory), are synchronized with the node's pods and containers, see
// their lifecycle events and may adjust a container at create, change its
// resources and evict it. The sandbox and container managers call it
// through their Plugins interfaces; it calls them back through Pods and
// Containers. docs/nri.md says what podunit applies.
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	api "github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/sandbox"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pods is the pod manager (sandbox.Manager).
type Pods interface {
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	List(ctx context.Context) []*sandbox.Sandbox
}

// Containers is the container manager (container.Manager).
type Containers interface {
	Infos(ctx context.Context) []*container.Info
	// ApplyResources changes a container's limits without asking the
	// plugins again (they asked for it).
	ApplyResources(ctx context.Context, id string, res *runtimeapi.LinuxContainerResources) error
	Info(ctx context.Context, id string) (*container.Info, error)
	Stop(ctx context.Context, id string, timeout int64) error
}

// Options configure the runtime side.
type Options struct {
	SocketPath         string
	DisableConnections bool
	PluginPath         string
	PluginConfigPath   string
	// RegistrationTimeout and RequestTimeout bound a plugin's
	// registration and each of its answers (process-wide in the NRI
	// library).
	RegistrationTimeout, RequestTimeout time.Duration
	// Version is podunit's, told to plugins.
	Version string
	Logger  *slog.Logger
}

// Runtime is podunit's NRI runtime side.
type Runtime struct {
	opts Options
	log  *slog.Logger
	nri  *adaptation.Adaptation
	pods Pods
	ctrs Containers
	cdi  *oci.CDIRegistry
	// started: no plugin can be connected before Start, and the
	// managers' recovery (exits seen while podunit was down) runs
	// before it: their events go to nobody.
	started atomic.Bool
}

var (
	_ container.Plugins = (*Runtime)(nil)
	_ sandbox.Plugins   = (*Runtime)(nil)
)

var setGlobals sync.Once

// New prepares the runtime side; Start serves plugins once Attach has
// given it the managers.
func New(opts Options) (*Runtime, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SocketPath == "" || opts.RegistrationTimeout <= 0 || opts.RequestTimeout <= 0 {
		return nil, fmt.Errorf("nri: socket path and timeouts are required: %w", errdefs.ErrInvalid)
	}
	r := &Runtime{opts: opts, log: opts.Logger}
	// The NRI library keeps its logger and timeouts in globals, read by
	// its goroutines without locks: set once per process (podunit has
	// one Runtime).
	setGlobals.Do(func() {
		nrilog.Set(logger{opts.Logger})
		adaptation.SetPluginRegistrationTimeout(opts.RegistrationTimeout)
		adaptation.SetPluginRequestTimeout(opts.RequestTimeout)
	})
	aopts := []adaptation.Option{
		adaptation.WithPluginPath(opts.PluginPath),
		adaptation.WithPluginConfigPath(opts.PluginConfigPath),
		adaptation.WithSocketPath(opts.SocketPath),
	}
	if opts.DisableConnections {
		aopts = append(aopts, adaptation.WithDisabledExternalConnections())
	}
	a, err := adaptation.New("podunit", opts.Version, r.synchronize, r.updateContainers, aopts...)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	r.nri = a
	return r, nil
}

// Deps are what the runtime calls back; they exist only after the
// managers, which call the runtime, were made.
type Deps struct {
	Pods       Pods
	Containers Containers
	// CDI resolves the CDI devices plugins add; nil when CDI is disabled.
	CDI *oci.CDIRegistry
}

// Attach gives the runtime what it calls back.
func (r *Runtime) Attach(d Deps) {
	r.pods, r.ctrs, r.cdi = d.Pods, d.Containers, d.CDI
}

// Start starts the plugins in PluginPath and listens for others.
func (r *Runtime) Start() error {
	if r.pods == nil || r.ctrs == nil {
		return fmt.Errorf("nri: start before attach: %w", errdefs.ErrPrecondition)
	}
	if !r.opts.DisableConnections {
		if err := os.MkdirAll(filepath.Dir(r.opts.SocketPath), 0o700); err != nil {
			return fmt.Errorf("nri socket directory: %w", err)
		}
		// A socket left by an earlier podunit would make listen fail.
		if err := os.Remove(r.opts.SocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("nri socket: %w", err)
		}
	}
	if err := r.nri.Start(); err != nil {
		return fmt.Errorf("nri: %w", err)
	}
	r.started.Store(true)
	r.log.Info("NRI serving", "socket", r.opts.SocketPath, "plugins", r.opts.PluginPath, "connections", !r.opts.DisableConnections)
	return nil
}

// Stop disconnects the plugins and stops listening.
func (r *Runtime) Stop() { r.nri.Stop() }

// synchronize hands a newly registered plugin the node's pods and
// containers; the updates it answers with are applied before it sees
// any event.
func (r *Runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	var pods []*api.PodSandbox
	for _, sb := range r.pods.List(ctx) {
		pods = append(pods, podSandbox(sb))
	}
	var ctrs []*api.Container
	for _, c := range r.ctrs.Infos(ctx) {
		ctrs = append(ctrs, nriContainer(c, nil))
	}
	updates, err := cb(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	// Failures the plugin marked IgnoreFailure are only logged.
	if failed, err := r.updateContainers(ctx, updates); err != nil {
		return fmt.Errorf("nri: synchronization updates of %d containers failed: %w", len(failed), err)
	}
	return nil
}

// updateContainers applies updates plugins asked for and returns those
// that failed (with IgnoreFailure unset, the first failure is an error).
func (r *Runtime) updateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	var errs []error
	for _, u := range updates {
		if u == nil {
			continue
		}
		if err := r.applyUpdate(ctx, u); err != nil {
			failed = append(failed, u)
			if !u.GetIgnoreFailure() {
				errs = append(errs, err)
			}
			r.log.Warn("NRI container update failed", "container", u.GetContainerId(), "err", err)
		}
	}
	return failed, errors.Join(errs...)
}

func (r *Runtime) applyUpdate(ctx context.Context, u *api.ContainerUpdate) error {
	c, err := r.ctrs.Info(ctx, u.GetContainerId())
	if err != nil {
		return err
	}
	res, err := overlayResources(c.Resources, u.GetLinux().GetResources())
	if err != nil {
		return fmt.Errorf("container %s: %w", c.ID, err)
	}
	return r.ctrs.ApplyResources(ctx, c.ID, res)
}

// background applies updates and evictions for containers other than
// self (whose lock the caller holds) off the caller's goroutine: another
// container's operation may wait on that lock.
func (r *Runtime) background(ctx context.Context, self string, updates []*api.ContainerUpdate, evict []*api.ContainerEviction) {
	var others []*api.ContainerUpdate
	for _, u := range updates {
		// (the adaptation answers an UpdateContainer with a nil entry
		// when no plugin changed the container being updated)
		if u != nil && u.GetContainerId() != self {
			others = append(others, u)
		}
	}
	if len(others) == 0 && len(evict) == 0 {
		return
	}
	go func() {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = r.updateContainers(bctx, others)
		r.evict(bctx, evict)
	}()
}

// evict stops the containers plugins want gone; the kubelet sees them
// exit and acts on its restart policy.
func (r *Runtime) evict(ctx context.Context, evict []*api.ContainerEviction) {
	for _, e := range evict {
		r.log.Warn("NRI plugin evicts container", "container", e.GetContainerId(), "reason", e.GetReason())
		if err := r.ctrs.Stop(ctx, e.GetContainerId(), 0); err != nil {
			r.log.Warn("NRI eviction failed", "container", e.GetContainerId(), "err", err)
		}
	}
}

// pod looks up a container's pod for its events, whatever its state.
func (r *Runtime) pod(ctx context.Context, id string) (*api.PodSandbox, error) {
	if r.pods == nil {
		return nil, fmt.Errorf("nri: not attached: %w", errdefs.ErrUnavailable)
	}
	sb, err := r.pods.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("nri: pod %s: %w", id, err)
	}
	return podSandbox(sb), nil
}

// BlockSync implements container.Plugins and sandbox.Plugins.
func (r *Runtime) BlockSync() func() {
	b := r.nri.BlockPluginSync()
	return b.Unblock
}

// RunPodSandbox implements sandbox.Plugins.
func (r *Runtime) RunPodSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := r.nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: podSandbox(sb)}); err != nil {
		return fmt.Errorf("NRI RunPodSandbox: %w", err)
	}
	return nil
}

// StopPodSandbox implements sandbox.Plugins.
func (r *Runtime) StopPodSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := r.nri.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: podSandbox(sb)}); err != nil {
		return fmt.Errorf("NRI StopPodSandbox: %w", err)
	}
	return nil
}

// RemovePodSandbox implements sandbox.Plugins.
func (r *Runtime) RemovePodSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := r.nri.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: podSandbox(sb)}); err != nil {
		return fmt.Errorf("NRI RemovePodSandbox: %w", err)
	}
	return nil
}

// CreateContainer implements container.Plugins: the plugins' combined
// adjustment goes into spec, and the resources it sets come back.
func (r *Runtime) CreateContainer(ctx context.Context, c *container.Info, spec *specs.Spec) (*runtimeapi.LinuxContainerResources, error) {
	pod, err := r.pod(ctx, c.PodID)
	if err != nil {
		return nil, err
	}
	resp, err := r.nri.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: nriContainer(c, spec)})
	if err != nil {
		return nil, fmt.Errorf("NRI CreateContainer: %w", err)
	}
	var cdi oci.CDIInjector
	if r.cdi != nil {
		if len(resp.GetAdjust().GetCDIDevices()) > 0 {
			if err := r.cdi.Refresh(); err != nil {
				r.log.Warn("CDI spec files with errors: their devices are unknown", "container", c.ID, "err", err)
			}
		}
		cdi = r.cdi
	}
	res, err := applyAdjustment(adjustRequest{spec: spec, res: c.Resources, adj: resp.GetAdjust(), cdi: cdi})
	if err != nil {
		return nil, fmt.Errorf("NRI adjustment of container %q: %w", c.Name, err)
	}
	r.background(ctx, c.ID, resp.GetUpdate(), resp.Evict)
	return res, nil
}

// PostCreateContainer implements container.Plugins.
func (r *Runtime) PostCreateContainer(ctx context.Context, c *container.Info) {
	r.inform(ctx, c, "PostCreateContainer", func(pod *api.PodSandbox, ctr *api.Container) error {
		return r.nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr})
	})
}

// StartContainer implements container.Plugins.
func (r *Runtime) StartContainer(ctx context.Context, c *container.Info) error {
	pod, err := r.pod(ctx, c.PodID)
	if err != nil {
		return err
	}
	if err := r.nri.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: nriContainer(c, nil)}); err != nil {
		return fmt.Errorf("NRI StartContainer: %w", err)
	}
	return nil
}

// PostStartContainer implements container.Plugins.
func (r *Runtime) PostStartContainer(ctx context.Context, c *container.Info) {
	r.inform(ctx, c, "PostStartContainer", func(pod *api.PodSandbox, ctr *api.Container) error {
		return r.nri.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr})
	})
}

// UpdateContainer implements container.Plugins: the plugins see the
// requested resources and may change them (and other containers').
func (r *Runtime) UpdateContainer(ctx context.Context, c *container.Info, res *runtimeapi.LinuxContainerResources) (*runtimeapi.LinuxContainerResources, error) {
	pod, err := r.pod(ctx, c.PodID)
	if err != nil {
		return nil, err
	}
	resp, err := r.nri.UpdateContainer(ctx, &api.UpdateContainerRequest{
		Pod: pod, Container: nriContainer(c, nil), LinuxResources: criToNRI(res),
	})
	if err != nil {
		return nil, fmt.Errorf("NRI UpdateContainer: %w", err)
	}
	out := res
	for _, u := range resp.GetUpdate() {
		if u.GetContainerId() != c.ID {
			continue
		}
		if out, err = overlayResources(res, u.GetLinux().GetResources()); err != nil {
			return nil, fmt.Errorf("NRI update of container %q: %w", c.Name, err)
		}
	}
	r.background(ctx, c.ID, resp.GetUpdate(), resp.GetEvict())
	return out, nil
}

// PostUpdateContainer implements container.Plugins.
func (r *Runtime) PostUpdateContainer(ctx context.Context, c *container.Info) {
	r.inform(ctx, c, "PostUpdateContainer", func(pod *api.PodSandbox, ctr *api.Container) error {
		return r.nri.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr})
	})
}

// StopContainer implements container.Plugins; it is called once per
// exit, whoever caused it.
func (r *Runtime) StopContainer(ctx context.Context, c *container.Info) {
	r.inform(ctx, c, "StopContainer", func(pod *api.PodSandbox, ctr *api.Container) error {
		resp, err := r.nri.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
		if err == nil {
			r.background(ctx, c.ID, resp.GetUpdate(), nil)
		}
		return err
	})
}

// RemoveContainer implements container.Plugins.
func (r *Runtime) RemoveContainer(ctx context.Context, c *container.Info) {
	r.inform(ctx, c, "RemoveContainer", func(pod *api.PodSandbox, ctr *api.Container) error {
		return r.nri.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr})
	})
}

// inform delivers an event whose failure cannot undo what happened: it
// is logged.
func (r *Runtime) inform(ctx context.Context, c *container.Info, event string, call func(*api.PodSandbox, *api.Container) error) {
	if !r.started.Load() {
		return
	}
	pod, err := r.pod(ctx, c.PodID)
	if err == nil {
		err = call(pod, nriContainer(c, nil))
	}
	if err != nil {
		r.log.Warn("NRI event failed", "event", event, "container", c.ID, "err", err)
	}
}

// logger sends the NRI library's log to slog.
type logger struct{ l *slog.Logger }

func (g logger) Debugf(ctx context.Context, f string, a ...any) {
	g.l.DebugContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}

func (g logger) Infof(ctx context.Context, f string, a ...any) {
	g.l.InfoContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}

func (g logger) Warnf(ctx context.Context, f string, a ...any) {
	g.l.WarnContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}

func (g logger) Errorf(ctx context.Context, f string, a ...any) {
	g.l.ErrorContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}
