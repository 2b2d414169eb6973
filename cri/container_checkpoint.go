package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CheckpointContainer is KEP-2008's forensic checkpoint: the kubelet's
// /checkpoint API names the archive's location, and the container keeps
// running. timeout is in seconds; zero means the call's own deadline.
func (s *Server) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if req.GetTimeout() < 0 {
		return nil, fmt.Errorf("checkpoint container: negative timeout %d: %w", req.GetTimeout(), errdefs.ErrInvalid)
	}
	if err := s.ctrs.Checkpoint(ctx, req.GetContainerId(), req.GetLocation(), time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}
