//go:build integration

package events_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const prefix = "evt-ctr-"

// units stands in for the container manager: every evt-ctr-<id>.service
// is container <id>; exits are recorded once.
type units struct {
	mu      sync.Mutex
	running map[string]bool
	exited  map[string]uint64 // ExecMainExitTimestamp as the bus reported it
}

func (u *units) ContainerOfUnit(unit string) (events.Ref, bool) {
	id, ok := strings.CutPrefix(strings.TrimSuffix(unit, ".service"), prefix)
	return events.Ref{ID: id, PodID: "pod"}, ok
}

func (u *units) Running(context.Context) ([]events.Ref, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []events.Ref
	for id, r := range u.running {
		if r {
			out = append(out, events.Ref{ID: id, PodID: "pod"})
		}
	}
	return out, nil
}

func (u *units) UnitStopped(_ context.Context, id string, st systemd.UnitState) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.exited[id] = st.ExecMainExitTimestamp
	first := u.running[id]
	u.running[id] = false
	return first, nil
}

func (u *units) start(id string) {
	u.mu.Lock()
	u.running[id] = true
	u.mu.Unlock()
}

type rig struct {
	h    *harness.Harness
	sd   *systemd.DBus
	ctrs *units
	hub  *events.Hub
	sub  *events.Subscription
}

func newRig(tb testing.TB) *rig {
	h := harness.Start(tb, harness.Options{})
	tb.Setenv("DBUS_SYSTEM_BUS_ADDRESS", h.BusAddress())
	r := &rig{h: h, ctrs: &units{running: map[string]bool{}, exited: map[string]uint64{}}, hub: events.NewHub(events.HubOptions{Buffer: 4096})}
	var err error
	r.sd, err = systemd.New(systemd.Options{
		CallTimeout:     config.Default().Systemd.CallTimeout.D(),
		MaxParallelJobs: config.Default().Systemd.MaxParallelJobs,
		// A connection that outlives the first call (see the report on
		// the adapter's default dialer).
		Dial: func(context.Context) (*sd.Conn, error) { return sd.NewSystemConnectionContext(context.Background()) },
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.sd.Close)
	r.sub = r.hub.Subscribe()
	w, err := systemd.NewWatcher(systemd.WatchOptions{
		Match:       func(u string) bool { return strings.HasPrefix(u, prefix) },
		CallTimeout: time.Duration(config.Default().Systemd.CallTimeout),
	})
	if err != nil {
		tb.Fatal(err)
	}
	units, subscribed := make(chan systemd.UnitEvent), make(chan struct{})
	tr, err := events.NewTranslator(events.TranslatorOptions{
		Units: units, Containers: r.ctrs, Systemd: r.sd, UnitPattern: prefix + "*.service", Hub: r.hub,
		CallTimeout: time.Duration(config.Default().Systemd.CallTimeout),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	// The watcher's first Resync means it is subscribed: units started
	// from then on are seen.
	go func() {
		defer wg.Done()
		defer close(units)
		first := true
		for ev := range w.Events() {
			if first && ev.Kind == systemd.Resync {
				first = false
				close(subscribed)
			}
			select {
			case units <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	go func() { defer wg.Done(); _ = tr.Run(ctx) }()
	tb.Cleanup(func() { cancel(); wg.Wait() })
	<-subscribed
	return r
}

func execStart(argv ...string) systemd.Property { return sd.PropExecStart(argv, true) }

func (r *rig) run(tb testing.TB, id string, argv ...string) {
	tb.Helper()
	r.ctrs.start(id)
	if err := r.sd.StartTransientUnit(context.Background(), prefix+id+".service",
		[]systemd.Property{execStart(argv...), sd.PropType("exec")}); err != nil {
		tb.Fatal(err)
	}
}

func (r *rig) next(tb testing.TB, d time.Duration) (events.Event, bool) {
	select {
	case ev := <-r.sub.Events():
		return ev, true
	case <-time.After(d):
		return events.Event{}, false
	}
}

// Exits become exactly one STOPPED each, including exits that happened
// while the bus connection was down (reported after the resync).
func TestStoppedFromRealUnits(t *testing.T) {
	r := newRig(t)
	r.run(t, "a", "/bin/sh", "-c", "sleep 0.3; exit 3")
	r.run(t, "b", "/bin/sleep", "600")
	ev, ok := r.next(t, 20*time.Second)
	if !ok || ev.ContainerID != "a" || ev.Type != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT || ev.PodSandboxID != "pod" {
		t.Fatalf("first event %+v (ok %v), want STOPPED for a", ev, ok)
	}

	// Take the bus away, stop b behind the watcher's back, bring it back.
	r.h.MustExec("systemctl", "stop", "dbus.service", "dbus.socket")
	r.h.MustExec("systemctl", "stop", prefix+"b.service")
	r.h.MustExec("systemctl", "start", "dbus.socket", "dbus.service")
	ev, ok = r.next(t, 60*time.Second)
	if !ok || ev.ContainerID != "b" {
		t.Fatalf("exit during the outage: %+v (ok %v)", ev, ok)
	}
	if ev, ok := r.next(t, 2*time.Second); ok {
		t.Fatalf("duplicate or unexpected event %+v", ev)
	}
}

// BenchmarkStoppedLatency measures how long after a unit's main process
// exited its STOPPED event reaches a subscriber (systemd's
// ExecMainExitTimestamp to receipt), over b.N units, reporting p50/p99.
func BenchmarkStoppedLatency(b *testing.B) {
	r := newRig(b)
	var lat []time.Duration
	for i := range b.N {
		id := fmt.Sprintf("bench%d", i)
		r.run(b, id, "/bin/sh", "-c", "sleep 0.05")
		ev, ok := r.next(b, 30*time.Second)
		got := time.Now()
		if !ok || ev.ContainerID != id {
			b.Fatalf("event %+v (ok %v), want STOPPED for %s", ev, ok, id)
		}
		r.ctrs.mu.Lock()
		exit := r.ctrs.exited[id]
		r.ctrs.mu.Unlock()
		if exit == 0 {
			b.Fatalf("no exit timestamp for %s", id)
		}
		lat = append(lat, got.Sub(time.UnixMicro(int64(exit))))
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	b.ReportMetric(float64(pct(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
}
