package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/podunit/podunit/config"
	"golang.org/x/sys/unix"
)

// reloader re-reads the configuration (SIGHUP, `systemctl reload`) and
// applies the keys config.Reconcile marks live to the running daemon. The
// CRI server is never touched, so connections stay up. Which keys are live
// is config's knowledge; what applying one means is the steps'.
type reloader struct {
	// read loads the files as at start, flags included, and validates.
	read    func() (config.Config, error)
	running atomic.Pointer[config.Config]
	level   *slog.LevelVar
	steps   []reloadStep
	notify  func(states ...string)
	log     *slog.Logger

	mu sync.Mutex // one reload at a time; guards steps
}

// setSteps arms the reloader once the services exist; until then a reload
// (over the admin socket, which comes up first) is refused.
func (r *reloader) setSteps(steps []reloadStep) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = steps
}

// reloadStep applies the live keys it owns to a running component. It runs
// when one of keys changed, or on every reload when always is set (the files
// a key names may have changed while the key did not). apply must change
// nothing when it fails; the reload then re-applies the running
// configuration to the steps before it.
type reloadStep struct {
	name   string
	keys   []string
	always bool
	apply  func(ctx context.Context, c config.Config) error
}

// reloadResult is what a reload did, for the log and `podunit reload`.
type reloadResult struct {
	Applied []string `json:"applied,omitempty"` // live keys that changed
	Kept    []string `json:"kept,omitempty"`    // changed keys that need a restart
	Error   string   `json:"error,omitempty"`
}

func newReloader(cfg *config.Config, read func() (config.Config, error), level *slog.LevelVar, log *slog.Logger) *reloader {
	r := &reloader{read: read, level: level, log: log}
	r.notify = func(states ...string) { notify(log, states...) }
	r.running.Store(cfg)
	return r
}

// current is the configuration in force: Status verbose reports it.
func (r *reloader) current() *config.Config { return r.running.Load() }

// reload applies the configuration files as they are now, or nothing: a file
// that does not parse or validate, or a step that fails, leaves the running
// configuration entirely in place.
func (r *reloader) reload(ctx context.Context) (res reloadResult, retErr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// systemd shows the unit as reloading until READY=1; MONOTONIC_USEC is
	// what Type=notify-reload (systemd 253+) requires with RELOADING=1.
	r.notify(daemon.SdNotifyReloading, "MONOTONIC_USEC="+strconv.FormatInt(monotonicUsec(), 10), "STATUS=reloading configuration")
	defer func() {
		status := "STATUS=serving CRI; configuration reloaded"
		if retErr != nil {
			// one line: a newline would end the STATUS= assignment
			status = "STATUS=serving CRI; last reload refused: " + strings.ReplaceAll(retErr.Error(), "\n", " ")
			res.Error = retErr.Error()
			r.log.Error("configuration reload refused; the running configuration is kept", "err", retErr)
		}
		r.notify(daemon.SdNotifyReady, status)
	}()

	if r.steps == nil {
		return res, errors.New("podunit is still starting")
	}
	loaded, err := r.read()
	if err != nil {
		return res, err
	}
	old := r.running.Load()
	next, live, restart := config.Reconcile(*old, loaded)
	if err := next.Validate(); err != nil {
		// loaded was valid; only the mix with kept keys can fail here
		return res, fmt.Errorf("with the keys that need a restart kept: %w", err)
	}
	res.Applied, res.Kept = live, restart
	if len(restart) > 0 {
		r.log.Warn("changed configuration keys need a restart; their running values are kept", "keys", restart)
	}
	var done []reloadStep
	for _, st := range r.steps {
		if !st.always && !slices.ContainsFunc(st.keys, func(k string) bool { return slices.Contains(live, k) }) {
			continue
		}
		if err := st.apply(ctx, next); err != nil {
			r.undo(ctx, done, *old)
			return res, fmt.Errorf("%s: %w", st.name, err)
		}
		done = append(done, st)
	}
	r.level.Set(logLevel(next.Server.LogLevel))
	r.running.Store(&next)
	r.log.Info("configuration reloaded", "applied", live, "kept_until_restart", restart)
	return res, nil
}

// undo puts the running configuration back into the steps already applied.
// They took it before, so only a vanished resource (a metrics port taken
// meanwhile) can fail, and that is logged: the reload is refused either way.
func (r *reloader) undo(ctx context.Context, done []reloadStep, old config.Config) {
	for i := len(done) - 1; i >= 0; i-- {
		if err := done[i].apply(ctx, old); err != nil {
			r.log.Error("restoring the running configuration after a refused reload failed", "step", done[i].name, "err", err)
		}
	}
}

// reloadOnSignal reloads on every SIGHUP until ctx ends. A reload started by
// a signal has no one to answer to but the log.
func (r *reloader) reloadOnSignal(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, _ = r.reload(rctx)
			cancel()
		}
	}
}

func logLevel(s string) slog.Level {
	var l slog.Level
	// Validate admitted only names UnmarshalText knows.
	_ = l.UnmarshalText([]byte(s))
	return l
}

func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano() / 1000
}
