package cri

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/network"
	"github.com/podunit/podunit/sandbox"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type podTestNet struct{}

func (podTestNet) Setup(ctx context.Context, r *network.Request) (*network.Result, error) {
	return &network.Result{Network: "t", IPs: []string{"10.1.0.2", "fd01::2"}, Raw: []byte(`{}`)}, nil
}
func (podTestNet) Teardown(ctx context.Context, r *network.Request) error { return nil }
func (podTestNet) Ready(ctx context.Context) error                        { return nil }

// podServer is the CRI server over the real managers (newManagers).
func podServer(t *testing.T) *Server {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pod namespaces need root")
	}
	pods, ctrs := newManagers(t, nil)
	s := New(Deps{Pods: pods, Containers: ctrs})
	t.Cleanup(func() {
		for _, p := range pods.List(context.Background()) {
			s.life.Remove(context.Background(), p.ID)
		}
	})
	return s
}

func testPod(name string, labels map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: name},
		Hostname: name,
		Labels:   labels,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

func TestPodRPCs(t *testing.T) {
	s := podServer(t)
	ctx := context.Background()
	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("a", map[string]string{"app": "x"}), RuntimeHandler: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	id := run.PodSandboxId
	if _, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("a", nil)}); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("b", nil), RuntimeHandler: "nope"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("bad handler: %v", err)
	}
	b, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("b", map[string]string{"app": "y"})})
	if err != nil {
		t.Fatal(err)
	}

	st, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id[:10], Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.Id != id || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Status.Network.Ip != "10.1.0.2" ||
		len(st.Status.Network.AdditionalIps) != 1 || st.Status.Network.AdditionalIps[0].Ip != "fd01::2" ||
		st.Status.RuntimeHandler != "runc" || st.Status.Linux.Namespaces.Options.Pid != runtimeapi.NamespaceMode_CONTAINER {
		t.Fatalf("status %v", st.Status)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		t.Fatal(err)
	}
	if info["slice"] == "" || info["netns"] == nil || info["config"] == nil {
		t.Fatalf("verbose info %v", info)
	}

	list := func(f *runtimeapi.PodSandboxFilter) []string {
		r, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range r.Items {
			ids = append(ids, p.Id)
		}
		return ids
	}
	if got := list(nil); len(got) != 2 {
		t.Fatalf("list all %v", got)
	}
	if got := list(&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "y"}}); len(got) != 1 || got[0] != b.PodSandboxId {
		t.Fatalf("label filter %v", got)
	}
	if got := list(&runtimeapi.PodSandboxFilter{Id: id[:8]}); len(got) != 1 || got[0] != id {
		t.Fatalf("id filter %v", got)
	}

	for i := 0; i < 2; i++ {
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
	}
	notReady := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}
	if got := list(notReady); len(got) != 1 || got[0] != id {
		t.Fatalf("state filter %v", got)
	}
	for i := 0; i < 2; i++ {
		if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("status after remove: %v", err)
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: "deadbeef"}); err != nil {
		t.Fatalf("stop unknown: %v", err)
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("stop empty id: %v", err)
	}
}

func TestPodMatches(t *testing.T) {
	sb := &sandbox.Sandbox{ID: "abcdef", State: sandbox.StateReady, CreatedAt: time.Now(),
		Config: &runtimeapi.PodSandboxConfig{Labels: map[string]string{"a": "1", "b": "2"}}}
	cases := []struct {
		f    *runtimeapi.PodSandboxFilter
		want bool
	}{
		{nil, true},
		{&runtimeapi.PodSandboxFilter{Id: "abc"}, true},
		{&runtimeapi.PodSandboxFilter{Id: "abd"}, false},
		{&runtimeapi.PodSandboxFilter{Id: "abcdefg"}, false},
		{&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"a": "1", "b": "2"}}, true},
		{&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"a": "1", "c": ""}}, false},
		{&runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}, false},
		{&runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}, true},
	}
	for i, c := range cases {
		if got := podMatches(sb, c.f); got != c.want {
			t.Errorf("case %d (%v): %v", i, c.f, got)
		}
	}
}

// A kubelet with EventedPLEG builds the pod's containers from
// PodSandboxStatus alone when it carries a timestamp: every container of the
// pod, with the status ContainerStatus gives, and a timestamp no later than
// the data.
func TestPodSandboxStatusCarriesContainerStatuses(t *testing.T) {
	s := podServer(t)
	ctx := context.Background()
	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("withctrs", nil)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("other", nil)})
	if err != nil {
		t.Fatal(err)
	}
	create := func(pod, name string) string {
		cr, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Command: []string{"sh"},
			Labels: map[string]string{"io.kubernetes.container.name": name},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return cr.ContainerId
	}
	want := map[string]string{create(run.PodSandboxId, "x"): "x", create(run.PodSandboxId, "y"): "y"}
	create(other.PodSandboxId, "z")
	before := time.Now().UnixNano()
	st, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: run.PodSandboxId})
	if err != nil {
		t.Fatal(err)
	}
	if st.Timestamp < before || st.Timestamp > time.Now().UnixNano() {
		t.Errorf("timestamp %d not taken during the call", st.Timestamp)
	}
	if len(st.ContainersStatuses) != len(want) {
		t.Fatalf("%d container statuses, want %d: %v", len(st.ContainersStatuses), len(want), st.ContainersStatuses)
	}
	for _, cs := range st.ContainersStatuses {
		one, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cs.Id})
		if err != nil {
			t.Fatal(err)
		}
		if want[cs.Id] == "" || cs.Metadata.GetName() != want[cs.Id] || cs.State != runtimeapi.ContainerState_CONTAINER_CREATED ||
			cs.Labels["io.kubernetes.container.name"] != want[cs.Id] || cs.CreatedAt != one.Status.CreatedAt {
			t.Errorf("container status %v; ContainerStatus says %v", cs, one.Status)
		}
	}
}

// TestPodSandboxStatusNewestContainerFirst: a kubelet with EventedPLEG reads
// a container's restart count from the first status of its name in
// PodSandboxStatus and does not sort them; an older attempt first made it
// create an attempt that already existed.
func TestPodSandboxStatusNewestContainerFirst(t *testing.T) {
	s := podServer(t)
	ctx := context.Background()
	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("attempts", nil)})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := uint32(0); attempt < 6; attempt++ {
		for _, name := range []string{"a", "b"} {
			if _, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: run.PodSandboxId, Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Command: []string{"sh"},
			}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 5 { // the containers' order inside podunit is a map's
		st, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: run.PodSandboxId})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.ContainersStatuses) != 12 {
			t.Fatalf("%d container statuses, want 12", len(st.ContainersStatuses))
		}
		for i, cs := range st.ContainersStatuses[1:] {
			prev := st.ContainersStatuses[i]
			if cs.CreatedAt > prev.CreatedAt || cs.CreatedAt == prev.CreatedAt && cs.Metadata.Attempt > prev.Metadata.Attempt {
				t.Fatalf("status %d (%s attempt %d, created %d) after an older one (%s attempt %d, created %d)",
					i+1, cs.Metadata.Name, cs.Metadata.Attempt, cs.CreatedAt, prev.Metadata.Name, prev.Metadata.Attempt, prev.CreatedAt)
			}
		}
		if first := st.ContainersStatuses[0].Metadata; first.Attempt != 5 {
			t.Fatalf("first status is %s attempt %d, want attempt 5", first.Name, first.Attempt)
		}
	}
}
