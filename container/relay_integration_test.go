//go:build integration

package container

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podunit/podunit/logrelay"
)

// The node's log relay may die at any moment: systemd restarts it, the
// new relay takes the container's pipes and streams from the fd store, and
// output goes on with the container's journal fields, into the CRI log.
func (ie *inside) relayKilled(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	const n = 300
	id := ie.run(ctx, t, m, shConfig("chatty", "i=0; while [ $i -lt "+strconv.Itoa(n)+" ]; do echo line$i; i=$((i+1)); sleep 0.01; done"))
	mainPID := func() uint32 {
		p, err := ie.sd.UnitProperties(ctx, logrelay.UnitName, "Service")
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := p["MainPID"].(uint32)
		return pid
	}
	time.Sleep(700 * time.Millisecond)
	old := mainPID()
	if old == 0 {
		t.Fatal("log relay has no main PID")
	}
	if err := syscall.Kill(int(old), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pid := mainPID(); pid == 0 || pid == old; pid = mainPID() {
		if time.Now().After(deadline) {
			t.Fatal("systemd did not restart the log relay")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.Wait(wctx, id); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ie.logDir, "chatty.log"))
	if err != nil {
		t.Fatal(err)
	}
	// At most the chunk the killed relay had read but not sent is lost:
	// here, with a line every 10 ms, a line or two.
	last, missing := -1, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[1] != "stdout" || f[2] != "F" || !strings.HasPrefix(f[3], "line") {
			t.Fatalf("CRI log line %q", l)
		}
		k, _ := strconv.Atoi(strings.TrimPrefix(f[3], "line"))
		if k <= last {
			t.Fatalf("line%d after line%d: repeated or out of order", k, last)
		}
		missing += k - last - 1
		last = k
	}
	if last != n-1 || missing > 2 {
		t.Fatalf("CRI log ends at line%d with %d lines missing (relay killed mid-stream)", last, missing)
	}
	t.Logf("relay %d killed mid-stream; %d of %d lines lost", old, missing, n)
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}
