// Package systemdtest is an in-memory systemd for unit tests.
package systemdtest

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
)

// Unit is a unit as the Fake keeps it.
type Unit struct {
	Name        string
	Props       map[string]any // as given, godbus Variant values unwrapped
	ActiveState string         // "active", "inactive", "failed"
	Signals     []int32        // signals delivered by KillUnit
	Frozen      bool           // FreezeUnit'd and not thawed since
}

// Fake is an in-memory Conn for unit tests. StartFunc and StopFunc, when
// set, decide a job's result (and may mutate the unit, e.g. mark it failed).
type Fake struct {
	mu        sync.Mutex
	Units     map[string]*Unit
	Calls     []string
	StartFunc func(u *Unit) systemd.JobResult
	StopFunc  func(u *Unit) systemd.JobResult
	// FreezeErr and ThawErr, when set, are what FreezeUnit and ThawUnit
	// answer (the unit's state is left as it was).
	FreezeErr, ThawErr error
	Down               bool // every call fails with ErrUnavailable
	// FailOn makes a call fail with the error under its verb ("list",
	// "stop", "reset-failed", ... as recorded in Calls).
	FailOn map[string]error
	// PropertyReads are the names of every UnitProperties call, in order
	// (nil: all of the unit's properties).
	PropertyReads [][]string
}

var _ systemd.Conn = (*Fake)(nil)

// New returns an empty fake systemd.
func New() *Fake { return &Fake{Units: map[string]*Unit{}} }

func (f *Fake) record(s string) error {
	f.Calls = append(f.Calls, s)
	if f.Down {
		return fmt.Errorf("fake systemd down: %w", errdefs.ErrUnavailable)
	}
	verb, _, _ := strings.Cut(s, " ")
	return f.FailOn[verb]
}

func (f *Fake) StartTransientUnit(ctx context.Context, name string, props []systemd.Property) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("start " + name); err != nil {
		return err
	}
	if u, ok := f.Units[name]; ok {
		if u.ActiveState != "failed" {
			return fmt.Errorf("unit %s: %w", name, errdefs.ErrExists)
		}
		delete(f.Units, name) // reset-failed + retry, as the D-Bus adapter does
	}
	u := &Unit{Name: name, Props: map[string]any{}, ActiveState: "active"}
	for _, p := range props {
		u.Props[p.Name] = p.Value.Value()
	}
	f.Units[name] = u
	if f.StartFunc != nil {
		if r := f.StartFunc(u); r != systemd.JobDone {
			return &systemd.JobError{Unit: name, Job: "start", Result: r}
		}
	}
	return nil
}

func (f *Fake) StopUnit(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("stop " + name); err != nil {
		return err
	}
	u, ok := f.Units[name]
	if !ok {
		return nil
	}
	if f.StopFunc != nil {
		if r := f.StopFunc(u); r != systemd.JobDone {
			return &systemd.JobError{Unit: name, Job: "stop", Result: r}
		}
	}
	delete(f.Units, name)
	return nil
}

func (f *Fake) KillUnit(ctx context.Context, name string, sig int32, mainOnly bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(fmt.Sprintf("kill %s %d", name, sig)); err != nil {
		return err
	}
	u, ok := f.Units[name]
	if !ok {
		return fmt.Errorf("unit %s: %w", name, errdefs.ErrNotFound)
	}
	u.Signals = append(u.Signals, sig)
	return nil
}

func (f *Fake) ResetFailedUnit(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("reset-failed " + name); err != nil {
		return err
	}
	// reset-failed leaves a stopped unit inactive, and systemd collects
	// it (CollectMode=inactive-or-failed, as podunit's units have).
	if u, ok := f.Units[name]; ok && (u.ActiveState == "failed" || u.ActiveState == "inactive") {
		delete(f.Units, name)
	}
	return nil
}

func (f *Fake) SetUnitProperties(ctx context.Context, name string, props ...systemd.Property) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("set-property " + name); err != nil {
		return err
	}
	u, ok := f.Units[name]
	if !ok {
		return fmt.Errorf("unit %s: %w", name, errdefs.ErrNotFound)
	}
	for _, p := range props {
		u.Props[p.Name] = p.Value.Value()
	}
	return nil
}

func (f *Fake) UnitProperties(ctx context.Context, name, iface string, names ...string) (map[string]any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("get " + name); err != nil {
		return nil, err
	}
	f.PropertyReads = append(f.PropertyReads, names)
	u, ok := f.Units[name]
	if !ok {
		return nil, fmt.Errorf("unit %s: %w", name, errdefs.ErrNotFound)
	}
	out := map[string]any{"Id": name, "LoadState": "loaded", "ActiveState": u.ActiveState}
	for k, v := range u.Props {
		out[k] = v
	}
	if len(names) > 0 {
		// As systemd answers the named reads: those and LoadState only.
		some := map[string]any{"LoadState": out["LoadState"]}
		for _, n := range names {
			if v, ok := out[n]; ok {
				some[n] = v
			}
		}
		out = some
	}
	return out, nil
}

// FreezeUnit freezes an active unit; a slice's units below it are frozen
// with it, as systemd does.
func (f *Fake) FreezeUnit(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("freeze " + name); err != nil {
		return err
	}
	u, ok := f.Units[name]
	if !ok {
		return fmt.Errorf("unit %s: %w", name, errdefs.ErrNotFound)
	}
	if f.FreezeErr != nil {
		return f.FreezeErr
	}
	if u.ActiveState != "active" {
		return fmt.Errorf("unit %s is inactive: %w", name, errdefs.ErrPrecondition)
	}
	u.Frozen = true
	return nil
}

func (f *Fake) ThawUnit(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("thaw " + name); err != nil {
		return err
	}
	u, ok := f.Units[name]
	if !ok {
		return fmt.Errorf("unit %s: %w", name, errdefs.ErrNotFound)
	}
	if f.ThawErr != nil {
		return f.ThawErr
	}
	u.Frozen = false
	return nil
}

func (f *Fake) ListUnits(ctx context.Context, patterns ...string) ([]systemd.UnitStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("list"); err != nil {
		return nil, err
	}
	var out []systemd.UnitStatus
	for name, u := range f.Units {
		match := len(patterns) == 0
		for _, p := range patterns {
			if ok, _ := path.Match(p, name); ok {
				match = true
			}
		}
		if match {
			out = append(out, systemd.UnitStatus{Name: name, LoadState: "loaded", ActiveState: u.ActiveState})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *Fake) Ping(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record("ping")
}

func (f *Fake) Close() {}
