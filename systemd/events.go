package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	godbus "github.com/godbus/dbus/v5"
	"github.com/podunit/podunit/errdefs"
	"github.com/prometheus/client_golang/prometheus"
)

// Unit state changes come from one subscription on a connection of the
// watcher's own: PropertiesChanged of unit objects, JobRemoved, UnitRemoved
// and Reloading. go-systemd's SubState subscriber polls and drops; here the
// godbus connection uses the sequential signal handler (ordered, never
// blocks the bus reader) and the watcher's own bounded queue turns overflow
// into a Resync event instead of losing anything silently.

const (
	sdDest      = "org.freedesktop.systemd1"
	sdPath      = godbus.ObjectPath("/org/freedesktop/systemd1")
	sdManager   = "org.freedesktop.systemd1.Manager"
	sdUnitIface = "org.freedesktop.systemd1.Unit"
	sdSvcIface  = "org.freedesktop.systemd1.Service"
	propsIface  = "org.freedesktop.DBus.Properties"
	unitPathNS  = "/org/freedesktop/systemd1/unit"
)

// UnitEventKind says what a UnitEvent reports.
type UnitEventKind int

const (
	// UnitChanged: a tracked property of the unit changed; State holds
	// everything known about the unit so far.
	UnitChanged UnitEventKind = iota + 1
	// UnitJobRemoved: a job for the unit finished with JobResult.
	UnitJobRemoved
	// UnitRemoved: systemd unloaded the unit (collected after stop).
	UnitRemoved
	// Resync: events may have been missed (first subscription, reconnect
	// after the bus went away, queue overflow, systemd reload). Consumers
	// re-read the state of the units they care about.
	Resync
)

// UnitState is the part of a unit's state podunit follows.
type UnitState struct {
	ActiveState string // active, reloading, inactive, failed, activating, deactivating
	SubState    string
	// Result is the service result: success, exit-code, signal,
	// core-dump, timeout, oom-kill (v2 only), ...
	Result string
	// ExecMainCode is the si_code of the main process exit (1 exited,
	// 2 killed, 3 dumped), ExecMainStatus its status or signal; valid
	// when HaveExecMain.
	ExecMainCode   int32
	ExecMainStatus int32
	HaveExecMain   bool
	// ExecMainExitTimestamp is when the main process exited, in
	// microseconds since the epoch (0 while it runs).
	ExecMainExitTimestamp uint64
	MainPID               uint32
}

// Stopped reports whether the unit reached a final state.
func (s UnitState) Stopped() bool { return s.ActiveState == "inactive" || s.ActiveState == "failed" }

// UnitEvent is one observation from the bus.
type UnitEvent struct {
	Kind UnitEventKind
	Unit string
	// State is the merged state known for Unit (UnitChanged only).
	State UnitState
	// Changed names the tracked properties this signal changed.
	Changed []string
	// JobResult is set for UnitJobRemoved.
	JobResult JobResult
	// Reason explains a Resync: "subscribed", "reconnected", "overflow",
	// "reloaded".
	Reason string
	Time   time.Time
}

// WatchOptions configure a Watcher.
type WatchOptions struct {
	// Match selects the units whose events are reported; nil means all.
	Match func(unit string) bool
	// Dial opens a private bus connection whose signals are delivered in
	// order and which lives until ctx ends; nil means the system bus (DBUS_SYSTEM_BUS_ADDRESS is honoured)
	// with godbus' sequential signal handler.
	Dial func(ctx context.Context) (*godbus.Conn, error)
	// Buffer is the event queue length; when it is full, events are
	// replaced by one Resync. Default 4096.
	Buffer int
	// CallTimeout bounds AddMatch and Subscribe calls (systemd.call_timeout);
	// required.
	CallTimeout time.Duration
	// MinBackoff and MaxBackoff pace reconnection attempts.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

var (
	watcherResyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "podunit", Subsystem: "events", Name: "unit_resyncs_total",
		Help: "Resync events emitted by the systemd unit watcher, by reason.",
	}, []string{"reason"})
	watcherDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "podunit", Subsystem: "events", Name: "unit_events_overflowed_total",
		Help: "Unit events replaced by a Resync because the queue was full.",
	})
	watcherConnected = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "podunit", Subsystem: "events", Name: "unit_watcher_connected",
		Help: "1 while the systemd unit watcher holds a subscribed bus connection.",
	})
)

// WatcherCollectors returns the unit watcher's metrics for registration.
func WatcherCollectors() []prometheus.Collector {
	return []prometheus.Collector{watcherResyncs, watcherDropped, watcherConnected}
}

// Watcher follows unit state changes over D-Bus. Run it once; read Events.
type Watcher struct {
	opts WatchOptions
	out  chan UnitEvent
	log  *slog.Logger

	// owned by Run's goroutine
	overflow bool
	units    map[string]*UnitState
}

// NewWatcher prepares a watcher; nothing happens until Run.
func NewWatcher(opts WatchOptions) (*Watcher, error) {
	if opts.CallTimeout <= 0 {
		return nil, fmt.Errorf("unit watcher: CallTimeout is required: %w", errdefs.ErrInvalid)
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 4096
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Dial == nil {
		opts.Dial = dialSystemBus
	}
	return &Watcher{opts: opts, out: make(chan UnitEvent, opts.Buffer), log: opts.Logger, units: map[string]*UnitState{}}, nil
}

func dialSystemBus(ctx context.Context) (*godbus.Conn, error) {
	return godbus.ConnectSystemBus(godbus.WithSignalHandler(godbus.NewSequentialSignalHandler()), godbus.WithContext(ctx))
}

// Events is the watcher's output. It is closed when Run returns.
func (w *Watcher) Events() <-chan UnitEvent { return w.out }

func (w *Watcher) setConnected(v bool) {
	if v {
		watcherConnected.Set(1)
	} else {
		watcherConnected.Set(0)
	}
}

// Run subscribes and follows the bus until ctx ends, reconnecting with
// backoff whenever the connection is lost. Every successful subscription is
// announced by a Resync, so a consumer that re-reads state on Resync never
// misses a change that happened while no subscription existed.
func (w *Watcher) Run(ctx context.Context) error {
	defer close(w.out)
	defer w.setConnected(false)
	backoff := w.opts.MinBackoff
	first := true
	for {
		conn, sigs, err := w.subscribe(ctx)
		if err == nil {
			since := time.Now()
			w.setConnected(true)
			reason := "reconnected"
			if first {
				reason = "subscribed"
			}
			first = false
			w.units = map[string]*UnitState{}
			w.resync(reason)
			err = w.follow(ctx, conn, sigs)
			w.setConnected(false)
			conn.Close()
			// Only a subscription that held for a while proves the bus is
			// healthy again; one that dies at once keeps backing off.
			if time.Since(since) > w.opts.MaxBackoff {
				backoff = w.opts.MinBackoff
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		w.log.Warn("systemd unit watcher lost its subscription, reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, w.opts.MaxBackoff)
	}
}

func (w *Watcher) subscribe(ctx context.Context) (*godbus.Conn, chan *godbus.Signal, error) {
	// The connection lives as long as Run's context; only the setup calls
	// are bounded.
	conn, err := w.opts.Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the system bus: %v: %w", err, errdefs.ErrUnavailable)
	}
	// The channel only moves signals from godbus' unbounded ordered queue
	// to follow; its size does not matter for correctness.
	cctx, cancel := context.WithTimeout(ctx, w.opts.CallTimeout)
	defer cancel()
	sigs := make(chan *godbus.Signal, 256)
	conn.Signal(sigs)
	matches := [][]godbus.MatchOption{
		{godbus.WithMatchInterface(propsIface), godbus.WithMatchMember("PropertiesChanged"), godbus.WithMatchPathNamespace(unitPathNS)},
		{godbus.WithMatchInterface(sdManager), godbus.WithMatchMember("JobRemoved"), godbus.WithMatchObjectPath(sdPath)},
		{godbus.WithMatchInterface(sdManager), godbus.WithMatchMember("UnitRemoved"), godbus.WithMatchObjectPath(sdPath)},
		{godbus.WithMatchInterface(sdManager), godbus.WithMatchMember("Reloading"), godbus.WithMatchObjectPath(sdPath)},
	}
	for _, m := range matches {
		if err := conn.AddMatchSignalContext(cctx, m...); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("add match rule: %v: %w", err, errdefs.ErrUnavailable)
		}
	}
	// Without Subscribe systemd does not send unit signals to the bus.
	if call := conn.Object(sdDest, sdPath).CallWithContext(cctx, sdManager+".Subscribe", 0); call.Err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("systemd Subscribe: %v: %w", call.Err, errdefs.ErrUnavailable)
	}
	return conn, sigs, nil
}

func (w *Watcher) follow(ctx context.Context, conn *godbus.Conn, sigs chan *godbus.Signal) error {
	for {
		var (
			pending chan UnitEvent
			resync  UnitEvent
		)
		if w.overflow {
			pending = w.out
			resync = UnitEvent{Kind: Resync, Reason: "overflow", Time: time.Now()}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-conn.Context().Done():
			return fmt.Errorf("bus connection closed: %w", errdefs.ErrUnavailable)
		case pending <- resync:
			w.overflow = false
			watcherResyncs.WithLabelValues("overflow").Inc()
		case s, ok := <-sigs:
			if !ok {
				return fmt.Errorf("bus connection closed: %w", errdefs.ErrUnavailable)
			}
			w.handle(s)
		}
	}
}

func (w *Watcher) resync(reason string) {
	watcherResyncs.WithLabelValues(reason).Inc()
	w.emit(UnitEvent{Kind: Resync, Reason: reason, Time: time.Now()})
}

// emit queues ev without ever blocking the bus: once the queue is full,
// everything is dropped until one Resync fits (follow retries it).
func (w *Watcher) emit(ev UnitEvent) {
	if w.overflow {
		watcherDropped.Inc()
		return
	}
	select {
	case w.out <- ev:
	default:
		w.overflow = true
		watcherDropped.Inc()
	}
}

func (w *Watcher) match(unit string) bool { return w.opts.Match == nil || w.opts.Match(unit) }

func (w *Watcher) handle(s *godbus.Signal) {
	now := time.Now()
	switch s.Name {
	case propsIface + ".PropertiesChanged":
		unit, err := UnitNameFromPath(string(s.Path))
		if err != nil || !w.match(unit) {
			return
		}
		st := w.units[unit]
		if st == nil {
			st = &UnitState{}
		}
		changed, err := ApplyPropertiesChanged(st, s.Body)
		if err != nil {
			w.log.Debug("undecodable PropertiesChanged", "unit", unit, "err", err)
			return
		}
		if len(changed) == 0 {
			return
		}
		w.units[unit] = st
		w.emit(UnitEvent{Kind: UnitChanged, Unit: unit, State: *st, Changed: changed, Time: now})
	case sdManager + ".JobRemoved":
		// (u id, o job, s unit, s result)
		if len(s.Body) != 4 {
			return
		}
		unit, _ := s.Body[2].(string)
		result, _ := s.Body[3].(string)
		if unit == "" || !w.match(unit) {
			return
		}
		w.emit(UnitEvent{Kind: UnitJobRemoved, Unit: unit, JobResult: JobResult(result), Time: now})
	case sdManager + ".UnitRemoved":
		if len(s.Body) != 2 {
			return
		}
		unit, _ := s.Body[0].(string)
		if unit == "" || !w.match(unit) {
			return
		}
		delete(w.units, unit)
		w.emit(UnitEvent{Kind: UnitRemoved, Unit: unit, Time: now})
	case sdManager + ".Reloading":
		// After a daemon-reload or re-exec systemd may have changed units
		// without telling every subscriber: start over.
		if len(s.Body) == 1 {
			if active, ok := s.Body[0].(bool); ok && !active {
				w.units = map[string]*UnitState{}
				w.resync("reloaded")
			}
		}
	}
}

// ApplyPropertiesChanged merges the body of a PropertiesChanged signal
// (s interface, a{sv} changed, as invalidated) into st and returns the
// names of tracked properties it changed.
func ApplyPropertiesChanged(st *UnitState, body []any) ([]string, error) {
	if len(body) != 3 {
		return nil, fmt.Errorf("PropertiesChanged body has %d fields: %w", len(body), errdefs.ErrInvalid)
	}
	iface, ok1 := body[0].(string)
	props, ok2 := body[1].(map[string]godbus.Variant)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("PropertiesChanged body types %T, %T: %w", body[0], body[1], errdefs.ErrInvalid)
	}
	var changed []string
	setStr := func(name string, dst *string) {
		if v, ok := props[name]; ok {
			if s, ok := v.Value().(string); ok && s != *dst {
				*dst = s
				changed = append(changed, name)
			}
		}
	}
	switch iface {
	case sdUnitIface:
		setStr("ActiveState", &st.ActiveState)
		setStr("SubState", &st.SubState)
	case sdSvcIface:
		setStr("Result", &st.Result)
		if v, ok := props["ExecMainCode"]; ok {
			if n, ok := v.Value().(int32); ok && (n != st.ExecMainCode || !st.HaveExecMain) {
				st.ExecMainCode, st.HaveExecMain = n, true
				changed = append(changed, "ExecMainCode")
			}
		}
		if v, ok := props["ExecMainStatus"]; ok {
			if n, ok := v.Value().(int32); ok && (n != st.ExecMainStatus || !st.HaveExecMain) {
				st.ExecMainStatus, st.HaveExecMain = n, true
				changed = append(changed, "ExecMainStatus")
			}
		}
		if v, ok := props["ExecMainExitTimestamp"]; ok {
			if n, ok := v.Value().(uint64); ok && n != st.ExecMainExitTimestamp {
				st.ExecMainExitTimestamp = n
				changed = append(changed, "ExecMainExitTimestamp")
			}
		}
		if v, ok := props["MainPID"]; ok {
			if n, ok := v.Value().(uint32); ok && n != st.MainPID {
				st.MainPID = n
				changed = append(changed, "MainPID")
			}
		}
	}
	return changed, nil
}

// UnitNameFromPath decodes a unit object path
// (/org/freedesktop/systemd1/unit/podunit_2dc1_2eservice) into the unit
// name, undoing systemd's bus path escaping (_XX for every byte that is not
// an ASCII letter or digit).
func UnitNameFromPath(p string) (string, error) {
	esc, ok := strings.CutPrefix(p, unitPathNS+"/")
	if !ok || esc == "" || strings.Contains(esc, "/") {
		return "", fmt.Errorf("%q is not a unit object path: %w", p, errdefs.ErrInvalid)
	}
	return unescapeBusPath(esc)
}

func unescapeBusPath(s string) (string, error) {
	if s == "_" {
		return "", nil // systemd's encoding of the empty string
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape in %q: %w", s, errdefs.ErrInvalid)
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape in %q: %w", s, errdefs.ErrInvalid)
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}
