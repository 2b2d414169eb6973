// Package systemd is podunit's only door to systemd: transient units and
// slices over D-Bus, with a deadline on every call and typed job results.
package systemd

import (
	"context"
	"errors"
	"fmt"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/podunit/podunit/errdefs"
)

// Property is a unit property as sent to StartTransientUnit / SetUnitProperties.
type Property = sd.Property

// UnitStatus is one row of ListUnits.
type UnitStatus = sd.UnitStatus

// Conn is the part of systemd's manager API podunit uses. The D-Bus adapter
// (New) and the in-memory Fake implement it.
type Conn interface {
	// StartTransientUnit creates and starts a transient unit and waits for
	// its start job, up to ctx's deadline. A unit of that name left over in failed state is reset
	// and the start retried once; a live one gives ErrExists.
	StartTransientUnit(ctx context.Context, name string, props []Property) error
	// StopUnit stops a unit and waits for the job, up to ctx's deadline
	// (a grace period may be longer than a D-Bus call's bound); a unit that
	// does not exist is already stopped, so it returns nil.
	StopUnit(ctx context.Context, name string) error
	// KillUnit sends sig to all processes of the unit (or only its main
	// process when mainOnly). ErrNotFound if the unit is not loaded.
	KillUnit(ctx context.Context, name string, sig int32, mainOnly bool) error
	// ResetFailedUnit forgets a failed unit; no such unit is not an error.
	ResetFailedUnit(ctx context.Context, name string) error
	// SetUnitProperties changes properties of a live unit (runtime only).
	SetUnitProperties(ctx context.Context, name string, props ...Property) error
	// UnitProperties returns the properties of a unit: those of the Unit
	// interface for iface "Unit", otherwise of every interface (Unit and
	// Service/Slice...). With names, only those (and LoadState): each is
	// read on its own, all at once, rather than every property of the
	// unit (see DBus.UnitProperties). ErrNotFound if the unit is not
	// loaded.
	UnitProperties(ctx context.Context, name, iface string, names ...string) (map[string]any, error)
	// FreezeUnit freezes every process of a unit (a slice: of the units
	// below it) through the cgroup freezer and returns once systemd
	// reports the unit frozen. ErrPrecondition where systemd cannot
	// freeze (cgroup v1, an inactive unit, a freezer operation already
	// under way), ErrNotFound if the unit is not loaded.
	FreezeUnit(ctx context.Context, name string) error
	// ThawUnit undoes FreezeUnit; a unit that is not frozen is thawed
	// already, so it returns nil. ErrNotFound if the unit is not loaded.
	ThawUnit(ctx context.Context, name string) error
	// ListUnits returns loaded units whose names match the glob patterns.
	ListUnits(ctx context.Context, patterns ...string) ([]UnitStatus, error)
	// Ping checks that systemd answers on the bus.
	Ping(ctx context.Context) error
	Close()
}

// JobResult is the outcome of a systemd job, as in JobRemoved's result.
type JobResult string

const (
	JobDone       JobResult = "done"
	JobCanceled   JobResult = "canceled"
	JobTimeout    JobResult = "timeout"
	JobFailed     JobResult = "failed"
	JobDependency JobResult = "dependency"
	JobSkipped    JobResult = "skipped"
)

// JobError reports a job that did not end in "done".
type JobError struct {
	Unit   string
	Job    string // "start", "stop"
	Result JobResult
}

func (e *JobError) Error() string {
	return fmt.Sprintf("systemd %s job for %s finished with result %q", e.Job, e.Unit, e.Result)
}

// Unwrap lets callers treat a failed start as a precondition failure.
func (e *JobError) Unwrap() error { return errdefs.ErrPrecondition }

// IsJobError reports whether err is a systemd job that did not complete.
func IsJobError(err error) bool {
	var je *JobError
	return errors.As(err, &je)
}
