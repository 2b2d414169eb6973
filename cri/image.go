package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// The ImageService RPCs. Each translates to one imagestore.Store call;
// reference normalisation, credentials, registries and error
// classification all live in imagestore.

// PullImage pulls the image and returns its ID as image_ref, the same
// value ImageStatus reports as Image.id and containers report as image_id.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, fmt.Errorf("%w: PullImage without an image", errdefs.ErrInvalid)
	}
	id, err := s.images.Pull(ctx, ref, req.GetAuth())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: id}, nil
}

// ImageStatus answers an empty response, not an error, for an image that
// is not stored: that is how the CRI says "not present".
func (s *Server) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, fmt.Errorf("%w: ImageStatus without an image", errdefs.ErrInvalid)
	}
	img, info, err := s.images.Status(ctx, ref, req.GetVerbose())
	if errors.Is(err, errdefs.ErrNotFound) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ImageStatusResponse{Image: img, Info: info}, nil
}

// ListImages lists every image, or only the one the filter names.
func (s *Server) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	images, err := s.images.List(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListImagesResponse{Images: images}, nil
}

// StreamImages is ListImages in batches (liststream.go).
func (s *Server) StreamImages(req *runtimeapi.StreamImagesRequest, stream runtimeapi.ImageService_StreamImagesServer) error {
	ctx := stream.Context()
	images, err := s.images.List(ctx, req.GetFilter())
	if err != nil {
		return err
	}
	return sendBatches(ctx, images, streamBatchBytes, func(b []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: b})
	})
}

// RemoveImage is idempotent; an image a container uses is
// FailedPrecondition. A container already removed may still hold it for a
// moment (its writable layer is deleted after RemoveContainer returns,
// container.Manager.Drain): in use, the removal waits for those deletions,
// up to removeImageDrain, and tries once more.
func (s *Server) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, fmt.Errorf("%w: RemoveImage without an image", errdefs.ErrInvalid)
	}
	err := s.images.Remove(ctx, ref)
	if errors.Is(err, errdefs.ErrPrecondition) && s.ctrs != nil {
		dctx, cancel := context.WithTimeout(ctx, removeImageDrain)
		derr := s.ctrs.Drain(dctx)
		cancel()
		if derr == nil {
			err = s.images.Remove(ctx, ref)
		}
	}
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// removeImageDrain bounds RemoveImage's wait for removed containers'
// layers.
const removeImageDrain = 10 * time.Second

// ImageFsInfo reports the image and container writable-layer usage.
func (s *Server) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	imageFs, containerFs, err := s.images.FsInfo(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: imageFs, ContainerFilesystems: containerFs}, nil
}
