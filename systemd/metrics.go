package systemd

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	callLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "podunit", Subsystem: "dbus", Name: "call_duration_seconds",
		Help:    "Latency of D-Bus calls to systemd by operation kind.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"op"})
	callErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "podunit", Subsystem: "dbus", Name: "call_errors_total",
		Help: "D-Bus calls to systemd that returned an error, by operation kind.",
	}, []string{"op"})
)

// Collectors returns the package's metrics for registration.
func Collectors() []prometheus.Collector { return []prometheus.Collector{callLatency, callErrors} }

func observeCall(op string, d time.Duration, err error) {
	kind := op
	for i, r := range op {
		if r == ' ' {
			kind = op[:i]
			break
		}
	}
	callLatency.WithLabelValues(kind).Observe(d.Seconds())
	if err != nil {
		callErrors.WithLabelValues(kind).Inc()
	}
}
