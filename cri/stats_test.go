package cri

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/events"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type eventStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *runtimeapi.ContainerEventResponse
	// block makes Send hang until ctx ends: a client that stopped reading.
	block bool
}

func (e *eventStream) Context() context.Context { return e.ctx }

func (e *eventStream) Send(r *runtimeapi.ContainerEventResponse) error {
	if e.block {
		<-e.ctx.Done()
		return e.ctx.Err()
	}
	e.sent <- r
	return nil
}

// statsServer is the CRI server over the real managers (newManagers),
// publishing container events to hub.
func statsServer(t *testing.T, hub *events.Hub) *Server {
	cfg := config.Default()
	pods, ctrs := newManagers(t, hub)
	return New(Deps{Config: func() *config.Config { return &cfg }, Pods: pods, Containers: ctrs, Stats: StatsDeps{Hub: hub}})
}

func TestGetContainerEventsStreamsWithStatuses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pod namespaces need root")
	}
	hub := events.NewHub(events.HubOptions{})
	hub.Subscribe().Close() // no restart backlog in this test
	s := statsServer(t, hub)
	ctx, cancel := context.WithCancel(context.Background())
	st := &eventStream{ctx: ctx, sent: make(chan *runtimeapi.ContainerEventResponse, 10)}
	done := make(chan error, 1)
	go func() { done <- s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, st) }()
	for hub.Subscribers() == 0 {
		time.Sleep(time.Millisecond)
	}
	pod, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("ev", nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.life.Remove(context.Background(), pod.PodSandboxId) })
	cr, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Command: []string{"sh"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	hub.Publish(events.NewEvent(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, "c9", "gone"))
	r := <-st.sent
	if r.ContainerId != cr.ContainerId || r.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT ||
		r.PodSandboxStatus.GetId() != pod.PodSandboxId || r.PodSandboxStatus.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY ||
		len(r.ContainersStatuses) != 1 || r.ContainersStatuses[0].GetId() != cr.ContainerId || r.CreatedAt == 0 {
		t.Fatalf("first event %v", r)
	}
	r = <-st.sent
	if r.ContainerId != "c9" || r.PodSandboxStatus != nil || r.ContainersStatuses != nil {
		t.Fatalf("event for a pod podunit never had %v", r)
	}
	// The pod's removal takes its container along: that DELETED event, and
	// one published after the pod is gone (as the restart backlog replays
	// it), carry the pod's last status, which the kubelet's evented PLEG
	// needs (it drops events without one).
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	hub.Publish(events.NewEvent(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "late", pod.PodSandboxId))
	var deleted, late *runtimeapi.ContainerEventResponse
	for deleted == nil || late == nil {
		select {
		case r = <-st.sent:
		case <-time.After(10 * time.Second):
			t.Fatalf("no DELETED and late event for the removed pod's container (deleted %v, late %v)", deleted, late)
		}
		switch {
		case r.ContainerId == "late":
			late = r
		case r.ContainerId == cr.ContainerId && r.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT:
			deleted = r
		}
	}
	for _, r := range []*runtimeapi.ContainerEventResponse{deleted, late} {
		if r.PodSandboxStatus.GetId() != pod.PodSandboxId || r.PodSandboxStatus.GetMetadata().GetUid() == "" ||
			r.PodSandboxStatus.GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || len(r.ContainersStatuses) != 0 {
			t.Fatalf("event after the pod's removal %v", r)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream ended with %v", err)
	}
	if hub.Subscribers() != 0 {
		t.Fatal("subscription leaked")
	}
}

func TestGetContainerEventsDropsStuckClient(t *testing.T) {
	hub := events.NewHub(events.HubOptions{Buffer: 4})
	hub.Subscribe().Close()
	s := statsServer(t, hub)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &eventStream{ctx: ctx, block: true}
	done := make(chan error, 1)
	go func() { done <- s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, st) }()
	for hub.Subscribers() == 0 {
		time.Sleep(time.Millisecond)
	}
	// One event is taken and stuck in Send; 4 fill the queue; the next
	// drops the subscriber instead of blocking the publisher.
	for range 6 {
		hub.Publish(events.NewEvent(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "c", "p"))
	}
	if hub.Subscribers() != 0 {
		t.Fatal("stuck subscriber not dropped")
	}
	cancel()
	<-done
	// A client that is slow but still there is told why it was cut off.
	st2 := &eventStream{ctx: context.Background(), sent: make(chan *runtimeapi.ContainerEventResponse)}
	go func() { done <- s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, st2) }()
	for hub.Subscribers() == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 6 {
		hub.Publish(events.NewEvent(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "c", "p"))
	}
	go func() {
		for range st2.sent {
		}
	}()
	err := <-done
	if status.Code(ToStatus(err)) != codes.ResourceExhausted {
		t.Fatalf("slow client ended with %v", err)
	}
}

func TestStatsNotWired(t *testing.T) {
	cfg := config.Default()
	s := New(Deps{Config: func() *config.Config { return &cfg }})
	if _, err := s.ListContainerStats(context.Background(), &runtimeapi.ListContainerStatsRequest{}); status.Code(ToStatus(err)) != codes.Unavailable {
		t.Fatalf("unwired stats: %v", err)
	}
	if err := s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, &eventStream{ctx: context.Background()}); status.Code(ToStatus(err)) != codes.Unavailable {
		t.Fatalf("unwired events: %v", err)
	}
	d, err := s.ListMetricDescriptors(context.Background(), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil || len(d.Descriptors) < 40 {
		t.Fatalf("descriptors: %d, %v", len(d.GetDescriptors()), err)
	}
	if _, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{}); err == nil {
		t.Fatal("empty container id accepted")
	}
}
