package events

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
)

// fakeContainers records exits once, as the container manager must.
type fakeContainers struct {
	mu      sync.Mutex
	running map[string]bool // id -> running
	calls   []string
}

func (f *fakeContainers) ContainerOfUnit(unit string) (Ref, bool) {
	id, ok := strings.CutPrefix(strings.TrimSuffix(unit, ".service"), "podunit-ctr-")
	return Ref{ID: id, PodID: "pod-" + id}, ok
}

func (f *fakeContainers) Running(ctx context.Context) ([]Ref, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Ref
	for id, r := range f.running {
		if r {
			out = append(out, Ref{ID: id, PodID: "pod-" + id})
		}
	}
	return out, nil
}

func (f *fakeContainers) UnitStopped(ctx context.Context, id string, st systemd.UnitState) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, id+":"+st.ActiveState)
	first := f.running[id]
	f.running[id] = false
	return first, nil
}

type fakeLister struct {
	mu    sync.Mutex
	units []systemd.UnitStatus
	err   error
	calls int
}

func (l *fakeLister) ListUnits(ctx context.Context, patterns ...string) ([]systemd.UnitStatus, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	return l.units, l.err
}

type rig struct {
	units chan systemd.UnitEvent
	ctrs  *fakeContainers
	list  *fakeLister
	sub   *Subscription
	stop  func()
}

func newRig(t *testing.T, running ...string) *rig {
	r := &rig{units: make(chan systemd.UnitEvent), ctrs: &fakeContainers{running: map[string]bool{}}, list: &fakeLister{}}
	for _, id := range running {
		r.ctrs.running[id] = true
	}
	hub := NewHub(HubOptions{})
	r.sub = hub.Subscribe()
	tr, err := NewTranslator(TranslatorOptions{
		Units: r.units, Containers: r.ctrs, Systemd: r.list, UnitPattern: "podunit-ctr-*.service",
		Hub: hub, RetryInterval: 10 * time.Millisecond, CallTimeout: time.Duration(config.Default().Systemd.CallTimeout),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = tr.Run(ctx); close(done) }()
	r.stop = func() { cancel(); <-done }
	t.Cleanup(r.stop)
	return r
}

func (r *rig) change(unit, active string) {
	r.units <- systemd.UnitEvent{Kind: systemd.UnitChanged, Unit: unit, State: systemd.UnitState{ActiveState: active}}
}

// sync waits until the translator consumed everything sent before.
func (r *rig) sync() { r.units <- systemd.UnitEvent{Kind: systemd.UnitJobRemoved, Unit: "x"} }

func (r *rig) stopped(t *testing.T) []string {
	t.Helper()
	r.sync()
	var ids []string
	for len(r.sub.Events()) > 0 {
		ev := <-r.sub.Events()
		if ev.Type != stopped || ev.PodSandboxID != "pod-"+ev.ContainerID {
			t.Fatalf("unexpected event %+v", ev)
		}
		ids = append(ids, ev.ContainerID)
	}
	return ids
}

func TestTranslatorStoppedOncePerExit(t *testing.T) {
	r := newRig(t, "a", "b")
	// Loading a transient unit reports it inactive before it starts.
	r.change("podunit-ctr-a.service", "inactive")
	if got := r.stopped(t); len(got) != 0 {
		t.Fatalf("stop reported for a unit that never ran: %v", got)
	}
	for _, s := range []string{"activating", "active", "deactivating", "failed", "inactive"} {
		r.change("podunit-ctr-a.service", s)
	}
	if got := r.stopped(t); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("stopped = %v", got)
	}
	// Collected without a final state change seen: still an exit.
	r.change("podunit-ctr-b.service", "active")
	r.units <- systemd.UnitEvent{Kind: systemd.UnitRemoved, Unit: "podunit-ctr-b.service"}
	r.units <- systemd.UnitEvent{Kind: systemd.UnitRemoved, Unit: "podunit-ctr-a.service"}
	if got := r.stopped(t); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("stopped = %v", got)
	}
	// Units that are not containers are ignored.
	r.change("other.service", "active")
	r.change("other.service", "failed")
	if got := r.stopped(t); len(got) != 0 {
		t.Fatalf("stopped = %v", got)
	}
	r.ctrs.mu.Lock()
	defer r.ctrs.mu.Unlock()
	if !reflect.DeepEqual(r.ctrs.calls, []string{"a:failed", "b:"}) {
		t.Fatalf("UnitStopped calls = %v", r.ctrs.calls)
	}
}

func TestTranslatorResync(t *testing.T) {
	r := newRig(t, "live", "dead", "gone")
	r.list.units = []systemd.UnitStatus{
		{Name: "podunit-ctr-live.service", ActiveState: "active"},
		{Name: "podunit-ctr-dead.service", ActiveState: "failed", SubState: "failed"},
	}
	r.units <- systemd.UnitEvent{Kind: systemd.Resync, Reason: "subscribed"}
	got := r.stopped(t)
	if len(got) != 2 || !(got[0] == "dead" && got[1] == "gone" || got[0] == "gone" && got[1] == "dead") {
		t.Fatalf("resync stopped = %v", got)
	}
	// A second resync (reconnect) finds nothing new: no duplicates.
	r.units <- systemd.UnitEvent{Kind: systemd.Resync, Reason: "reconnected"}
	if got := r.stopped(t); len(got) != 0 {
		t.Fatalf("duplicate STOPPED after second resync: %v", got)
	}
	// The listing taught the translator that "live" runs: its stop counts
	// even though its activation happened before the subscription.
	r.change("podunit-ctr-live.service", "inactive")
	if got := r.stopped(t); !reflect.DeepEqual(got, []string{"live"}) {
		t.Fatalf("stopped = %v", got)
	}
}

func TestTranslatorResyncRetriesWhileSystemdIsDown(t *testing.T) {
	r := newRig(t, "x")
	r.list.mu.Lock()
	r.list.err = errors.New("bus down: " + errdefs.ErrUnavailable.Error())
	r.list.mu.Unlock()
	r.units <- systemd.UnitEvent{Kind: systemd.Resync, Reason: "reconnected"}
	time.Sleep(50 * time.Millisecond)
	if got := r.stopped(t); len(got) != 0 {
		t.Fatalf("stopped while systemd unreachable: %v", got)
	}
	r.list.mu.Lock()
	if r.list.calls < 2 {
		t.Fatalf("resync not retried: %d calls", r.list.calls)
	}
	r.list.err = nil
	r.list.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got := r.stopped(t); len(got) == 1 && got[0] == "x" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("exit not reported after systemd came back")
}
