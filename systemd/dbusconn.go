package systemd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/podunit/podunit/errdefs"
)

const (
	errUnitExists = "org.freedesktop.systemd1.UnitExists"
	errNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
	errNotLoaded  = "org.freedesktop.systemd1.LoadFailed"
	// FreezeUnit's refusals (systemd 252 src/core/dbus-unit.c): no
	// cgroup v2 freezer (cgroup v1 hosts, where systemd does not use the
	// v1 freezer controller), a unit that is not active or cannot be
	// frozen, a freezer operation still in progress.
	errNotSupported = "org.freedesktop.DBus.Error.NotSupported"
	errUnitInactive = "org.freedesktop.systemd1.UnitInactive"
	errUnitBusy     = "org.freedesktop.systemd1.UnitBusy"
)

// Options configure the D-Bus adapter.
type Options struct {
	// CallTimeout bounds every D-Bus call whose caller context has no
	// earlier deadline, and a start or stop job's wait when the caller
	// gives no deadline at all (see jobContext).
	CallTimeout time.Duration
	// MaxParallelJobs bounds concurrent start/stop jobs so a burst of CRI
	// calls does not pile up on PID 1.
	MaxParallelJobs int
	Logger          *slog.Logger
	// Dial opens the connection; nil means the system bus
	// (DBUS_SYSTEM_BUS_ADDRESS is honoured by godbus).
	Dial func(ctx context.Context) (*sd.Conn, error)
}

// DBus is the go-systemd backed Conn. It holds one shared connection and
// replaces it when the bus goes away (dbus-daemon restart), on the next call.
type DBus struct {
	opts Options
	jobs chan struct{}

	mu         sync.Mutex
	conn       *sd.Conn
	connCancel context.CancelFunc
}

var _ Conn = (*DBus)(nil)

// New returns a Conn that connects lazily; the first call dials.
// CallTimeout and MaxParallelJobs are required: their defaults are
// systemd.call_timeout and systemd.max_parallel_jobs of package config.
func New(opts Options) (*DBus, error) {
	if opts.CallTimeout <= 0 || opts.MaxParallelJobs <= 0 {
		return nil, fmt.Errorf("systemd: CallTimeout and MaxParallelJobs are required: %w", errdefs.ErrInvalid)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Dial == nil {
		opts.Dial = sd.NewSystemConnectionContext
	}
	return &DBus{opts: opts, jobs: make(chan struct{}, opts.MaxParallelJobs)}, nil
}

func (d *DBus) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.opts.CallTimeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d.opts.CallTimeout)
}

// jobContext bounds a start or stop job's wait: by the caller's deadline
// when it has one, which may be longer than CallTimeout (a stop waits out
// the container's grace period, a start the runtime's start_timeout), else
// by CallTimeout. Each D-Bus call inside stays bounded by CallTimeout.
func (d *DBus) jobContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d.opts.CallTimeout)
}

// get returns a live connection, dialling a new one if the old one died.
func (d *DBus) get(ctx context.Context) (*sd.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil && d.conn.Connected() {
		return d.conn, nil
	}
	if d.conn != nil {
		d.closeLocked()
		d.opts.Logger.Warn("systemd bus connection lost, reconnecting")
	}
	// godbus ties a connection's life to the context it was dialled with,
	// so the connection gets its own context, cancelled only by Close; the
	// caller's context bounds just the dial.
	connCtx, cancel := context.WithCancel(context.Background())
	type dialed struct {
		c   *sd.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := d.opts.Dial(connCtx)
		ch <- dialed{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			cancel()
			return nil, fmt.Errorf("connect to systemd over D-Bus: %v: %w", r.err, errdefs.ErrUnavailable)
		}
		d.conn, d.connCancel = r.c, cancel
		return r.c, nil
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("connect to systemd over D-Bus: %v: %w", ctx.Err(), errdefs.ErrDeadline)
	}
}

func (d *DBus) closeLocked() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	if d.connCancel != nil {
		d.connCancel()
		d.connCancel = nil
	}
}

// call runs fn with a live connection and a bounded context, classifying
// transport errors so callers see ErrUnavailable / ErrDeadline.
func (d *DBus) call(ctx context.Context, op string, fn func(context.Context, *sd.Conn) error) error {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	c, err := d.get(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	err = fn(ctx, c)
	observeCall(op, time.Since(start), err)
	return d.classify(ctx, op, c, err)
}

func (d *DBus) classify(ctx context.Context, op string, c *sd.Conn, err error) error {
	if err == nil {
		return nil
	}
	var de godbus.Error
	if errors.As(err, &de) {
		switch de.Name {
		case errNoSuchUnit, errNotLoaded:
			return fmt.Errorf("%s: %v: %w", op, err, errdefs.ErrNotFound)
		case errUnitExists:
			return fmt.Errorf("%s: %v: %w", op, err, errdefs.ErrExists)
		case errNotSupported, errUnitInactive, errUnitBusy:
			return fmt.Errorf("%s: %v: %w", op, err, errdefs.ErrPrecondition)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if ctx.Err() != nil && !errors.Is(err, errdefs.ErrDeadline) {
		return fmt.Errorf("%s: systemd did not answer: %v: %w", op, err, errdefs.ErrDeadline)
	}
	if !c.Connected() {
		return fmt.Errorf("%s: systemd bus connection lost: %v: %w", op, err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (d *DBus) acquireJob(ctx context.Context) (func(), error) {
	select {
	case d.jobs <- struct{}{}:
		return func() { <-d.jobs }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a free systemd job slot: %v: %w", ctx.Err(), errdefs.ErrDeadline)
	}
}

// waitJob waits for a job result. The channel is buffered by the caller so
// go-systemd's signal dispatcher never blocks on a caller that gave up.
func waitJob(ctx context.Context, ch <-chan string, unit, job string) error {
	select {
	case r := <-ch:
		if JobResult(r) != JobDone {
			return &JobError{Unit: unit, Job: job, Result: JobResult(r)}
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd %s job for %s: %v: %w", job, unit, ctx.Err(), errdefs.ErrDeadline)
	}
}

func (d *DBus) StartTransientUnit(ctx context.Context, name string, props []Property) error {
	ctx, cancel := d.jobContext(ctx)
	defer cancel()
	release, err := d.acquireJob(ctx)
	if err != nil {
		return err
	}
	defer release()
	start := func() error {
		ch := make(chan string, 1)
		err := d.call(ctx, "StartTransientUnit "+name, func(ctx context.Context, c *sd.Conn) error {
			_, err := c.StartTransientUnitContext(ctx, name, "replace", props, ch)
			return err
		})
		if err != nil {
			return err
		}
		return waitJob(ctx, ch, name, "start")
	}
	err = start()
	if errors.Is(err, errdefs.ErrExists) {
		// A leftover failed unit of the same name blocks the name until it
		// is reset; a live one must not be touched.
		if rerr := d.ResetFailedUnit(ctx, name); rerr == nil {
			err = start()
		}
	}
	return err
}

func (d *DBus) StopUnit(ctx context.Context, name string) error {
	ctx, cancel := d.jobContext(ctx)
	defer cancel()
	acquired, err := d.acquireJob(ctx)
	if err != nil {
		return err
	}
	var once sync.Once
	release := func() { once.Do(acquired) }
	defer release()
	ch := make(chan string, 1)
	err = d.call(ctx, "StopUnit "+name, func(ctx context.Context, c *sd.Conn) error {
		_, err := c.StopUnitContext(ctx, name, "replace", ch)
		return err
	})
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// A stop job spends a grace period waiting for the process, which is
	// no work for PID 1: past CallTimeout its job slot goes to the next
	// start or stop, and the wait goes on to the caller's deadline.
	slot := time.NewTimer(d.opts.CallTimeout)
	defer slot.Stop()
	select {
	case r := <-ch:
		ch <- r
	case <-slot.C:
		release()
	case <-ctx.Done():
	}
	return waitJob(ctx, ch, name, "stop")
}

func (d *DBus) KillUnit(ctx context.Context, name string, sig int32, mainOnly bool) error {
	who := sd.All
	if mainOnly {
		who = sd.Main
	}
	return d.call(ctx, "KillUnit "+name, func(ctx context.Context, c *sd.Conn) error {
		return c.KillUnitWithTarget(ctx, name, who, sig)
	})
}

func (d *DBus) ResetFailedUnit(ctx context.Context, name string) error {
	err := d.call(ctx, "ResetFailedUnit "+name, func(ctx context.Context, c *sd.Conn) error {
		return c.ResetFailedUnitContext(ctx, name)
	})
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

func (d *DBus) SetUnitProperties(ctx context.Context, name string, props ...Property) error {
	return d.call(ctx, "SetUnitProperties "+name, func(ctx context.Context, c *sd.Conn) error {
		return c.SetUnitPropertiesContext(ctx, name, true, props...)
	})
}

func (d *DBus) UnitProperties(ctx context.Context, name, iface string, names ...string) (map[string]any, error) {
	var out map[string]any
	err := d.call(ctx, "GetUnitProperties "+name, func(ctx context.Context, c *sd.Conn) error {
		var err error
		switch {
		case len(names) > 0:
			out, err = namedProperties(ctx, c, name, iface, names)
		case iface == "Unit":
			out, err = c.GetUnitPropertiesContext(ctx, name)
		default:
			// All interfaces in one round trip: the type-specific ones
			// lack LoadState, which is how a missing unit shows.
			out, err = c.GetAllPropertiesContext(ctx, name)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// Asking for an unknown unit's properties loads a stub with
	// LoadState=not-found rather than failing; report it as missing.
	if ls, ok := out["LoadState"].(string); ok && ls == "not-found" {
		return nil, fmt.Errorf("unit %s: %w", name, errdefs.ErrNotFound)
	}
	return out, nil
}

// unitInterfaceProps are the properties of the Unit interface that
// callers name; namedProperties reads any other on the unit type's own.
var unitInterfaceProps = map[string]bool{"LoadState": true, "ActiveState": true, "SubState": true, "Id": true}

// namedProperties reads LoadState and names with one Get each, all in
// flight together on the one connection. A GetAll of a service makes
// systemd serialise its few hundred properties (exec, kill and cgroup
// contexts), and godbus decode them, on every verbose ContainerStatus:
// 2.8-3.7 ms p50 in the bench harness, 2.1 ms with the named reads
// (docs/benchmarks.md, issue 20).
func namedProperties(ctx context.Context, c *sd.Conn, unit, iface string, names []string) (map[string]any, error) {
	all := []string{"LoadState"}
	for _, n := range names {
		if n != "LoadState" {
			all = append(all, n)
		}
	}
	vals := make([]any, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, n := range all {
		on := iface
		if on == "" || unitInterfaceProps[n] {
			on = "Unit"
		}
		wg.Go(func() {
			p, err := c.GetUnitTypePropertyContext(ctx, unit, on, n)
			if err != nil {
				errs[i] = fmt.Errorf("property %s.%s: %w", on, n, err)
				return
			}
			vals[i] = p.Value.Value()
		})
	}
	wg.Wait()
	// A not-found stub has no type interface: its Gets fail, and the
	// caller must see the missing unit, not those errors.
	if ls, _ := vals[0].(string); ls == "not-found" {
		return map[string]any{"LoadState": ls}, nil
	}
	for _, err := range errs {
		if err != nil {
			return nil, err // the first, with its D-Bus name for classify
		}
	}
	out := make(map[string]any, len(all))
	for i, n := range all {
		out[n] = vals[i]
	}
	return out, nil
}

// FreezeUnit: systemd answers the call only once the cgroup reports
// frozen (or the freeze failed), so the call's deadline bounds the wait.
func (d *DBus) FreezeUnit(ctx context.Context, name string) error {
	return d.call(ctx, "FreezeUnit "+name, func(ctx context.Context, c *sd.Conn) error {
		return c.FreezeUnit(ctx, name)
	})
}

func (d *DBus) ThawUnit(ctx context.Context, name string) error {
	return d.call(ctx, "ThawUnit "+name, func(ctx context.Context, c *sd.Conn) error {
		return c.ThawUnit(ctx, name)
	})
}

func (d *DBus) ListUnits(ctx context.Context, patterns ...string) ([]UnitStatus, error) {
	var out []UnitStatus
	err := d.call(ctx, "ListUnitsByPatterns", func(ctx context.Context, c *sd.Conn) error {
		var err error
		out, err = c.ListUnitsByPatternsContext(ctx, nil, patterns)
		return err
	})
	return out, err
}

func (d *DBus) Ping(ctx context.Context) error {
	return d.call(ctx, "Ping", func(ctx context.Context, c *sd.Conn) error {
		p, err := c.SystemStateContext(ctx)
		if err != nil {
			return err
		}
		if p == nil {
			return fmt.Errorf("no SystemState")
		}
		return nil
	})
}

func (d *DBus) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeLocked()
}
