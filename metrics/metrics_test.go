package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/cri"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/systemd"
)

func TestCheckAddress(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:9090", "[::1]:0", "localhost:9100", "127.0.0.53:1"} {
		if err := CheckAddress(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:9090", ":9090", "10.0.0.1:80", "example.com:80", "127.0.0.1", ""} {
		if err := CheckAddress(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q accepted: %v", bad, err)
		}
	}
}

func TestEndpointServesEverything(t *testing.T) {
	hub := events.NewHub(events.HubOptions{})
	sub := hub.Subscribe()
	defer sub.Close()
	all := append(append(append(systemd.Collectors(), systemd.WatcherCollectors()...), cri.Collectors()...), events.Collectors()...)
	r, err := NewRegistry(Options{
		Collectors:        all,
		ContainersByState: func() map[string]int { return map[string]int{"CONTAINER_RUNNING": 3, "CONTAINER_EXITED": 1} },
		EventSubscribers:  hub.Subscribers,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start("0.0.0.0:0", r, nil); err == nil {
		t.Fatal("non-loopback address served")
	}
	s, err := Start("127.0.0.1:0", r, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.lis.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		`podunit_containers{state="CONTAINER_RUNNING"} 3`,
		`podunit_events_subscribers 1`,
		`podunit_events_unit_watcher_connected 0`,
		`go_goroutines`,
		`process_open_fds`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + s.lis.Addr().String() + "/metrics"); err == nil {
		t.Fatal("endpoint still up after Stop")
	}
}

func TestLogRelayMetrics(t *testing.T) {
	var st logrelay.Stats
	var relayErr error
	r, err := NewRegistry(Options{LogRelayStats: func() (logrelay.Stats, error) { return st, relayErr }})
	if err != nil {
		t.Fatal(err)
	}
	gather := func() string {
		var b strings.Builder
		mfs, err := r.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if strings.Contains(mf.GetName(), "log") {
				for _, m := range mf.GetMetric() {
					lbl := ""
					for _, l := range m.GetLabel() {
						lbl += l.GetValue()
					}
					v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
					fmt.Fprintf(&b, "%s{%s} %g\n", mf.GetName(), lbl, v)
				}
			}
		}
		return b.String()
	}
	st = logrelay.Stats{FailingStreams: 2, NoSpaceErrors: 17, OtherErrors: 1}
	got := gather()
	for _, want := range []string{"podunit_logrelay_up{} 1", "podunit_log_file_failing_streams{} 2",
		"podunit_log_file_write_errors_total{no_space} 17", "podunit_log_file_write_errors_total{other} 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	relayErr = errors.New("relay down")
	if got := gather(); got != "podunit_logrelay_up{} 0\n" {
		t.Errorf("relay down: %q, want only up 0", got)
	}
}
