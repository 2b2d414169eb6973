// Package podlife runs the operations that span a pod and its containers,
// so that neither the sandbox nor the container manager calls the other:
// a pod's containers stop, and go, before the pod's init, network,
// namespaces and slice; and no container is created in a pod while the
// pod is being stopped or removed.
package podlife

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/sandbox"
)

// Sandboxes is the pod manager (sandbox.Manager).
type Sandboxes interface {
	Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error)
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	Stop(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	// Freeze and Thaw stop and resume every process of a pod at once
	// (its slice, through systemd's freezer).
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
}

// Containers is the container manager (container.Manager).
type Containers interface {
	Create(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
	StopPodContainers(ctx context.Context, podID string) error
	RemovePodContainers(ctx context.Context, podID string) error
	List(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	// Checkpoint writes one container's checkpoint archive to location.
	Checkpoint(ctx context.Context, id, location string, timeout time.Duration) error
	// Pause freezes a container's own cgroup; Resume thaws it.
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
}

// cleanupTimeout bounds the removal of a half-restored pod, which runs
// after the caller's deadline may have passed.
const cleanupTimeout = 30 * time.Second

// Pods orchestrates pod-wide operations. Every container create and every
// pod stop or remove must go through one Pods, or its guarantees do not
// hold.
type Pods struct {
	sandboxes  Sandboxes
	containers Containers
	log        *slog.Logger

	mu    sync.Mutex
	gates map[string]*gate
}

// gate orders a pod's container creates (shared) against its stop and
// remove (exclusive). It exists while someone holds or waits for it.
type gate struct {
	rw   sync.RWMutex
	refs int
}

// New returns a Pods over the two managers.
func New(s Sandboxes, c Containers, log *slog.Logger) *Pods {
	return &Pods{sandboxes: s, containers: c, log: log, gates: map[string]*gate{}}
}

func (p *Pods) acquire(podID string) *gate {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.gates[podID]
	if g == nil {
		g = &gate{}
		p.gates[podID] = g
	}
	g.refs++
	return g
}

func (p *Pods) release(podID string, g *gate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g.refs--; g.refs == 0 {
		delete(p.gates, podID)
	}
}

// exclusive runs fn while no container of the pod is being created.
func (p *Pods) exclusive(podID string, fn func() error) error {
	g := p.acquire(podID)
	defer p.release(podID, g)
	g.rw.Lock()
	defer g.rw.Unlock()
	return fn()
}

// CreateContainer creates a container in the pod. A create that overlaps
// a stop or remove of the pod runs wholly before it (and the stop takes
// the container) or wholly after it (and finds the pod not ready): a
// container the pod's stop never saw cannot appear.
func (p *Pods) CreateContainer(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	g := p.acquire(podID)
	defer p.release(podID, g)
	g.rw.RLock()
	defer g.rw.RUnlock()
	return p.containers.Create(ctx, podID, cfg, sandboxCfg)
}

// Stop stops the pod's containers, then the pod itself. Stopping a pod
// that does not exist or is already stopped succeeds.
func (p *Pods) Stop(ctx context.Context, podID string) error {
	return p.exclusive(podID, func() error {
		if err := p.containers.StopPodContainers(ctx, podID); err != nil {
			return fmt.Errorf("stop containers of pod %s: %w", podID, err)
		}
		return p.sandboxes.Stop(ctx, podID)
	})
}

// Remove removes the pod's containers (stopping those still running),
// then the pod. When a container cannot be removed the pod stays, so a
// retry finishes both. Removing a pod that does not exist succeeds.
func (p *Pods) Remove(ctx context.Context, podID string) error {
	return p.exclusive(podID, func() error {
		if err := p.containers.RemovePodContainers(ctx, podID); err != nil {
			return fmt.Errorf("remove containers of pod %s: %w", podID, err)
		}
		return p.sandboxes.Remove(ctx, podID)
	})
}
