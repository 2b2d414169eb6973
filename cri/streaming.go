package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// Exec, Attach and PortForward only check the request and hand out a
// single-use URL of the streaming server; the streams themselves are
// served there, in the session process podunit-stream.service, which
// outlives podunit (package streaming, docs/streaming.md).

func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if s.stream == nil {
		return nil, fmt.Errorf("exec: streaming server not running: %w", errdefs.ErrUnavailable)
	}
	return s.stream.Exec(ctx, req)
}

func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if s.stream == nil {
		return nil, fmt.Errorf("attach: streaming server not running: %w", errdefs.ErrUnavailable)
	}
	return s.stream.Attach(ctx, req)
}

func (s *Server) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if s.stream == nil {
		return nil, fmt.Errorf("port-forward: streaming server not running: %w", errdefs.ErrUnavailable)
	}
	id, err := s.podID(req.GetPodSandboxId())
	if err != nil {
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	return s.stream.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: req.GetPort()})
}
