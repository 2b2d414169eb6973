//go:build integration

package systemd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/test/harness"
)

// Against a real systemd: the watcher sees a transient unit run and fail
// with its exit status, survives a dbus-daemon restart with a Resync and
// keeps reporting afterwards.
func TestWatcherAgainstRealSystemd(t *testing.T) {
	h := harness.Start(t, harness.Options{})
	// The default dialer must honour DBUS_SYSTEM_BUS_ADDRESS.
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", h.BusAddress())
	w, err := systemd.NewWatcher(systemd.WatchOptions{
		Match:      func(u string) bool { return strings.HasPrefix(u, "evtest-") },
		MaxBackoff: 500 * time.Millisecond, CallTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, ok := <-w.Events(); ok {
			t.Error("events channel still open after Run returned")
		}
	})

	next := func(what string, ok func(systemd.UnitEvent) bool) systemd.UnitEvent {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev := <-w.Events():
				t.Logf("event %s %s %+v %v %s %s", ev.Kind, ev.Unit, ev.State, ev.Changed, ev.JobResult, ev.Reason)
				if ok(ev) {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %s event within 30s", what)
			}
		}
	}
	next("initial resync", func(ev systemd.UnitEvent) bool { return ev.Kind == systemd.Resync && ev.Reason == "subscribed" })

	runUnit := func(name string) {
		t.Helper()
		h.MustExec("systemd-run", "--unit="+name, "-p", "Type=exec", "sh", "-c", "sleep 0.5; exit 7")
		next(name+" active", func(ev systemd.UnitEvent) bool {
			return ev.Kind == systemd.UnitChanged && ev.Unit == name+".service" && ev.State.ActiveState == "active"
		})
		ev := next(name+" failed", func(ev systemd.UnitEvent) bool {
			return ev.Kind == systemd.UnitChanged && ev.Unit == name+".service" && ev.State.Stopped()
		})
		// systemd sends the Service interface's changes before the
		// Unit's, so the final state already carries the exit.
		if ev.State.ActiveState != "failed" || ev.State.Result != "exit-code" || !ev.State.HaveExecMain ||
			ev.State.ExecMainCode != 1 || ev.State.ExecMainStatus != 7 {
			t.Fatalf("final state %+v", ev.State)
		}
		if _, err := h.Exec("systemctl", "reset-failed", name+".service"); err != nil {
			t.Fatal(err)
		}
		next(name+" removed", func(ev systemd.UnitEvent) bool {
			return ev.Kind == systemd.UnitRemoved && ev.Unit == name+".service"
		})
	}
	runUnit("evtest-a")

	// A start job's JobRemoved reaches the watcher too.
	h.MustExec("systemd-run", "--unit=evtest-j", "-p", "Type=exec", "sleep", "600")
	next("start job done", func(ev systemd.UnitEvent) bool {
		return ev.Kind == systemd.UnitJobRemoved && ev.Unit == "evtest-j.service" && ev.JobResult == systemd.JobDone
	})
	h.MustExec("systemctl", "stop", "evtest-j.service")
	next("stop", func(ev systemd.UnitEvent) bool {
		return ev.Kind == systemd.UnitChanged && ev.Unit == "evtest-j.service" && ev.State.ActiveState == "inactive"
	})

	// dbus-daemon goes away and comes back: the watcher reconnects,
	// resubscribes and says so.
	if out, err := h.Exec("systemctl", "restart", "dbus.service"); err != nil {
		t.Fatalf("restart dbus: %v\n%s", err, out)
	}
	next("resync after reconnect", func(ev systemd.UnitEvent) bool { return ev.Kind == systemd.Resync && ev.Reason == "reconnected" })
	runUnit("evtest-b")

	// daemon-reload may change units behind subscribers' backs.
	h.MustExec("systemctl", "daemon-reload")
	next("resync after reload", func(ev systemd.UnitEvent) bool { return ev.Kind == systemd.Resync && ev.Reason == "reloaded" })
}
