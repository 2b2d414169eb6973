package container

import (
	"context"
	"fmt"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/sandbox"
)

// SandboxGetter is sandbox.Manager's lookup.
type SandboxGetter interface {
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
}

// SandboxPods adapts the sandbox manager to Pods.
func SandboxPods(g SandboxGetter) Pods { return sandboxPods{g} }

type sandboxPods struct{ g SandboxGetter }

func (p sandboxPods) Pod(ctx context.Context, id string) (*Pod, error) {
	sb, err := p.g.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	// A stopped pod's namespaces and slice may already be gone; the
	// kubelet creates containers only in ready pods.
	if sb.State != sandbox.StateReady {
		return nil, fmt.Errorf("pod %s is %s: %w", id, sb.State, errdefs.ErrPrecondition)
	}
	return &Pod{
		ID: sb.ID, Config: sb.Config, Slice: sb.Slice,
		NetNSPath: sb.NetNSPath, IPCNSPath: sb.IPCNSPath, UTSNSPath: sb.UTSNSPath, PIDNSPath: sb.PIDNSPath,
		UserNSPath:     sb.UserNSPath,
		ResolvConfPath: sb.ResolvConfPath, HostsPath: sb.HostsPath, HostnamePath: sb.HostnamePath,
		ShmPath: sb.ShmPath, LogDirectory: sb.LogDirectory, RuntimeHandler: sb.RuntimeHandler,
	}, nil
}
