package cri

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/stats/cristats"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StatsDeps wire the stats, metrics and container events RPCs. The server
// holds them in its stats field (Deps.Stats).
type StatsDeps struct {
	Collector *cristats.Collector
	Hub       *events.Hub
}

var errStatsNotWired = fmt.Errorf("stats are not configured in this podunit: %w", errdefs.ErrUnavailable)

func (s *Server) collector() (*cristats.Collector, error) {
	if s.stats.Collector == nil {
		return nil, errStatsNotWired
	}
	return s.stats.Collector, nil
}

func (s *Server) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	c, err := s.collector()
	if err != nil {
		return nil, err
	}
	if req.GetContainerId() == "" {
		return nil, fmt.Errorf("container id is required: %w", errdefs.ErrInvalid)
	}
	st, err := c.ContainerStats(ctx, req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

func (s *Server) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	st, err := s.listContainerStats(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: st}, nil
}

// StreamContainerStats is ListContainerStats in batches (liststream.go).
func (s *Server) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream runtimeapi.RuntimeService_StreamContainerStatsServer) error {
	ctx := stream.Context()
	st, err := s.listContainerStats(ctx, req.GetFilter())
	if err != nil {
		return err
	}
	return sendBatches(ctx, st, streamBatchBytes, func(b []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: b})
	})
}

func (s *Server) listContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	c, err := s.collector()
	if err != nil {
		return nil, err
	}
	return c.ListContainerStats(ctx, f)
}

func (s *Server) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	c, err := s.collector()
	if err != nil {
		return nil, err
	}
	if req.GetPodSandboxId() == "" {
		return nil, fmt.Errorf("pod sandbox id is required: %w", errdefs.ErrInvalid)
	}
	st, err := c.PodSandboxStats(ctx, req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	st, err := s.listPodSandboxStats(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: st}, nil
}

// StreamPodSandboxStats is ListPodSandboxStats in batches (liststream.go).
func (s *Server) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxStatsServer) error {
	ctx := stream.Context()
	st, err := s.listPodSandboxStats(ctx, req.GetFilter())
	if err != nil {
		return err
	}
	return sendBatches(ctx, st, streamBatchBytes, func(b []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: b})
	})
}

func (s *Server) listPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	c, err := s.collector()
	if err != nil {
		return nil, err
	}
	return c.ListPodSandboxStats(ctx, f)
}

func (s *Server) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: cristats.MetricDescriptors()}, nil
}

func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	m, err := s.listPodSandboxMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: m}, nil
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics in batches
// (liststream.go); a pod's metrics, its containers' included, are one item.
func (s *Server) StreamPodSandboxMetrics(_ *runtimeapi.StreamPodSandboxMetricsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxMetricsServer) error {
	ctx := stream.Context()
	m, err := s.listPodSandboxMetrics(ctx)
	if err != nil {
		return err
	}
	return sendBatches(ctx, m, streamBatchBytes, func(b []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: b})
	})
}

func (s *Server) listPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	c, err := s.collector()
	if err != nil {
		return nil, err
	}
	return c.ListPodSandboxMetrics(ctx)
}

// GetContainerEvents streams container events until the client goes away,
// podunit shuts down, or the client falls behind (then it gets
// ResourceExhausted and the kubelet falls back to relisting).
func (s *Server) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	if s.stats.Hub == nil {
		return errStatsNotWired
	}
	ctx := stream.Context()
	sub := s.stats.Hub.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sub.Events():
			if !ok {
				return sub.Err()
			}
			if err := stream.Send(s.eventResponse(ctx, ev)); err != nil {
				return err
			}
		}
	}
}

// eventResponse attaches the pod's current status and its containers'
// statuses, as the kubelet's evented PLEG expects. A pod removed since the
// event (DELETED of the containers RemovePodSandbox took along, the restart
// backlog) gets its last status, NOTREADY; a container already gone yields
// the event without its status. Only a pod podunit never removed through
// the CRI, or one removed longer ago than removedPodsTTL, leaves the pod
// status out.
func (s *Server) eventResponse(ctx context.Context, ev events.Event) *runtimeapi.ContainerEventResponse {
	resp := &runtimeapi.ContainerEventResponse{
		ContainerId: ev.ContainerID, ContainerEventType: ev.Type, CreatedAt: ev.CreatedAt,
	}
	if ev.PodSandboxID == "" {
		return resp
	}
	if sb, err := s.pods.Get(ctx, ev.PodSandboxID); err == nil {
		resp.PodSandboxStatus = podStatus(sb)
	} else if errors.Is(err, errdefs.ErrNotFound) {
		resp.PodSandboxStatus = s.removed.get(ev.PodSandboxID, time.Now())
	} else {
		s.log.Debug("container event: pod status", "pod", ev.PodSandboxID, "err", err)
	}
	resp.ContainersStatuses = s.podContainerStatuses(ctx, ev.PodSandboxID)
	return resp
}

// podContainerStatuses are the statuses of the pod's containers; one
// removed since the listing is left out.
//
// Newest first: a kubelet with EventedPLEG takes these as the pod's
// containers without sorting them (v1.37 GetPodStatus; its ListContainers
// path sorts by creation), and the first status of a name is the one it
// counts restarts from. In any other order it recreated an attempt that
// already existed ("container name …/b/1 is reserved") and backed off.
func (s *Server) podContainerStatuses(ctx context.Context, podID string) []*runtimeapi.ContainerStatus {
	var out []*runtimeapi.ContainerStatus
	for _, id := range s.ctrs.PodContainers(podID) {
		st, _, err := s.ctrs.Status(ctx, id, false)
		if err != nil {
			if !errors.Is(err, errdefs.ErrNotFound) {
				s.log.Debug("container event: container status", "container", id, "err", err)
			}
			continue
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *runtimeapi.ContainerStatus) int {
		if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
			return c
		}
		if c := cmp.Compare(b.GetMetadata().GetAttempt(), a.GetMetadata().GetAttempt()); c != 0 {
			return c
		}
		return strings.Compare(a.Id, b.Id)
	})
	return out
}
