package streaming

import (
	"context"
	"fmt"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// Remote answers the CRI's Exec, Attach and PortForward in podunit: it
// checks the request as the in-process Server does (same errors, so the
// same gRPC codes), resolves what the session needs and registers it
// with the session process, whose URL it returns. Sessions then run
// there and outlive podunit.
type Remote struct {
	Socket     string
	Containers Containers
	Execs      ExecTargets
	Pods       Pods
	// Ensure starts the session process when none answers at Socket (the
	// next registration after it was stopped or killed brings it back).
	Ensure func(ctx context.Context) error

	mu sync.Mutex // one Ensure at a time
}

// Exec checks the request and the container and returns a single-use URL.
func (r *Remote) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if err := checkStreams(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr()); err != nil {
		return nil, err
	}
	if len(req.GetCmd()) == 0 {
		return nil, fmt.Errorf("exec needs a command: %w", errdefs.ErrInvalid)
	}
	t, err := running(ctx, r.Containers, req.GetContainerId())
	if err != nil {
		return nil, err
	}
	x, err := r.Execs.ExecTarget(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	url, err := r.register(ctx, request{Op: opExec, ID: t.ID, Cmd: req.GetCmd(), TTY: req.GetTty(),
		Stdin: req.GetStdin(), Stdout: req.GetStdout(), Stderr: req.GetStderr(), Target: &t, Exec: &x})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecResponse{Url: url}, nil
}

// Attach checks the request and the container and returns a single-use URL.
func (r *Remote) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := checkStreams(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr()); err != nil {
		return nil, err
	}
	t, err := running(ctx, r.Containers, req.GetContainerId())
	if err != nil {
		return nil, err
	}
	url, err := r.register(ctx, request{Op: opAttach, ID: t.ID, TTY: req.GetTty(),
		Stdin: req.GetStdin(), Stdout: req.GetStdout(), Stderr: req.GetStderr(), Target: &t})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.AttachResponse{Url: url}, nil
}

// PortForward checks that the pod exists and returns a single-use URL.
func (r *Remote) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if err := checkPortForward(req); err != nil {
		return nil, err
	}
	path, err := r.Pods.NetNSPath(ctx, req.GetPodSandboxId())
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s: %w", req.GetPodSandboxId(), err)
	}
	url, err := r.register(ctx, request{Op: opPortForward, ID: req.GetPodSandboxId(), Ports: req.GetPort(), NetNS: path})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PortForwardResponse{Url: url}, nil
}

// register sends q, starting the session process first when none
// answers.
func (r *Remote) register(ctx context.Context, q request) (string, error) {
	resp, err := call(r.Socket, q, controlTimeout)
	if err != nil && r.Ensure != nil {
		r.mu.Lock()
		eerr := r.Ensure(ctx)
		r.mu.Unlock()
		if eerr != nil {
			return "", fmt.Errorf("%w; starting it: %v: %w", err, eerr, errdefs.ErrUnavailable)
		}
		resp, err = call(r.Socket, q, controlTimeout)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
	}
	if err := resp.err(); err != nil {
		return "", err
	}
	return resp.URL, nil
}
