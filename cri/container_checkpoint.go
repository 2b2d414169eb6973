package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/podlife"
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

// CheckpointPod is KEP-5823's pod-wide checkpoint: the pod's containers
// are frozen together (the pod's slice, through systemd), each is dumped,
// and the pod is thawed on every path (podlife.Pods.Checkpoint). The
// caller owns output_path, an empty directory; the layout inside is
// podunit's (docs/checkpoint.md).
func (s *Server) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	if err := checkpointCall(ctx, "checkpoint pod", req.GetOptions()); err != nil {
		return nil, err
	}
	id, err := s.podID(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if err := s.life.Checkpoint(ctx, id, req.GetOutputPath(), req.GetContainerIds()); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointPodResponse{}, nil
}

// RestorePod runs a new pod from the request's config and creates its
// containers from a CheckpointPod directory; the caller starts each
// returned container, which restores it (podlife.Pods.Restore).
func (s *Server) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	if err := checkpointCall(ctx, "restore pod", req.GetOptions()); err != nil {
		return nil, err
	}
	if req.GetConfig() != nil {
		if err := s.checkUserNamespace(req.GetConfig(), req.GetRuntimeHandler()); err != nil {
			return nil, err
		}
	}
	id, ctrs, err := s.life.Restore(ctx, podlife.RestoreRequest{
		Dir: req.GetCheckpointPath(), Config: req.GetConfig(), Handler: req.GetRuntimeHandler(), Containers: req.GetContainerConfigs(),
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RestorePodResponse{PodSandboxId: id, RestoredContainers: ctrs}, nil
}

// checkpointCall checks what KEP-5823 asks of both pod calls: a deadline
// (the pod is frozen while the call runs), and options: podunit has none,
// so any key is refused rather than ignored.
func checkpointCall(ctx context.Context, op string, options map[string]string) error {
	if _, ok := ctx.Deadline(); !ok {
		return fmt.Errorf("%s: the call has no deadline: %w", op, errdefs.ErrInvalid)
	}
	for k := range options {
		return fmt.Errorf("%s: unsupported option %q (podunit has none): %w", op, k, errdefs.ErrInvalid)
	}
	return nil
}
