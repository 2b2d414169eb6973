//go:build integration

package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// countingConn records the systemd calls a manager makes.
type countingConn struct {
	systemd.Conn
	mu    sync.Mutex
	calls []string
}

func (c *countingConn) add(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

// since returns the calls made after the first n, and the new count.
func (c *countingConn) since(n int) ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls[n:]), len(c.calls)
}

func (c *countingConn) StartTransientUnit(ctx context.Context, name string, props []systemd.Property) error {
	c.add("start")
	return c.Conn.StartTransientUnit(ctx, name, props)
}
func (c *countingConn) StopUnit(ctx context.Context, name string) error {
	c.add("stop")
	return c.Conn.StopUnit(ctx, name)
}
func (c *countingConn) KillUnit(ctx context.Context, name string, sig int32, mainOnly bool) error {
	c.add("kill")
	return c.Conn.KillUnit(ctx, name, sig, mainOnly)
}
func (c *countingConn) ResetFailedUnit(ctx context.Context, name string) error {
	c.add("reset-failed")
	return c.Conn.ResetFailedUnit(ctx, name)
}
func (c *countingConn) SetUnitProperties(ctx context.Context, name string, props ...systemd.Property) error {
	c.add("set")
	return c.Conn.SetUnitProperties(ctx, name, props...)
}
func (c *countingConn) UnitProperties(ctx context.Context, name, iface string, names ...string) (map[string]any, error) {
	c.add("get " + iface)
	return c.Conn.UnitProperties(ctx, name, iface, names...)
}
func (c *countingConn) ListUnits(ctx context.Context, patterns ...string) ([]systemd.UnitStatus, error) {
	c.add("list")
	return c.Conn.ListUnits(ctx, patterns...)
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// fastPaths: against a real systemd and runc, a status read of a running
// container makes no D-Bus call and the verbose one makes one; an init
// that dies is still seen; removing an exited container whose unit was
// collected neither stops nor resets it nor forks the runtime, and
// leaves nothing behind.
func (ie *inside) fastPaths(ctx context.Context, t *testing.T) {
	cc := &countingConn{Conn: ie.sd}
	deps := ie.deps
	deps.Systemd = cc
	m, err := New(ie.opts, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	id := ie.run(ctx, t, m, shConfig("fast", trapTerm))
	if err := waitReady(ctx, m, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(runcRoot, id)); err != nil {
		t.Errorf("runc state is not where Remove looks for it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(systemd.TransientDir, unitName(id))); err != nil {
		t.Errorf("a running unit's transient file is not where Remove looks for it: %v", err)
	}
	const n = 200
	_, mark := cc.since(0)
	var plain, verbose []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		st, _, err := m.Status(ctx, id, false)
		plain = append(plain, time.Since(start))
		if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("status: %v %v", st, err)
		}
	}
	if calls, _ := cc.since(mark); len(calls) != 0 {
		t.Errorf("%d status reads of a running container made %d systemd calls: %q", n, len(calls), calls[:min(len(calls), 5)])
	}
	_, mark = cc.since(0)
	var info map[string]string
	for i := 0; i < n; i++ {
		start := time.Now()
		st, inf, err := m.Status(ctx, id, true)
		verbose = append(verbose, time.Since(start))
		if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("verbose status: %v %v", st, err)
		}
		info = inf
	}
	if calls, _ := cc.since(mark); len(calls) != 0 {
		t.Errorf("%d verbose status reads of a running container made %d systemd calls: %q", n, len(calls), calls[:min(len(calls), 5)])
	}
	props, err := ie.sd.UnitProperties(ctx, unitName(id), "Service")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := props["MainPID"].(uint32)
	// the PID from local evidence is the one systemd knows as the unit's
	// main process; no unit state is claimed without asking systemd
	if pid == 0 || !strings.Contains(info["info"], fmt.Sprintf(`"pid":%d,`, pid)) || strings.Contains(info["info"], `"activeState"`) {
		t.Errorf("verbose info (main pid %d): %.300s", pid, info["info"])
	}
	t.Logf("ContainerStatus of a running container, p50 over %d: %v plain, %v verbose", n, p50(plain), p50(verbose))

	// The init dies behind podunit's back: the next reads see it.
	if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ok := waitFor(15*time.Second, func() bool {
		st, _, err := m.Status(ctx, id, false)
		return err == nil && st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if st, _, _ := m.Status(ctx, id, false); !ok || st.ExitCode != 137 {
		t.Errorf("after SIGKILL of the init: %v", st)
	}

	// Exited containers whose units were collected: remove asks systemd
	// nothing (their transient files are gone), then unmounts and deletes.
	ids := []string{id}
	for i := 0; i < 10; i++ {
		id := ie.run(ctx, t, m, shConfig(fmt.Sprintf("fastrm%d", i), trapTerm))
		if err := waitReady(ctx, m, id); err != nil {
			t.Fatal(err)
		}
		if err := m.Stop(ctx, id, 10); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if !waitFor(10*time.Second, func() bool {
		units, err := ie.sd.ListUnits(ctx, UnitPrefix+"*")
		return err == nil && len(units) == 0
	}) {
		t.Fatal("stopped units not collected")
	}
	var rm []time.Duration
	for _, id := range ids {
		_, mark = cc.since(0)
		start := time.Now()
		if err := m.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
		rm = append(rm, time.Since(start))
		if calls, _ := cc.since(mark); len(calls) != 0 {
			t.Errorf("remove of a collected exited container: systemd calls %q, want none", calls)
		}
	}
	t.Logf("RemoveContainer of an exited container, p50 over %d: %v", len(rm), p50(rm))
	ie.assertNoLeaks(ctx, t)

	// crun keeps its state in the same shape.
	cid, err := m.Create(ctx, "pod-crun-fast", shConfig("fastcrun", trapTerm), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, cid); err != nil {
		t.Fatal(err)
	}
	if err := waitReady(ctx, m, cid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(crunRoot, cid)); err != nil {
		t.Errorf("crun state is not where Remove looks for it: %v", err)
	}
	if err := m.Stop(ctx, cid, 10); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, cid); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}
