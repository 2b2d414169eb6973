// Package metrics serves podunit's Prometheus metrics on a loopback HTTP
// endpoint. It is off unless [metrics] address is set.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/logrelay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options build the registry.
type Options struct {
	// Collectors are the packages' own metrics (systemd.Collectors(),
	// systemd.WatcherCollectors(), cri.Collectors(), events.Collectors()).
	Collectors []prometheus.Collector
	// ContainersByState reports how many containers are in each CRI state
	// ("CONTAINER_RUNNING", ...) at scrape time; nil omits the metric.
	ContainersByState func() map[string]int
	// EventSubscribers reports live GetContainerEvents subscriptions
	// (events.Hub.Subscribers); nil omits the metric.
	EventSubscribers func() int
	// LogRelayStats asks the node's log relay for its CRI log file figures
	// (logrelay.Client.Stats); nil omits the metrics.
	LogRelayStats func() (logrelay.Stats, error)
}

// relayCollector asks the relay at scrape time: it is another process,
// and its figures (a full /var/log/pods) matter most when nothing else
// calls it.
type relayCollector struct {
	up, failing, errs *prometheus.Desc
	fn                func() (logrelay.Stats, error)
}

func newRelayCollector(fn func() (logrelay.Stats, error)) relayCollector {
	return relayCollector{
		up: prometheus.NewDesc("podunit_logrelay_up", "1 when the node's log relay answered this scrape.", nil, nil),
		failing: prometheus.NewDesc("podunit_log_file_failing_streams",
			"Container output streams whose CRI log file cannot be written now (their lines are missing from kubectl logs).", nil, nil),
		errs: prometheus.NewDesc("podunit_log_file_write_errors_total",
			"Failed writes to CRI log files since the relay started, by reason (no_space: ENOSPC or EDQUOT).", []string{"reason"}, nil),
		fn: fn,
	}
}

func (c relayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.failing
	ch <- c.errs
}

func (c relayCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.fn()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(st.FailingStreams))
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(st.NoSpaceErrors), "no_space")
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(st.OtherErrors), "other")
}

// containersCollector asks for the counts at scrape time, so there is no
// gauge to keep in sync with every state change.
type containersCollector struct {
	desc *prometheus.Desc
	fn   func() map[string]int
}

func (c containersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c containersCollector) Collect(ch chan<- prometheus.Metric) {
	for state, n := range c.fn() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}

// NewRegistry returns a registry with the Go runtime and process metrics
// and everything in o.
func NewRegistry(o Options) (*prometheus.Registry, error) {
	r := prometheus.NewRegistry()
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	cs = append(cs, o.Collectors...)
	if o.ContainersByState != nil {
		cs = append(cs, containersCollector{
			desc: prometheus.NewDesc("podunit_containers", "Containers by CRI state.", []string{"state"}, nil),
			fn:   o.ContainersByState,
		})
	}
	if o.EventSubscribers != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "podunit", Subsystem: "events", Name: "subscribers",
			Help: "Live GetContainerEvents subscriptions.",
		}, func() float64 { return float64(o.EventSubscribers()) }))
	}
	if o.LogRelayStats != nil {
		cs = append(cs, newRelayCollector(o.LogRelayStats))
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return r, nil
}

// CheckAddress accepts only loopback listen addresses: the endpoint has no
// authentication, so it must not be reachable from the network.
func CheckAddress(addr string) error {
	if err := config.CheckLoopback(addr); err != nil {
		return fmt.Errorf("metrics address must be loopback (127.0.0.1, [::1], localhost): %v: %w", err, errdefs.ErrInvalid)
	}
	return nil
}

// Server is a running metrics endpoint.
type Server struct {
	lis net.Listener
	srv *http.Server
	err chan error
}

// Start listens on addr (loopback only) and serves /metrics from r.
func Start(addr string, r *prometheus.Registry, log *slog.Logger) (*Server, error) {
	if err := CheckAddress(addr); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          r,
		Timeout:           30 * time.Second,
		EnableOpenMetrics: true,
	}))
	// Profiles share the loopback-only endpoint: benchmarks profile a live
	// daemon without a rebuild.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &Server{lis: lis, err: make(chan error, 1), srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      2 * time.Minute, // 30 s CPU profiles and more
		IdleTimeout:       2 * time.Minute,
	}}
	go func() {
		err := s.srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err <- err
	}()
	log.Info("metrics endpoint serving", "address", lis.Addr().String())
	return s, nil
}

// Stop shuts the endpoint down, waiting for in-flight scrapes until ctx
// ends.
func (s *Server) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.err; err == nil {
		err = serr
	}
	return err
}
