//go:build vm

// The cgroup v2 tier: run by test/vm/run.sh against a booted VM
// (PODUNIT_VM_SSH, DBUS_SYSTEM_BUS_ADDRESS forwarded to the guest's bus,
// the probe and bundle script pushed to /opt/podunit-vm).
package vm

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/stats"
	"github.com/podunit/podunit/systemd"
)

const probe = "/opt/podunit-vm/probe"

func ssh(t *testing.T, cmd string) string {
	t.Helper()
	argv := strings.Fields(os.Getenv("PODUNIT_VM_SSH"))
	if len(argv) == 0 {
		t.Fatal("PODUNIT_VM_SSH is not set: run test/vm/run.sh")
	}
	out, err := exec.Command(argv[0], append(argv[1:], cmd)...).CombinedOutput()
	if err != nil {
		t.Fatalf("vm: %s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// waitFile polls a marker file the workload writes once it is ready; the
// emulated VM is slow, so the wait is generous.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	return ssh(t, "for i in $(seq 300); do [ -s "+path+" ] && exec cat "+path+"; sleep 0.5; done; echo timeout >&2; exit 1")
}

// execCmd is one entry of systemd's a(sasb) Exec* properties; the bool
// says whether a failure is ignored.
type execCmd struct {
	Path          string
	Args          []string
	IgnoreFailure bool
}

func execProp(name string, argv ...string) systemd.Property {
	return systemd.Property{Name: name, Value: godbus.MakeVariant([]execCmd{{Path: argv[0], Args: argv}})}
}

func prop(name string, v any) systemd.Property {
	return systemd.Property{Name: name, Value: godbus.MakeVariant(v)}
}

func conn(t *testing.T) *systemd.DBus {
	t.Helper()
	c, err := systemd.New(systemd.Options{
		CallTimeout:     2 * time.Minute,
		MaxParallelJobs: config.Default().Systemd.MaxParallelJobs,
		// The adapter's default dialer ties the connection to the first
		// call's context, which closes it before the job's JobRemoved
		// arrives (reported to the systemd package's owner); a connection
		// that lives as long as the adapter avoids that here.
		Dial: func(context.Context) (*sd.Conn, error) { return sd.NewSystemConnectionContext(context.Background()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("guest systemd over the forwarded bus: %v", err)
	}
	return c
}

func startUnit(t *testing.T, c *systemd.DBus, name string, props ...systemd.Property) {
	t.Helper()
	ctx := context.Background()
	if err := c.StartTransientUnit(ctx, name, props); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.StopUnit(ctx, name)
		_ = c.ResetFailedUnit(ctx, name)
	})
}

type probeStats struct {
	Version int
	Stats   stats.Extended
	OOM     bool
}

func readStats(t *testing.T, cgroup string) probeStats {
	t.Helper()
	var ps probeStats
	out := ssh(t, probe+" stats "+cgroup)
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("probe stats: %v\n%s", err, out)
	}
	if ps.Version != 2 {
		t.Fatalf("guest reader is cgroup v%d, want v2", ps.Version)
	}
	return ps
}

// A unit that burned 5 s of CPU reports ≈5e9 ns, the same counter systemd
// reports as CPUUsageNSec; one holding 100 MiB has a working set above
// that; SetUnitProperties(MemoryMax) (UpdateContainerResources) shows up as
// the limit and available memory.
func TestV2StatsAndUpdate(t *testing.T) {
	c := conn(t)
	ssh(t, "rm -f /run/pv-burn.done /run/pv-mem.done")
	startUnit(t, c, "podunit-vmtest-burn.service", execProp("ExecStart", probe, "burn", "5s", "/run/pv-burn.done"))
	startUnit(t, c, "podunit-vmtest-mem.service", execProp("ExecStart", probe, "alloc", "100", "/run/pv-mem.done"))
	waitFile(t, "/run/pv-burn.done")
	waitFile(t, "/run/pv-mem.done")

	burn := readStats(t, "/system.slice/podunit-vmtest-burn.service")
	if burn.Stats.CPU == nil {
		t.Fatal("no CPU stats")
	}
	got := float64(burn.Stats.CPU.UsageNanos)
	if math.Abs(got-5e9) > 0.1*5e9 {
		t.Errorf("5 s of CPU reported as %.3g ns (want 5e9 ±10%%)", got)
	}
	p, err := c.UnitProperties(context.Background(), "podunit-vmtest-burn.service", "Service")
	if err != nil {
		t.Fatal(err)
	}
	sd, _ := p["CPUUsageNSec"].(uint64)
	if math.Abs(got-float64(sd)) > 0.02*float64(sd)+1e8 {
		t.Errorf("stats %v ns vs systemd CPUUsageNSec %v ns", got, sd)
	}

	mem := readStats(t, "/system.slice/podunit-vmtest-mem.service")
	m := mem.Stats.Memory
	if m == nil || m.WorkingSet < 100<<20 || m.RSS < 100<<20 || m.Limit != 0 || m.Available != nil {
		t.Fatalf("memory of a 100 MiB holder: %+v", m)
	}
	if err := c.SetUnitProperties(context.Background(), "podunit-vmtest-mem.service", prop("MemoryMax", uint64(256<<20))); err != nil {
		t.Fatal(err)
	}
	m = readStats(t, "/system.slice/podunit-vmtest-mem.service").Stats.Memory
	if m.Limit != 256<<20 || m.Available == nil || *m.Available != m.Limit-m.WorkingSet {
		t.Fatalf("after MemoryMax=256M: %+v", m)
	}
	if mem.OOM {
		t.Fatal("OOM reported for a unit that was not killed")
	}
}

func watch(t *testing.T) *systemd.Watcher {
	t.Helper()
	w, err := systemd.NewWatcher(systemd.WatchOptions{CallTimeout: 30 * time.Second, Match: func(u string) bool { return strings.HasPrefix(u, "podunit-vmtest-") }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = w.Run(ctx) }()
	t.Cleanup(cancel)
	for ev := range w.Events() {
		if ev.Kind == systemd.Resync {
			return w
		}
	}
	t.Fatal("watcher ended before subscribing")
	return nil
}

func waitStopped(t *testing.T, w *systemd.Watcher, unit string) systemd.UnitState {
	t.Helper()
	timeout := time.After(3 * time.Minute)
	// A unit's first signals can describe an earlier incarnation (loading,
	// reset-failed of a leftover): only a stop after running counts.
	live := false
	for {
		select {
		case ev := <-w.Events():
			if ev.Kind != systemd.UnitChanged || ev.Unit != unit {
				continue
			}
			switch ev.State.ActiveState {
			case "activating", "active", "deactivating":
				live = true
			case "inactive", "failed":
				if live {
					return ev.State
				}
			}
		case <-timeout:
			t.Fatalf("%s did not stop", unit)
		}
	}
}

// MemoryMax + an allocation beyond it: the unit fails, stats.OOMKilled
// (run by ExecStopPost while the cgroup still exists) says so, and systemd
// reports Result=oom-kill — unless it handled the main process' SIGKILL
// before the cgroup's OOM event, when it says "signal": a race in systemd,
// which is why podunit's exit recorder must ask stats.OOMKilled.
func TestV2OOMKillResult(t *testing.T) {
	c := conn(t)
	w := watch(t)
	const unit = "podunit-vmtest-oom.service"
	ssh(t, "rm -f /run/pv-oom.txt")
	startUnit(t, c, unit,
		execProp("ExecStart", probe, "alloc", "200"),
		execProp("ExecStopPost", probe, "oom", "/system.slice/"+unit, "/run/pv-oom.txt"),
		prop("MemoryMax", uint64(32<<20)), prop("MemorySwapMax", uint64(0)))
	st := waitStopped(t, w, unit)
	t.Logf("systemd: %+v", st)
	if st.ActiveState != "failed" || st.Result != "oom-kill" && st.Result != "signal" {
		t.Fatalf("final state %+v, want failed with Result=oom-kill", st)
	}
	if got := waitFile(t, "/run/pv-oom.txt"); got != "true" {
		t.Fatalf("stats.OOMKilled in ExecStopPost = %q", got)
	}
}

// runc left in the unit's own cgroup turns the unit's subtree threaded
// (see runc-leaf.sh): systemd can no longer run ExecStopPost there. This
// pins down why podunit's ExecStart must move runc into a leaf on v2.
func TestV2RuncInUnitCgroupGoesThreaded(t *testing.T) {
	c := conn(t)
	const unit = "podunit-vmtest-thr.service"
	ssh(t, "bash /opt/podunit-vm/make-busybox-bundle.sh /run/pvb-thr --cgroups-path /system.slice/"+unit+"/container -- sleep 3600 >/dev/null")
	startUnit(t, c, unit, prop("Type", "forking"), prop("PIDFile", "/run/pv-thr.pid"), prop("Delegate", true), prop("KillSignal", int32(9)),
		execProp("ExecStart", "/usr/sbin/runc", "run", "--detach", "--pid-file", "/run/pv-thr.pid", "-b", "/run/pvb-thr", "pv-thr"))
	t.Cleanup(func() { ssh(t, "runc delete --force pv-thr 2>/dev/null; true") })
	if typ := strings.TrimSpace(ssh(t, "cat /sys/fs/cgroup/system.slice/"+unit+"/cgroup.type")); typ != "domain threaded" {
		t.Fatalf("unit cgroup type %q: runc no longer goes threaded here; revisit runc-leaf.sh", typ)
	}
}

// The production shape on v2: runc run --detach in a Type=forking unit
// with Delegate=yes, started through runc-leaf.sh, the container's cgroup
// inside the unit's. The unit's stats include the container, ExecStopPost
// runs (runc delete leaves nothing), and an OOM in the container fails the
// unit and is seen by stats.OOMKilled.
func TestV2RuncInUnit(t *testing.T) {
	c := conn(t)
	w := watch(t)
	bundle := func(name, unit string, args string) string {
		b := "/run/pvb-" + name
		ssh(t, "bash /opt/podunit-vm/make-busybox-bundle.sh "+b+" --cgroups-path /system.slice/"+unit+"/container -- "+args+" >/dev/null")
		return b
	}
	runc := func(unit, id, b string, extra ...systemd.Property) {
		props := append([]systemd.Property{
			prop("Type", "forking"), prop("PIDFile", "/run/"+id+".pid"), prop("Delegate", true),
			// busybox as the container's init ignores SIGTERM.
			prop("KillSignal", int32(9)),
			execProp("ExecStart", "/opt/podunit-vm/runc-leaf.sh", "/sys/fs/cgroup/system.slice/"+unit,
				"/usr/sbin/runc", "run", "--detach", "--pid-file", "/run/"+id+".pid", "-b", b, id),
			execProp("ExecStopPost", probe, "oom", "/system.slice/"+unit, "/run/"+id+".oom"),
			execProp("ExecStopPost", "/usr/sbin/runc", "delete", "--force", id),
		}, extra...)
		ssh(t, "rm -f /run/"+id+".oom")
		startUnit(t, c, unit, props...)
	}

	const sleeper = "podunit-vmtest-ctr.service"
	runc(sleeper, "pv-sleep", bundle("sleep", sleeper, "sh -c 'head -c 50000000 /dev/zero > /dev/shm/x; exec sleep 3600'"))
	deadline := time.Now().Add(3 * time.Minute)
	var ps probeStats
	for time.Now().Before(deadline) {
		ps = readStats(t, "/system.slice/"+sleeper)
		if ps.Stats.Memory != nil && ps.Stats.Memory.WorkingSet >= 50e6 {
			break
		}
		time.Sleep(time.Second)
	}
	if ps.Stats.Memory == nil || ps.Stats.Memory.WorkingSet < 50e6 || ps.Stats.Pids == nil || ps.Stats.Pids.Current < 1 {
		t.Fatalf("unit stats do not include the container: %+v", ps.Stats)
	}
	if typ := strings.TrimSpace(ssh(t, "cat /sys/fs/cgroup/system.slice/"+sleeper+"/container/cgroup.type")); typ != "domain" {
		t.Fatalf("container cgroup type %q, want domain", typ)
	}
	if err := c.StopUnit(context.Background(), sleeper); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, w, sleeper)
	if out := ssh(t, "runc list -q"); strings.Contains(out, "pv-sleep") {
		t.Fatalf("ExecStopPost did not run: container left behind: %s", out)
	}
	if got := waitFile(t, "/run/pv-sleep.oom"); got != "false" {
		t.Fatalf("OOMKilled after a clean stop = %q", got)
	}

	const oom = "podunit-vmtest-ctroom.service"
	runc(oom, "pv-oom", bundle("oom", oom, "tail /dev/zero"),
		prop("MemoryMax", uint64(32<<20)), prop("MemorySwapMax", uint64(0)))
	st := waitStopped(t, w, oom)
	t.Logf("systemd after the container's OOM: %+v", st)
	if st.ActiveState != "failed" {
		t.Fatalf("container OOM: unit state %+v", st)
	}
	if got := waitFile(t, "/run/pv-oom.oom"); got != "true" {
		t.Fatalf("stats.OOMKilled after the container's OOM = %q", got)
	}
}
