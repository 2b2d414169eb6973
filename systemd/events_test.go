package systemd

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	godbus "github.com/godbus/dbus/v5"
)

func TestUnitNameFromPath(t *testing.T) {
	for path, want := range map[string]string{
		"/org/freedesktop/systemd1/unit/podunit_2dc1_2eservice":                  "podunit-c1.service",
		"/org/freedesktop/systemd1/unit/podunit_2epod_2dab12_2eslice":            "podunit.pod-ab12.slice",
		"/org/freedesktop/systemd1/unit/_2d_2eslice":                             "-.slice",
		"/org/freedesktop/systemd1/unit/foo_5cx2d_2eservice":                     `foo\x2d.service`,
		"/org/freedesktop/systemd1/unit/_31_2dx_2eservice":                       "1-x.service",
		"/org/freedesktop/systemd1/unit/dbus_2eservice":                          "dbus.service",
		"/org/freedesktop/systemd1/unit/podunit_2dabcdef0123456789_2eservice":    "podunit-abcdef0123456789.service",
		"/org/freedesktop/systemd1/unit/kubepods_2dburstable_2dpod1_5f2_2eslice": "kubepods-burstable-pod1_2.slice",
		"/org/freedesktop/systemd1/unit/user_401000_2eservice":                   "user@1000.service",
	} {
		got, err := UnitNameFromPath(path)
		if err != nil || got != want {
			t.Errorf("UnitNameFromPath(%s) = %q, %v; want %q", path, got, err, want)
		}
		if back := UnitPath(want); back != path {
			t.Errorf("UnitPath(%q) = %s, want %s", want, back, path)
		}
	}
	for _, bad := range []string{
		"/org/freedesktop/systemd1/job/12", "/org/freedesktop/systemd1/unit/", "/org/freedesktop/systemd1/unit/a/b",
		"/org/freedesktop/systemd1/unit/x_2", "/org/freedesktop/systemd1/unit/x_zz",
	} {
		if _, err := UnitNameFromPath(bad); err == nil {
			t.Errorf("UnitNameFromPath(%s) succeeded", bad)
		}
	}
}

func FuzzUnitPathRoundTrip(f *testing.F) {
	f.Add("podunit-c1.service")
	f.Add("1-x.service")
	f.Add("ä@x.service")
	f.Fuzz(func(t *testing.T, unit string) {
		if unit == "" {
			return
		}
		got, err := UnitNameFromPath(UnitPath(unit))
		if err != nil || got != unit {
			t.Fatalf("round trip of %q: %q, %v", unit, got, err)
		}
	})
}

func FuzzUnitNameFromPath(f *testing.F) {
	f.Add("/org/freedesktop/systemd1/unit/podunit_2dc1_2eservice")
	f.Fuzz(func(t *testing.T, p string) { _, _ = UnitNameFromPath(p) })
}

func v(x any) godbus.Variant { return godbus.MakeVariant(x) }

func TestApplyPropertiesChanged(t *testing.T) {
	var st UnitState
	ch, err := ApplyPropertiesChanged(&st, []any{sdSvcIface, map[string]godbus.Variant{
		"Result": v("exit-code"), "ExecMainCode": v(int32(1)), "ExecMainStatus": v(int32(7)), "MainPID": v(uint32(0)),
		"ExecMainExitTimestamp": v(uint64(1700000000000000)),
		"StatusText":            v("ignored"),
	}, []string{}})
	if err != nil || !reflect.DeepEqual(ch, []string{"Result", "ExecMainCode", "ExecMainStatus", "ExecMainExitTimestamp"}) {
		t.Fatalf("service props: %v, %v", ch, err)
	}
	ch, err = ApplyPropertiesChanged(&st, []any{sdUnitIface, map[string]godbus.Variant{
		"ActiveState": v("failed"), "SubState": v("failed"), "ActiveExitTimestamp": v(uint64(5)),
	}, []string{}})
	if err != nil || !reflect.DeepEqual(ch, []string{"ActiveState", "SubState"}) {
		t.Fatalf("unit props: %v, %v", ch, err)
	}
	want := UnitState{ActiveState: "failed", SubState: "failed", Result: "exit-code", ExecMainCode: 1, ExecMainStatus: 7, HaveExecMain: true, ExecMainExitTimestamp: 1700000000000000}
	if st != want || !st.Stopped() {
		t.Fatalf("state %+v, want %+v", st, want)
	}
	// Repeating the same values changes nothing.
	ch, _ = ApplyPropertiesChanged(&st, []any{sdUnitIface, map[string]godbus.Variant{"ActiveState": v("failed")}, []string{}})
	if len(ch) != 0 {
		t.Fatalf("unchanged reported as %v", ch)
	}
	// A type mismatch is ignored rather than trusted.
	ch, _ = ApplyPropertiesChanged(&st, []any{sdUnitIface, map[string]godbus.Variant{"ActiveState": v(int32(1))}, []string{}})
	if len(ch) != 0 || st.ActiveState != "failed" {
		t.Fatal("wrong-typed property applied")
	}
	for _, body := range [][]any{{}, {1, 2, 3}, {sdUnitIface, "x", nil}} {
		if _, err := ApplyPropertiesChanged(&st, body); err == nil {
			t.Errorf("body %v accepted", body)
		}
	}
}

func propsSignal(unit, iface string, props map[string]godbus.Variant) *godbus.Signal {
	return &godbus.Signal{
		Path: godbus.ObjectPath(UnitPath(unit)), Name: propsIface + ".PropertiesChanged",
		Body: []any{iface, props, []string{}},
	}
}

func TestWatcherHandleAndOverflow(t *testing.T) {
	w, err := NewWatcher(WatchOptions{Buffer: 3, CallTimeout: time.Second, Match: func(u string) bool { return u != "other.service" }})
	if err != nil {
		t.Fatal(err)
	}
	w.handle(propsSignal("c1.service", sdUnitIface, map[string]godbus.Variant{"ActiveState": v("active")}))
	w.handle(propsSignal("other.service", sdUnitIface, map[string]godbus.Variant{"ActiveState": v("active")}))
	w.handle(&godbus.Signal{Name: sdManager + ".JobRemoved", Path: sdPath, Body: []any{uint32(4), godbus.ObjectPath("/j/4"), "c1.service", "done"}})
	w.handle(&godbus.Signal{Name: sdManager + ".UnitRemoved", Path: sdPath, Body: []any{"c1.service", godbus.ObjectPath(UnitPath("c1.service"))}})
	// Queue (3) is full now: the next event overflows, later ones are
	// swallowed until a Resync fits.
	w.handle(propsSignal("c2.service", sdUnitIface, map[string]godbus.Variant{"ActiveState": v("active")}))
	w.handle(propsSignal("c2.service", sdUnitIface, map[string]godbus.Variant{"ActiveState": v("failed")}))
	if !w.overflow {
		t.Fatal("overflow not flagged")
	}
	var kinds []UnitEventKind
	for range 3 {
		ev := <-w.out
		kinds = append(kinds, ev.Kind)
		if ev.Unit != "c1.service" {
			t.Fatalf("event for %q", ev.Unit)
		}
	}
	if !reflect.DeepEqual(kinds, []UnitEventKind{UnitChanged, UnitJobRemoved, UnitRemoved}) {
		t.Fatalf("kinds %v", kinds)
	}
	if _, ok := w.units["c1.service"]; ok {
		t.Fatal("removed unit still cached")
	}
	// follow() delivers the pending Resync as soon as there is room; do
	// its step by hand.
	w.emit(UnitEvent{Kind: UnitChanged, Unit: "swallowed"})
	if len(w.out) != 0 {
		t.Fatal("event queued during overflow")
	}
	w.handle(&godbus.Signal{Name: sdManager + ".Reloading", Path: sdPath, Body: []any{false}})
	if len(w.out) != 0 {
		t.Fatal("resync queued while overflow pending")
	}
}

// String names kinds in test messages.
func (k UnitEventKind) String() string {
	switch k {
	case UnitChanged:
		return "changed"
	case UnitJobRemoved:
		return "job-removed"
	case UnitRemoved:
		return "removed"
	case Resync:
		return "resync"
	}
	return "unknown(" + strconv.Itoa(int(k)) + ")"
}

// UnitPath is the inverse of UnitNameFromPath.
func UnitPath(unit string) string {
	if unit == "" {
		return unitPathNS + "/_"
	}
	var b strings.Builder
	b.WriteString(unitPathNS + "/")
	for i := 0; i < len(unit); i++ {
		c := unit[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' && i > 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02x", c)
	}
	return b.String()
}
