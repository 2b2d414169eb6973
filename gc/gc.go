// Package gc runs podunit's garbage collectors: at start, periodically, and
// on demand (podunit gc). A collector finds what podunit created and no
// longer owns — units, mounts, namespace pins, CNI allocations, storage
// containers — and removes it. Ownership is always decided by the caller's
// "is this still known" function, so a collector never guesses.
package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector removes one kind of leftover.
type Collector interface {
	Name() string
	// Collect removes (or with dryRun only reports) leftovers and returns
	// a description of each one.
	Collect(ctx context.Context, dryRun bool) ([]string, error)
}

// Result is what one collector did in one run.
type Result struct {
	Collector string   `json:"collector"`
	Removed   []string `json:"removed"`
	Error     string   `json:"error,omitempty"`
}

var removed = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "podunit", Subsystem: "gc", Name: "removed_total",
	Help: "Leftovers removed by the garbage collectors, by collector.",
}, []string{"collector"})

var runErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "podunit", Subsystem: "gc", Name: "errors_total",
	Help: "Garbage collector runs that failed, by collector.",
}, []string{"collector"})

// Collectors returns the package's metrics for registration.
func Collectors() []prometheus.Collector { return []prometheus.Collector{removed, runErrors} }

// Runner runs a fixed set of collectors, one run at a time.
type Runner struct {
	mu         sync.Mutex
	collectors []Collector
	log        *slog.Logger
}

// NewRunner returns a runner over collectors, run in the given order
// (units before mounts: a unit's processes can hold a mount busy).
func NewRunner(log *slog.Logger, collectors ...Collector) *Runner {
	if log == nil {
		log = slog.Default()
	}
	return &Runner{collectors: collectors, log: log}
}

// Run runs every collector once. A failing collector does not stop the
// others; the joined error names each failure.
func (r *Runner) Run(ctx context.Context, dryRun bool) ([]Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	out := make([]Result, 0, len(r.collectors))
	for _, c := range r.collectors {
		items, err := c.Collect(ctx, dryRun)
		sort.Strings(items)
		res := Result{Collector: c.Name(), Removed: items}
		if err != nil {
			res.Error = err.Error()
			errs = append(errs, fmt.Errorf("gc %s: %w", c.Name(), err))
			runErrors.WithLabelValues(c.Name()).Inc()
		}
		if !dryRun && len(items) > 0 {
			removed.WithLabelValues(c.Name()).Add(float64(len(items)))
			r.log.Info("garbage collected", "collector", c.Name(), "removed", items)
		}
		out = append(out, res)
	}
	return out, errors.Join(errs...)
}

// Loop runs the collectors every interval until ctx ends; interval 0 never.
func (r *Runner) Loop(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := r.Run(ctx, false); err != nil {
				r.log.Warn("garbage collection incomplete", "err", err)
			}
		}
	}
}

// Func adapts a function to a Collector.
type Func struct {
	N string
	F func(ctx context.Context, dryRun bool) ([]string, error)
}

func (f Func) Name() string { return f.N }
func (f Func) Collect(ctx context.Context, dryRun bool) ([]string, error) {
	return f.F(ctx, dryRun)
}
