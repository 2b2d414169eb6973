package container

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type recordedEvents struct {
	mu  sync.Mutex
	evs []string
}

func (r *recordedEvents) Publish(e events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e.Type.String()+" "+e.ContainerID[:4]+" "+e.PodSandboxID)
}

func (r *recordedEvents) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.evs
	r.evs = nil
	return out
}

// Each lifecycle step publishes its event once, whichever path notices an
// exit first (a CRI stop, a unit signal, a status read).
func TestLifecycleEvents(t *testing.T) {
	e := newEnv(t)
	rec := &recordedEvents{}
	e.deps.Events = rec
	e.m = e.newManager()

	id := e.create("pod1", "app")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Stop(ctx, id, 5); err != nil {
		t.Fatal(err)
	}
	// The unit watcher reporting the same exit must not publish again.
	if _, err := e.m.UnitStopped(ctx, id, systemd.UnitState{ActiveState: "inactive"}); err != nil {
		t.Fatal(err)
	}
	e.status(id)
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	short := id[:4]
	want := []string{
		"CONTAINER_CREATED_EVENT " + short + " pod1",
		"CONTAINER_STARTED_EVENT " + short + " pod1",
		"CONTAINER_STOPPED_EVENT " + short + " pod1",
		"CONTAINER_DELETED_EVENT " + short + " pod1",
	}
	if got := rec.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("events\n got %q\nwant %q", got, want)
	}

	// An exit noticed through the unit watcher is published by it.
	id2 := e.create("pod1", "app2")
	if err := e.m.Start(ctx, id2); err != nil {
		t.Fatal(err)
	}
	rec.take()
	e.exit(id2, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "3", FinishedAt: time.Now().UnixNano()})
	if _, err := e.m.UnitStopped(ctx, id2, systemd.UnitState{}); err != nil {
		t.Fatal(err)
	}
	e.status(id2)
	if got := rec.take(); len(got) != 1 || got[0] != "CONTAINER_STOPPED_EVENT "+id2[:4]+" pod1" {
		t.Fatalf("exit via unit watcher: %q", got)
	}
	if st := e.status(id2); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 {
		t.Fatalf("status %v", st)
	}
}

// A unit signal handled late, after the unit became active again under
// the same name (Start's retry of a start whose cgroup vanished), must
// not settle the running container: its state is the failed attempt's.
func TestStaleUnitStoppedKeepsRunning(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.UnitStopped(ctx, id, systemd.UnitState{ActiveState: "failed"}); err != nil {
		t.Fatal(err)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after a stale unit signal: %v exit %d %q", st.State, st.ExitCode, st.Reason)
	}
}
