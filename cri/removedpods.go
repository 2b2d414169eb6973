package cri

import (
	"sync"
	"time"

	"github.com/podunit/podunit/events"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// removedPods keeps the last status of pods removed through the CRI for a
// while. Container events are turned into responses by each subscriber's
// goroutine, after they were published: the DELETED events of the
// containers RemovePodSandbox takes along, and the restart backlog a late
// subscriber gets, would otherwise reach the kubelet without a pod status,
// and its evented PLEG drops such events with an error
// (pkg/kubelet/pleg/evented.go, "nil PodSandboxStatus").
type removedPods struct {
	mu    sync.Mutex
	m     map[string]removedPod
	order []string // ids, oldest first
}

type removedPod struct {
	st *runtimeapi.PodSandboxStatus
	at time.Time
}

// A removed pod's status is kept as long as the hub replays events to a
// late first subscriber.
const (
	removedPodsTTL = events.DefaultBacklogTTL
	removedPodsMax = events.DefaultBacklog
)

// add records the status of pod id, about to be removed, as NOTREADY.
func (r *removedPods) add(id string, st *runtimeapi.PodSandboxStatus, now time.Time) {
	st.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]removedPod{}
	}
	if _, ok := r.m[id]; !ok {
		r.order = append(r.order, id)
	}
	r.m[id] = removedPod{st: st, at: now}
	for len(r.order) > 0 {
		old := r.order[0]
		if len(r.order) <= removedPodsMax && now.Sub(r.m[old].at) < removedPodsTTL {
			break
		}
		delete(r.m, old)
		r.order = r.order[1:]
	}
}

// get is the last status of a pod removed less than removedPodsTTL ago, or
// nil.
func (r *removedPods) get(id string, now time.Time) *runtimeapi.PodSandboxStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.m[id]
	if !ok || now.Sub(p.at) >= removedPodsTTL {
		return nil
	}
	return p.st
}
