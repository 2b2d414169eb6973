package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// dbusHistogram is podunit's podunit_dbus_call_duration_seconds histogram
// as scraped: op -> upper bound (s) -> cumulative count. Only podunit
// exports it; for containerd the scale figure has no such row.
type dbusHistogram map[string]map[float64]float64

const dbusMetric = "podunit_dbus_call_duration_seconds"

// scrapeDBus reads the histogram from podunit's metrics endpoint.
func scrapeDBus(url string) (dbusHistogram, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseDBusHistogram(resp.Body)
}

// parseDBusHistogram reads the histogram's buckets from the Prometheus
// text format (expfmt's parser), by its "op" label.
func parseDBusHistogram(r io.Reader) (dbusHistogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	h := dbusHistogram{}
	for _, m := range fams[dbusMetric].GetMetric() {
		op := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "op" {
				op = l.GetValue()
			}
		}
		b := map[float64]float64{} // le="+Inf" is a bucket of its own here
		for _, bk := range m.GetHistogram().GetBucket() {
			b[bk.GetUpperBound()] = float64(bk.GetCumulativeCount())
		}
		h[op] = b
	}
	return h, nil
}

// DBusLatency is the D-Bus calls podunit made to systemd in a span: per
// operation kind and over all, the count and the p50/p99 as the upper
// bound of the histogram bucket holding them (ms; +Inf when past the last).
type DBusLatency struct {
	Op       string
	Calls    int
	P50, P99 float64
}

// dbusLatencies subtracts before from after and reads the percentiles,
// busiest operation first, "all" last.
func dbusLatencies(before, after dbusHistogram) []DBusLatency {
	all := map[float64]float64{}
	var out []DBusLatency
	for op, b := range after {
		d := map[float64]float64{}
		for le, n := range b {
			d[le] = n - before[op][le]
			all[le] += d[le]
		}
		if l := latencyOf(op, d); l.Calls > 0 {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Calls > out[j].Calls || out[i].Calls == out[j].Calls && out[i].Op < out[j].Op
	})
	if l := latencyOf("all", all); l.Calls > 0 {
		out = append(out, l)
	}
	return out
}

func latencyOf(op string, cum map[float64]float64) DBusLatency {
	bounds := make([]float64, 0, len(cum))
	for le := range cum {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	l := DBusLatency{Op: op}
	if len(bounds) == 0 {
		return l
	}
	total := cum[bounds[len(bounds)-1]] // le="+Inf" holds every call
	l.Calls = int(total)
	at := func(q float64) float64 {
		for _, le := range bounds {
			if cum[le] >= math.Ceil(q*total) {
				return le * 1000
			}
		}
		return math.Inf(1)
	}
	if total > 0 {
		l.P50, l.P99 = at(0.50), at(0.99)
	}
	return l
}
