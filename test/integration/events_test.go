//go:build integration

package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// eventLog collects GetContainerEvents by container.
type eventLog struct {
	mu  sync.Mutex
	evs map[string][]runtimeapi.ContainerEventType
	pod map[string]*runtimeapi.PodSandboxStatus
}

func (l *eventLog) follow(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient) {
	stream, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatalf("GetContainerEvents: %v", err)
	}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.evs[ev.ContainerId] = append(l.evs[ev.ContainerId], ev.ContainerEventType)
			if ev.PodSandboxStatus != nil {
				l.pod[ev.ContainerId] = ev.PodSandboxStatus
			}
			l.mu.Unlock()
		}
	}()
}

func (l *eventLog) of(id string) []runtimeapi.ContainerEventType {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]runtimeapi.ContainerEventType(nil), l.evs[id]...)
}

func waitEvents(t *testing.T, l *eventLog, id string, want ...runtimeapi.ContainerEventType) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := l.of(id)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) || len(got) > len(want) {
			t.Fatalf("events of %s: got %v, want %v", id[:12], got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestContainerEvents follows GetContainerEvents through the real daemon:
// one event per lifecycle step in order, with the pod's status attached;
// an exit the container makes on its own (seen through systemd's unit
// signals, no CRI call) and an exit that happens while podunit is down,
// reported once after the restart.
func TestContainerEvents(t *testing.T) {
	e := StartEnv(t)
	ctx := harness.Context(t, 3*time.Minute)
	rt := e.P.Runtime
	l := &eventLog{evs: map[string][]runtimeapi.ContainerEventType{}, pod: map[string]*runtimeapi.PodSandboxStatus{}}
	sctx, cancel := context.WithCancel(ctx)
	l.follow(sctx, t, rt)

	const (
		created = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
		started = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
		stopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
		deleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
	)

	// CRI-driven lifecycle.
	pod, ctr, err := e.RunContainer(ctx, "ev-crud")
	if err != nil {
		t.Fatal(err)
	}
	waitEvents(t, l, ctr, created, started)
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr}); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, l, ctr, created, started, stopped, deleted)
	l.mu.Lock()
	ps := l.pod[ctr]
	l.mu.Unlock()
	if ps.GetId() != pod {
		t.Errorf("events carry pod status %v, want pod %s", ps, pod)
	}

	// A container that ends by itself: STOPPED comes from systemd's
	// signals, with no CRI call touching it.
	pc := PodConfig("ev-self")
	r, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
	if err != nil {
		t.Fatal(err)
	}
	cc := ContainerConfig("ev-self")
	cc.Command = []string{"sh", "-c", "sleep 1; exit 4"}
	c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: r.PodSandboxId, Config: cc, SandboxConfig: pc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, l, c.ContainerId, created, started, stopped)

	// An exit while podunit is down is reported once after the restart.
	_, down, err := e.RunContainer(ctx, "ev-down")
	if err != nil {
		t.Fatal(err)
	}
	waitEvents(t, l, down, created, started)
	cancel()
	if err := e.KillPodunit(); err != nil {
		t.Fatal(err)
	}
	unit := "podunit-ctr-" + down + ".service"
	if out, err := e.H.Exec("systemctl", "stop", unit); err != nil {
		t.Fatalf("stop %s: %v %s", unit, err, out)
	}
	e.Restart()
	rt = e.P.Runtime
	l2 := &eventLog{evs: map[string][]runtimeapi.ContainerEventType{}, pod: map[string]*runtimeapi.PodSandboxStatus{}}
	l2.follow(ctx, t, rt)
	waitEvents(t, l2, down, stopped)
	time.Sleep(time.Second)
	if got := l2.of(down); len(got) != 1 {
		t.Fatalf("exit while down reported %v, want one STOPPED", got)
	}
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Fatal(err)
	}
}
