package main

import (
	"math"
	"strings"
	"testing"
)

func TestDBusLatencies(t *testing.T) {
	parse := func(s string) dbusHistogram {
		h, err := parseDBusHistogram(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := parse(`# HELP podunit_dbus_call_duration_seconds Latency
# TYPE podunit_dbus_call_duration_seconds histogram
podunit_dbus_call_duration_seconds_bucket{op="start",le="0.001"} 1
podunit_dbus_call_duration_seconds_bucket{op="start",le="0.002"} 1
podunit_dbus_call_duration_seconds_bucket{op="start",le="+Inf"} 1
podunit_dbus_call_duration_seconds_sum{op="start"} 0.0005
`)
	// 100 more starts: 98 under 1 ms, 1 under 2 ms, 1 past the last bound;
	// 10 stops, all under 2 ms.
	after := parse(`# TYPE podunit_dbus_call_duration_seconds histogram
podunit_dbus_call_duration_seconds_bucket{op="start",le="0.001"} 99
podunit_dbus_call_duration_seconds_bucket{op="start",le="0.002"} 100
podunit_dbus_call_duration_seconds_bucket{op="start",le="+Inf"} 101
podunit_dbus_call_duration_seconds_bucket{op="stop",le="0.001"} 0
podunit_dbus_call_duration_seconds_bucket{op="stop",le="0.002"} 10
podunit_dbus_call_duration_seconds_bucket{op="stop",le="+Inf"} 10
`)
	got := dbusLatencies(before, after)
	if len(got) != 3 || got[0].Op != "start" || got[1].Op != "stop" || got[2].Op != "all" {
		t.Fatalf("%+v", got)
	}
	if s := got[0]; s.Calls != 100 || s.P50 != 1 || s.P99 != 2 {
		t.Errorf("start %+v", s) // the 99th of 100 is the one under 2 ms
	}
	if s := got[1]; s.Calls != 10 || s.P50 != 2 || s.P99 != 2 {
		t.Errorf("stop %+v", s)
	}
	if a := got[2]; a.Calls != 110 || a.P50 != 1 || a.P99 != 2 {
		t.Errorf("all %+v", a)
	}
	// past the last finite bound
	slow := parse(`# TYPE podunit_dbus_call_duration_seconds histogram
podunit_dbus_call_duration_seconds_bucket{op="x",le="0.001"} 0
podunit_dbus_call_duration_seconds_bucket{op="x",le="+Inf"} 5
`)
	if l := dbusLatencies(dbusHistogram{}, slow)[0]; !math.IsInf(l.P99, 1) {
		t.Errorf("p99 past the last bound = %v", l.P99)
	}
	if _, err := parseDBusHistogram(strings.NewReader(`# TYPE podunit_dbus_call_duration_seconds histogram
podunit_dbus_call_duration_seconds_bucket{op="x",le="abc"} 1`)); err == nil {
		t.Error("a bad bound was accepted")
	}
}
