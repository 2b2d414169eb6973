package cri

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CheckpointPod and RestorePod over the real managers (fake systemd, a
// runtime without CRIU): every refusal leaves the pod running and
// thawed, the output directory empty, and no pod behind.
func TestPodCheckpointRPCs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pod namespaces need root")
	}
	pods, ctrs, sd := newManagersSD(t, nil)
	s := New(Deps{Pods: pods, Containers: ctrs})
	t.Cleanup(func() {
		for _, p := range pods.List(context.Background()) {
			s.life.Remove(context.Background(), p.ID)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod("ck", nil), RuntimeHandler: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	pod := run.PodSandboxId
	cr, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Command: []string{"sh"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	sb, _ := pods.Get(ctx, pod)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  *runtimeapi.CheckpointPodRequest
		want error
	}{
		{"no deadline", context.Background(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: []string{cr.ContainerId}}, errdefs.ErrInvalid},
		{"an option", ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: []string{cr.ContainerId}, Options: map[string]string{"tcp": "1"}}, errdefs.ErrInvalid},
		{"unknown pod", ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: "nosuch", OutputPath: out, ContainerIds: []string{cr.ContainerId}}, errdefs.ErrNotFound},
		{"relative output", ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: "out", ContainerIds: []string{cr.ContainerId}}, errdefs.ErrInvalid},
		{"no containers", ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out}, errdefs.ErrInvalid},
		// Frozen, then the dump fails (the test runtime has no CRIU):
		// thawed again.
		{"dump fails", ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod[:12], OutputPath: out, ContainerIds: []string{cr.ContainerId}}, errdefs.ErrPrecondition},
	} {
		if _, err := s.CheckpointPod(tc.ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("%s: left in the output: %v", tc.name, ents)
		}
		if u := sd.Units[sb.Slice]; u == nil || u.Frozen {
			t.Fatalf("%s: slice %s left frozen (or gone)", tc.name, sb.Slice)
		}
	}
	if calls := sd.Calls; !slices.Contains(calls, "freeze "+sb.Slice) || !slices.Contains(calls, "thaw "+sb.Slice) {
		t.Errorf("the failed dump ran without freeze and thaw: %v", calls)
	}
	st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cr.ContainerId})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after the refusals: %v %v", st, err)
	}

	// RestorePod from something that is not a pod checkpoint.
	before := len(pods.List(ctx))
	for _, tc := range []struct {
		name string
		req  *runtimeapi.RestorePodRequest
	}{
		{"empty dir", &runtimeapi.RestorePodRequest{CheckpointPath: t.TempDir(), Config: testPod("r", nil),
			ContainerConfigs: []*runtimeapi.ContainerConfig{{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}}}}},
		{"an option", &runtimeapi.RestorePodRequest{CheckpointPath: t.TempDir(), Config: testPod("r", nil), Options: map[string]string{"x": "y"}}},
		{"relative", &runtimeapi.RestorePodRequest{CheckpointPath: "ck", Config: testPod("r", nil)}},
	} {
		if _, err := s.RestorePod(ctx, tc.req); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("RestorePod %s: %v", tc.name, err)
		}
	}
	if after := len(pods.List(ctx)); after != before {
		t.Errorf("pods %d -> %d after refused restores", before, after)
	}
}
