// Package ocitest provides a fake oci.Runtime for unit tests of packages that
// drive containers: it records every call and keeps an in-memory state table
// that follows the runtimes' rules (kill needs a running container, delete of
// an unknown one succeeds).
package ocitest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
)

// Call is one recorded method call.
type Call struct {
	Method  string // "Exec", "Kill", "Delete", "Update", "State", "List"
	ID      string
	Signal  syscall.Signal
	All     bool
	Force   bool
	Process *oci.ExecProcess
	// Resources is what Update was given.
	Resources *specs.LinuxResources
}

// Fake is an in-memory oci.Runtime. The zero value is not usable; use New.
type Fake struct {
	name string

	mu     sync.Mutex
	calls  []Call
	states map[string]oci.State
	errs   map[string]error

	// Feats is what Features returns.
	Feats oci.Features

	// ExecFunc scripts Exec; nil makes every exec exit 0 silently.
	ExecFunc func(ctx context.Context, id string, p oci.ExecProcess) (int, error)
}

var _ oci.Runtime = (*Fake)(nil)

// New returns a fake runtime with handler name name.
func New(name string) *Fake {
	return &Fake{name: name, states: map[string]oci.State{}, errs: map[string]error{}}
}

// Name implements oci.Runtime.
func (f *Fake) Name() string { return f.name }

// RunArgv implements oci.Runtime; the argv names the fake so unit tests can
// assert on it.
func (f *Fake) RunArgv(id, bundle, pidFile string) []string {
	return []string{"/fake/" + f.name, "run", "--detach", "--pid-file", pidFile, "--bundle", bundle, id}
}

// ConsoleRunArgv implements oci.Runtime.
func (f *Fake) ConsoleRunArgv(id, bundle, pidFile, consoleSocket string) []string {
	return []string{"/fake/" + f.name, "run", "--detach", "--pid-file", pidFile, "--console-socket", consoleSocket, "--bundle", bundle, id}
}

// SetState adds or replaces a container, e.g. to simulate what the unit's
// ExecStart did.
func (f *Fake) SetState(s oci.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Created.IsZero() {
		s.Created = time.Now()
	}
	f.states[s.ID] = s
}

// SetError makes every later call of method fail with err (nil clears it).
func (f *Fake) SetError(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.errs, method)
		return
	}
	f.errs[method] = err
}

// Calls returns the recorded calls, optionally only those of one method.
func (f *Fake) Calls(method string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	if method == "" {
		return slices.Clone(f.calls)
	}
	var out []Call
	for _, c := range f.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

func (f *Fake) record(c Call) error {
	f.calls = append(f.calls, c)
	return f.errs[c.Method]
}

// Exec implements oci.Runtime.
func (f *Fake) Exec(ctx context.Context, id string, p oci.ExecProcess) (int, error) {
	f.mu.Lock()
	err := f.record(Call{Method: "Exec", ID: id, Process: &p})
	s, ok := f.states[id]
	fn := f.ExecFunc
	f.mu.Unlock()
	switch {
	case err != nil:
		return -1, err
	case !ok:
		return -1, fmt.Errorf("fake exec %s: %w", id, errdefs.ErrNotFound)
	case s.Status != oci.StatusRunning:
		return -1, fmt.Errorf("fake exec %s: %w: container not running", id, errdefs.ErrPrecondition)
	case fn != nil:
		return fn(ctx, id, p)
	}
	return 0, nil
}

// Kill implements oci.Runtime: a terminating signal stops the container.
func (f *Fake) Kill(_ context.Context, id string, sig syscall.Signal, all bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(Call{Method: "Kill", ID: id, Signal: sig, All: all}); err != nil {
		return err
	}
	s, ok := f.states[id]
	if !ok {
		return fmt.Errorf("fake kill %s: %w", id, errdefs.ErrNotFound)
	}
	if s.Status != oci.StatusRunning && s.Status != oci.StatusCreated {
		return fmt.Errorf("fake kill %s: %w: container not running", id, errdefs.ErrPrecondition)
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		s.Status, s.Pid = oci.StatusStopped, 0
		f.states[id] = s
	}
	return nil
}

// Delete implements oci.Runtime.
func (f *Fake) Delete(_ context.Context, id string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(Call{Method: "Delete", ID: id, Force: force}); err != nil {
		return err
	}
	s, ok := f.states[id]
	if !ok {
		return nil
	}
	if s.Status == oci.StatusRunning && !force {
		return fmt.Errorf("fake delete %s: %w: container is running", id, errdefs.ErrPrecondition)
	}
	delete(f.states, id)
	return nil
}

// Update implements oci.Runtime; it only records the call.
// OwnCgroup implements oci.Runtime: the fake plays runc.
func (f *Fake) OwnCgroup() bool { return true }

func (f *Fake) Update(_ context.Context, id string, r *specs.LinuxResources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record(Call{Method: "Update", ID: id, Resources: r})
}

// State implements oci.Runtime.
func (f *Fake) State(_ context.Context, id string) (*oci.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(Call{Method: "State", ID: id}); err != nil {
		return nil, err
	}
	s, ok := f.states[id]
	if !ok {
		return nil, fmt.Errorf("fake state %s: %w", id, errdefs.ErrNotFound)
	}
	s.Annotations = maps.Clone(s.Annotations)
	return &s, nil
}

// List implements oci.Runtime, sorted by ID.
func (f *Fake) List(context.Context) ([]oci.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(Call{Method: "List"}); err != nil {
		return nil, err
	}
	out := slices.Collect(maps.Values(f.states))
	slices.SortFunc(out, func(a, b oci.State) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out, nil
}

// Features implements oci.Runtime.
func (f *Fake) Features(context.Context) (*oci.Features, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(Call{Method: "Features"}); err != nil {
		return nil, err
	}
	feats := f.Feats
	return &feats, nil
}
