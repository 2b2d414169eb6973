package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/sandbox"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RunPodSandbox creates a pod: slice, pinned namespaces, network, files.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	if req.GetConfig() == nil {
		return nil, fmt.Errorf("pod sandbox config is required: %w", errdefs.ErrInvalid)
	}
	if err := s.checkUserNamespace(req.GetConfig(), req.GetRuntimeHandler()); err != nil {
		return nil, err
	}
	id, err := s.pods.Run(ctx, req.GetConfig(), req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// StopPodSandbox stops the pod's containers and network. Unknown IDs
// succeed: the kubelet retries stops of pods that are already gone.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	id, err := s.podID(req.GetPodSandboxId())
	if errors.Is(err, errdefs.ErrNotFound) {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.life.Stop(ctx, id); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes the pod and everything it owns; idempotent.
func (s *Server) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	id, err := s.podID(req.GetPodSandboxId())
	if errors.Is(err, errdefs.ErrNotFound) {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if sb, err := s.pods.Get(ctx, id); err == nil {
		s.removed.add(id, podStatus(sb), time.Now())
	}
	if err := s.life.Remove(ctx, id); err != nil {
		return nil, err
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// PodSandboxStatus reports one pod and the statuses of its containers;
// verbose adds podunit's view as JSON. A kubelet with EventedPLEG takes
// the pod's containers from ContainersStatuses alone once Timestamp is set
// (v1.37 kuberuntime_manager.go GetPodStatus): without them it sees an
// empty pod and starts every container again, forever. Timestamp is taken
// before anything is read, so the statuses are never older than it says.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	ts := time.Now().UnixNano()
	id, err := s.podID(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	sb, err := s.pods.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: podStatus(sb), Timestamp: ts,
		ContainersStatuses: s.podContainerStatuses(ctx, id)}
	if req.GetVerbose() {
		info, err := verboseInfo(sb)
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": info}
	}
	return resp, nil
}

// ListPodSandbox lists pods matching the filter.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: s.listPods(ctx, req.GetFilter())}, nil
}

// StreamPodSandboxes is ListPodSandbox in batches (liststream.go).
func (s *Server) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream runtimeapi.RuntimeService_StreamPodSandboxesServer) error {
	ctx := stream.Context()
	return sendBatches(ctx, s.listPods(ctx, req.GetFilter()), streamBatchBytes, func(b []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: b})
	})
}

func (s *Server) listPods(ctx context.Context, f *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	var items []*runtimeapi.PodSandbox
	for _, sb := range s.pods.List(ctx) {
		if !podMatches(sb, f) {
			continue
		}
		cfg := sb.Config
		items = append(items, &runtimeapi.PodSandbox{
			Id:             sb.ID,
			Metadata:       cfg.GetMetadata(),
			State:          podState(sb.State),
			CreatedAt:      sb.CreatedAt.UnixNano(),
			Labels:         cfg.GetLabels(),
			Annotations:    cfg.GetAnnotations(),
			RuntimeHandler: sb.RuntimeHandler,
		})
	}
	return items
}

// UpdatePodSandboxResources records new pod-level resources (and applies
// them to a slice podunit owns; see sandbox.Manager.UpdateResources).
func (s *Server) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	id, err := s.podID(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if err := s.pods.UpdateResources(ctx, id, req.GetResources()); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}

// podID resolves a request's pod reference; see package idindex.
func (s *Server) podID(ref string) (string, error) { return s.pods.Resolve(ref) }

func podState(st sandbox.State) runtimeapi.PodSandboxState {
	if st == sandbox.StateReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

func podStatus(sb *sandbox.Sandbox) *runtimeapi.PodSandboxStatus {
	cfg := sb.Config
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.ID,
		Metadata:       cfg.GetMetadata(),
		State:          podState(sb.State),
		CreatedAt:      sb.CreatedAt.UnixNano(),
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Labels:         cfg.GetLabels(),
		Annotations:    cfg.GetAnnotations(),
		RuntimeHandler: sb.RuntimeHandler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
	}
	if len(sb.IPs) > 0 {
		st.Network.Ip = sb.IPs[0]
		for _, ip := range sb.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

// verboseInfo is the "info" entry of a verbose status: podunit's own view
// of the pod (slice, namespace pins, CNI result, config).
func verboseInfo(sb *sandbox.Sandbox) (string, error) {
	cfg, err := protojson.Marshal(sb.Config)
	if err != nil {
		return "", fmt.Errorf("encode pod config: %w", err)
	}
	info := struct {
		*sandbox.Sandbox
		Config json.RawMessage `json:"config"`
	}{sb, cfg}
	b, err := json.Marshal(info)
	if err != nil {
		return "", fmt.Errorf("encode pod info: %w", err)
	}
	return string(b), nil
}

// podMatches applies a ListPodSandbox filter: ID prefix, state, and every
// label of the selector.
func podMatches(sb *sandbox.Sandbox, f *runtimeapi.PodSandboxFilter) bool {
	if f == nil {
		return true
	}
	if id := f.GetId(); id != "" && (len(sb.ID) < len(id) || sb.ID[:len(id)] != id) {
		return false
	}
	if f.GetState() != nil && f.GetState().GetState() != podState(sb.State) {
		return false
	}
	labels := sb.Config.GetLabels()
	for k, v := range f.GetLabelSelector() {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
