//go:build integration

package systemd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/test/harness"
	"golang.org/x/sys/unix"
)

// TestDBusAgainstRealSystemd drives the adapter against a real systemd in
// the harness: job waits, UnitExists handling, stop of a missing unit,
// property reads and reconnect after the bus daemon restarts.
func TestDBusAgainstRealSystemd(t *testing.T) {
	h := harness.Start(t, harness.Options{})
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", h.BusAddress())
	c, err := systemd.New(systemd.Options{CallTimeout: 20 * time.Second, MaxParallelJobs: config.Default().Systemd.MaxParallelJobs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	props := func(cmd ...string) []systemd.Property {
		return []systemd.Property{
			sd.PropDescription("podunit adapter test"),
			sd.PropExecStart(cmd, false),
			{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")},
		}
	}
	// Several calls in a row: the shared connection must outlive each
	// call's context (a connection dialled with a call's context dies
	// with it, and every later job wait then times out).
	for i := 0; i < 3; i++ {
		if err := c.StartTransientUnit(ctx, "podunit-adapter.service", props("/bin/sleep", "300")); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		p, err := c.UnitProperties(ctx, "podunit-adapter.service", "Service")
		if err != nil {
			t.Fatal(err)
		}
		if pid, _ := p["MainPID"].(uint32); pid == 0 {
			t.Fatalf("no MainPID: %v", p["MainPID"])
		}
		// Named reads: those, from the Unit and the Service interface,
		// the same values as in the full answer, and LoadState.
		some, err := c.UnitProperties(ctx, "podunit-adapter.service", "Service", "ActiveState", "SubState", "MainPID", "ExecMainCode")
		if err != nil {
			t.Fatalf("named properties: %v", err)
		}
		if len(some) != 5 || some["LoadState"] != "loaded" || some["ActiveState"] != "active" || some["SubState"] != "running" ||
			some["MainPID"] != p["MainPID"] || some["ExecMainCode"] != p["ExecMainCode"] {
			t.Fatalf("named properties %v; full answer MainPID %v ExecMainCode %v", some, p["MainPID"], p["ExecMainCode"])
		}
		if err := c.StartTransientUnit(ctx, "podunit-adapter.service", props("/bin/true")); !errors.Is(err, errdefs.ErrExists) {
			t.Fatalf("second start of a live unit: %v, want ErrExists", err)
		}
		if err := c.StopUnit(ctx, "podunit-adapter.service"); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
	if err := c.StopUnit(ctx, "podunit-missing.service"); err != nil {
		t.Fatalf("stop of a missing unit: %v", err)
	}
	if _, err := c.UnitProperties(ctx, "podunit-missing.service", "Service"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("properties of a missing unit: %v", err)
	}
	if _, err := c.UnitProperties(ctx, "podunit-missing.service", "Service", "MainPID", "ActiveState"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("named properties of a missing unit: %v", err)
	}
	if err := c.KillUnit(ctx, "podunit-missing.service", 15, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("kill of a missing unit: %v", err)
	}

	// A failed unit kept around (CollectMode=inactive) blocks its name
	// until reset; the adapter resets and retries once.
	failing := []systemd.Property{sd.PropExecStart([]string{"/bin/false"}, false), sd.PropType("oneshot")}
	if err := c.StartTransientUnit(ctx, "podunit-fails.service", failing); !systemd.IsJobError(err) {
		t.Fatalf("failing oneshot: %v, want a JobError", err)
	}
	if err := c.StartTransientUnit(ctx, "podunit-fails.service", props("/bin/sleep", "300")); err != nil {
		t.Fatalf("start over a failed unit: %v", err)
	}
	units, err := c.ListUnits(ctx, "podunit-*.service")
	if err != nil || len(units) != 1 || units[0].Name != "podunit-fails.service" {
		t.Fatalf("list: %v %+v", err, units)
	}

	// dbus-daemon restart: calls fail at most briefly, then the adapter
	// has a new connection.
	if out, err := h.Exec("systemctl", "restart", "dbus.service"); err != nil {
		t.Fatalf("restart dbus: %v %s", err, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := c.StopUnit(ctx, "podunit-fails.service")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect after dbus restart: %v", err)
		}
		if !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, errdefs.ErrDeadline) && !strings.Contains(err.Error(), "closed") {
			t.Logf("during bus restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.UnitProperties(ctx, "podunit-fails.service", "Service"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unit still there after stop: %v", err)
	}
}

// TestDBusFreezeThaw freezes a slice with a service in it through the
// adapter. systemd 252 freezes only on the unified hierarchy: on a v1 or
// hybrid host (the dev hosts' harness) FreezeUnit is refused ("does not
// support freezing"), which the adapter answers as ErrPrecondition and
// which froze nothing; on cgroup v2 (the VM tier) the slice and the unit below
// it report frozen, then running again.
func TestDBusFreezeThaw(t *testing.T) {
	h := harness.Start(t, harness.Options{})
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", h.BusAddress())
	c, err := systemd.New(systemd.Options{CallTimeout: 20 * time.Second, MaxParallelJobs: config.Default().Systemd.MaxParallelJobs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const slice, svc = "podunit-freeze.slice", "podunit-freeze.service"
	if err := c.StartTransientUnit(ctx, slice, []systemd.Property{sd.PropDescription("podunit freeze test")}); err != nil {
		t.Fatal(err)
	}
	defer c.StopUnit(ctx, slice)
	if err := c.StartTransientUnit(ctx, svc, []systemd.Property{
		sd.PropExecStart([]string{"/bin/sleep", "300"}, false), sd.PropSlice(slice),
		{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")},
	}); err != nil {
		t.Fatal(err)
	}
	defer c.StopUnit(ctx, svc)
	freezer := func(unit string) string {
		p, err := c.UnitProperties(ctx, unit, "Unit")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := p["FreezerState"].(string)
		return s
	}
	var fs unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &fs); err != nil {
		t.Fatal(err)
	}
	err = c.FreezeUnit(ctx, slice)
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		// systemd 252 on hybrid: "Unit '...' does not support freezing."
		if !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), "support") {
			t.Fatalf("freeze without the unified hierarchy: %v, want ErrPrecondition (not supported)", err)
		}
		if s := freezer(svc); s != "running" {
			t.Fatalf("refused freeze left %s %q", svc, s)
		}
		t.Logf("cgroup v1/hybrid: %v", err)
	} else {
		if err != nil {
			t.Fatalf("freeze: %v", err)
		}
		if a, b := freezer(slice), freezer(svc); a != "frozen" || b != "frozen" {
			t.Fatalf("after FreezeUnit: slice %q, service %q", a, b)
		}
		if err := c.ThawUnit(ctx, slice); err != nil {
			t.Fatalf("thaw: %v", err)
		}
		if a, b := freezer(slice), freezer(svc); a != "running" || b != "running" {
			t.Fatalf("after ThawUnit: slice %q, service %q", a, b)
		}
	}
	if err := c.FreezeUnit(ctx, "podunit-missing.slice"); !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("freeze of a missing unit: %v", err)
	}
}

// A stop job whose process takes longer than CallTimeout to exit (a
// container using a long grace period) is waited for up to the caller's
// deadline, and its job slot is freed meanwhile; without a caller deadline
// CallTimeout still bounds the wait. (podunit answered DeadlineExceeded to a
// 120 s StopContainer after 45 s: node conformance "image updated during
// termination".)
func TestStopOutlastsCallTimeout(t *testing.T) {
	h := harness.Start(t, harness.Options{})
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", h.BusAddress())
	c, err := systemd.New(systemd.Options{CallTimeout: 2 * time.Second, MaxParallelJobs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	slow := func(unit string) {
		t.Helper()
		props := []systemd.Property{
			sd.PropDescription("podunit slow stop test"),
			sd.PropExecStart([]string{"/bin/sh", "-c", "trap 'sleep 5; exit 0' TERM; while :; do sleep 1; done"}, false),
			{Name: "KillMode", Value: godbus.MakeVariant("mixed")},
			{Name: "TimeoutStopUSec", Value: godbus.MakeVariant(uint64(60 * time.Second / time.Microsecond))},
			{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")},
		}
		if err := c.StartTransientUnit(ctx, unit, props); err != nil {
			t.Fatal(err)
		}
		// the start job is done at the fork: give sh time to set its trap
		time.Sleep(time.Second)
	}
	slow("podunit-slowstop.service")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- c.StopUnit(sctx, "podunit-slowstop.service") }()
	// The one job slot is free again once CallTimeout has passed, while
	// the stop still waits.
	time.Sleep(3 * time.Second)
	if err := c.StartTransientUnit(ctx, "podunit-other.service", []systemd.Property{sd.PropExecStart([]string{"/bin/sleep", "60"}, false)}); err != nil {
		t.Fatalf("a start during a long stop: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop with a 30 s deadline of a unit taking 5 s, CallTimeout 2 s: %v after %v", err, time.Since(start))
	}
	if d := time.Since(start); d < 4*time.Second {
		t.Fatalf("stop returned after %v, before the process's 5 s", d)
	}
	if err := c.StopUnit(ctx, "podunit-other.service"); err != nil {
		t.Fatal(err)
	}
	// No deadline from the caller: CallTimeout bounds the wait.
	slow("podunit-slowstop2.service")
	if err := c.StopUnit(ctx, "podunit-slowstop2.service"); !errors.Is(err, errdefs.ErrDeadline) {
		t.Fatalf("stop without a caller deadline: %v, want ErrDeadline after CallTimeout", err)
	}
}
