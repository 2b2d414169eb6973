package cri

import (
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestRemovedPodsKeepsLastStatusNotReady(t *testing.T) {
	var r removedPods
	t0 := time.Unix(1000, 0)
	r.add("p1", &runtimeapi.PodSandboxStatus{Id: "p1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Uid: "u1"}}, t0)
	st := r.get("p1", t0.Add(time.Minute))
	if st.GetId() != "p1" || st.GetMetadata().GetUid() != "u1" || st.GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("removed pod status %v", st)
	}
	if st := r.get("p2", t0); st != nil {
		t.Fatalf("a pod never removed has status %v", st)
	}
	if st := r.get("p1", t0.Add(removedPodsTTL)); st != nil {
		t.Fatalf("status kept past the TTL: %v", st)
	}
}

func TestRemovedPodsBounded(t *testing.T) {
	var r removedPods
	t0 := time.Unix(1000, 0)
	for i := range removedPodsMax + 10 {
		r.add(fmt.Sprint(i), &runtimeapi.PodSandboxStatus{Id: fmt.Sprint(i)}, t0)
	}
	if len(r.m) != removedPodsMax || len(r.order) != removedPodsMax {
		t.Fatalf("%d statuses, %d in order; want at most %d", len(r.m), len(r.order), removedPodsMax)
	}
	if r.get("0", t0) != nil || r.get(fmt.Sprint(removedPodsMax+9), t0) == nil {
		t.Fatal("the oldest must go first")
	}
	// expired entries go with the next add, whatever the count
	r.add("late", &runtimeapi.PodSandboxStatus{Id: "late"}, t0.Add(removedPodsTTL))
	if len(r.m) != 1 || r.get("late", t0.Add(removedPodsTTL)) == nil {
		t.Fatalf("%d statuses after the TTL, want only the new one", len(r.m))
	}
	// removing the same pod twice (a retried RemovePodSandbox) keeps one entry
	r.add("late", &runtimeapi.PodSandboxStatus{Id: "late"}, t0.Add(removedPodsTTL))
	if len(r.order) != 1 {
		t.Fatalf("order has %d entries for one pod", len(r.order))
	}
}
