package events

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Ref names a container and its pod.
type Ref struct {
	ID    string
	PodID string
}

// Containers is what the translator needs from the container manager.
type Containers interface {
	// ContainerOfUnit maps a unit name to its container; ok is false for
	// units that are not (or no longer) podunit containers.
	ContainerOfUnit(unit string) (ref Ref, ok bool)
	// Running lists the containers whose records say running.
	Running(ctx context.Context) ([]Ref, error)
	// UnitStopped records that the container's unit stopped. st is what
	// the bus or a listing said; an empty st.ActiveState means the unit was
	// not found (collected). It must hold the container's lock (so a
	// concurrent start finishes, and publishes STARTED, first), may re-read
	// the unit, and returns first=true only when it moved the record from
	// running to exited: STOPPED is published exactly then.
	UnitStopped(ctx context.Context, id string, st systemd.UnitState) (first bool, err error)
}

// Lister lists loaded units (systemd.Conn satisfies it).
type Lister interface {
	ListUnits(ctx context.Context, patterns ...string) ([]systemd.UnitStatus, error)
}

// TranslatorOptions wire a Translator.
type TranslatorOptions struct {
	// Units is a systemd.Watcher's Events channel.
	Units      <-chan systemd.UnitEvent
	Containers Containers
	Systemd    Lister
	// UnitPattern selects container units in listings, e.g.
	// "podunit-ctr-*.service".
	UnitPattern string
	Hub         *Hub
	// RetryInterval paces resync retries while systemd is unreachable.
	RetryInterval time.Duration
	// CallTimeout bounds each Containers / Systemd call
	// (systemd.call_timeout); required.
	CallTimeout time.Duration
	Logger      *slog.Logger
}

// Translator turns unit state changes into CONTAINER_STOPPED events. It
// reacts only to what the bus reports, plus one listing per Resync; it
// never polls containers.
type Translator struct {
	o TranslatorOptions
	// live holds container units seen activating/active/deactivating. A
	// unit's first signal after StartTransientUnit loads it says
	// "inactive" before it starts; only a live unit that stops has exited.
	live map[string]bool
}

// NewTranslator prepares a translator; call Run.
func NewTranslator(o TranslatorOptions) (*Translator, error) {
	if o.CallTimeout <= 0 {
		return nil, fmt.Errorf("event translator: CallTimeout is required: %w", errdefs.ErrInvalid)
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Translator{o: o, live: map[string]bool{}}, nil
}

func liveState(s string) bool {
	switch s {
	case "activating", "active", "deactivating", "reloading", "refreshing":
		return true
	}
	return false
}

// Run consumes unit events until ctx ends or the Units channel closes.
func (t *Translator) Run(ctx context.Context) error {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
			retry = nil
			if !t.resync(ctx) {
				retry = time.After(t.o.RetryInterval)
			}
		case ev, ok := <-t.o.Units:
			if !ok {
				return nil
			}
			switch ev.Kind {
			case systemd.Resync:
				if !t.resync(ctx) {
					retry = time.After(t.o.RetryInterval)
				}
			case systemd.UnitChanged:
				if liveState(ev.State.ActiveState) {
					t.live[ev.Unit] = true
				} else if ev.State.Stopped() && t.live[ev.Unit] {
					delete(t.live, ev.Unit)
					t.stopped(ctx, ev.Unit, ev.State)
				}
			case systemd.UnitRemoved:
				if t.live[ev.Unit] {
					delete(t.live, ev.Unit)
					t.stopped(ctx, ev.Unit, systemd.UnitState{})
				}
			}
		}
	}
}

func (t *Translator) stopped(ctx context.Context, unit string, st systemd.UnitState) {
	ref, ok := t.o.Containers.ContainerOfUnit(unit)
	if !ok {
		return
	}
	t.record(ctx, ref, st)
}

func (t *Translator) record(ctx context.Context, ref Ref, st systemd.UnitState) {
	cctx, cancel := context.WithTimeout(ctx, t.o.CallTimeout)
	defer cancel()
	first, err := t.o.Containers.UnitStopped(cctx, ref.ID, st)
	if err != nil {
		t.o.Logger.Warn("record container exit", "container", ref.ID, "err", err)
		return
	}
	if first {
		t.o.Hub.Publish(NewEvent(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, ref.ID, ref.PodID))
	}
}

// resync compares the containers podunit believes are running with the
// units systemd has loaded, records the exits missed meanwhile and
// re-learns which units are live. False means try again later.
func (t *Translator) resync(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, t.o.CallTimeout)
	defer cancel()
	units, err := t.o.Systemd.ListUnits(cctx, t.o.UnitPattern)
	if err != nil {
		t.o.Logger.Warn("container events resync: list units", "err", err)
		return false
	}
	running, err := t.o.Containers.Running(cctx)
	if err != nil {
		t.o.Logger.Warn("container events resync: list containers", "err", err)
		return false
	}
	byID := make(map[string]systemd.UnitStatus, len(units))
	t.live = map[string]bool{}
	for _, u := range units {
		if liveState(u.ActiveState) {
			t.live[u.Name] = true
		}
		if r, ok := t.o.Containers.ContainerOfUnit(u.Name); ok {
			byID[r.ID] = u
		}
	}
	for _, ref := range running {
		u, loaded := byID[ref.ID]
		switch {
		case loaded && liveState(u.ActiveState):
		case loaded:
			t.record(ctx, ref, systemd.UnitState{ActiveState: u.ActiveState, SubState: u.SubState})
		default:
			t.record(ctx, ref, systemd.UnitState{})
		}
	}
	return true
}
