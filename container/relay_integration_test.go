//go:build integration

package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/unitprops"
)

// The node's log relay may die at any moment: systemd restarts it, the
// new relay takes the container's pipes and streams from the fd store, and
// output goes on with the container's journal fields, into the CRI log.
func (ie *inside) relayKilled(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	const n = 300
	id := ie.run(ctx, t, m, shConfig("chatty", "i=0; while [ $i -lt "+strconv.Itoa(n)+" ]; do echo line$i; i=$((i+1)); sleep 0.01; done"))
	time.Sleep(700 * time.Millisecond)
	old := ie.killRelay(ctx, t)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.Wait(wctx, id); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ie.logDir, "chatty.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The relay writes a chunk before it reads the next and keeps its
	// pipes in the fd store: nothing is lost.
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
	if last != n-1 || missing > 0 {
		t.Fatalf("CRI log ends at line%d with %d lines missing (relay killed mid-stream)", last, missing)
	}
	t.Logf("relay %d killed mid-stream; %d of %d lines lost", old, missing, n)
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

// killRelay SIGKILLs the node's log relay and returns once systemd has
// restarted it; it returns the killed PID.
func (ie *inside) killRelay(ctx context.Context, t *testing.T) uint32 {
	t.Helper()
	mainPID := func() uint32 {
		p, err := ie.sd.UnitProperties(ctx, logrelay.UnitName, "Service")
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := p["MainPID"].(uint32)
		return pid
	}
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
	// The new relay answers once it took everything back.
	for logrelay.Ping(ie.opts.LogRelaySocket, time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the restarted log relay does not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return old
}

// burstScript prints n numbered lines on each stream as fast as awk can
// (stdio buffers: lines straddle the relay's reads).
func burstScript(n int) string {
	return fmt.Sprintf(`awk 'BEGIN{for(i=0;i<%d;i++){printf "out %%07d padding-padding-padding-padding-padding-padding\n", i; printf "err %%07d padding\n", i > "/dev/stderr"}}'`, n)
}

// checkBurst reads the CRI files (rotated ones first) and wants every line
// of both streams exactly once, in order, each a full line.
func checkBurst(t *testing.T, files []string, n int) {
	t.Helper()
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	next := map[string]int{}
	for len(all) > 0 {
		i := bytes.IndexByte(all, '\n')
		if i < 0 {
			t.Fatalf("CRI log ends without a newline: %q", all)
		}
		line := string(all[:i])
		all = all[i+1:]
		f := strings.SplitN(line, " ", 5)
		if len(f) < 5 || f[2] != "F" {
			t.Fatalf("CRI log line %q: want a full line of a burst", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("CRI log line %q: %v", line, err)
		}
		k, err := strconv.Atoi(f[4][:7])
		if err != nil || f[3] != f[1][3:] {
			t.Fatalf("CRI log line %q: not a burst line of its stream", line)
		}
		if k != next[f[1]] {
			t.Fatalf("%s: line %d after line %d (lost, repeated or split)", f[1], k, next[f[1]]-1)
		}
		next[f[1]] = k + 1
	}
	if next["stdout"] != n || next["stderr"] != n {
		t.Fatalf("CRI log has %d stdout and %d stderr lines, want %d each", next["stdout"], next["stderr"], n)
	}
}

func (ie *inside) waitExited(ctx context.Context, t *testing.T, m *Manager, id string, d time.Duration) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := m.Wait(wctx, id); err != nil {
		t.Fatal(err)
	}
}

// The relay's CRI file: both streams, P pieces of a long line, CRLF, an
// unterminated last line; complete once the container is EXITED.
func (ie *inside) criFile(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	id := ie.run(ctx, t, m, shConfig("crifile", `printf 'one\ntwo\r\n'; echo err1 >&2; head -c 40000 /dev/zero | tr '\0' x; echo; printf tail`))
	ie.waitExited(ctx, t, m, id, 60*time.Second)
	b, err := os.ReadFile(filepath.Join(ie.logDir, "crifile.log"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			t.Fatalf("malformed CRI log line %q", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("CRI log line %q: %v", l, err)
		}
		text := f[3]
		if len(text) > 20 {
			text = strconv.Itoa(len(text))
		}
		got = append(got, f[1]+" "+f[2]+" "+text)
	}
	var out, errs []string
	for _, g := range got {
		if strings.HasPrefix(g, "stdout") {
			out = append(out, g)
		} else {
			errs = append(errs, g)
		}
	}
	want := []string{"stdout F one", "stdout F two", "stdout P 16384", "stdout P 16384", "stdout F 7232", "stdout P tail"}
	if strings.Join(out, "|") != strings.Join(want, "|") || strings.Join(errs, "|") != "stderr F err1" {
		t.Errorf("CRI log lines %q, want %q and stderr F err1", got, want)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// 100k lines per stream at full speed: every one in the CRI file, once,
// whole, by the time the container is EXITED.
func (ie *inside) burst(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	const n = 100000
	start := time.Now()
	id := ie.run(ctx, t, m, shConfig("burst", burstScript(n)))
	ie.waitExited(ctx, t, m, id, 3*time.Minute)
	t.Logf("%d lines per stream in %v", n, time.Since(start).Round(time.Millisecond))
	checkBurst(t, []string{filepath.Join(ie.logDir, "burst.log")}, n)
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
}

func (ie *inside) relayPID(ctx context.Context, t *testing.T) uint32 {
	t.Helper()
	p, err := ie.sd.UnitProperties(ctx, logrelay.UnitName, "Service")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := p["MainPID"].(uint32)
	return pid
}

// SIGKILL of the relay three times during a burst: nothing lost, repeated
// or split (the cut write is finished, the partial line resumed).
func (ie *inside) relayKilledMidBurst(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	const n = 400000
	id := ie.run(ctx, t, m, shConfig("killburst", burstScript(n)))
	logPath := filepath.Join(ie.logDir, "killburst.log")
	for kill := 0; kill < 3; kill++ {
		// Kill once lines flow (the file grows), not before.
		deadline := time.Now().Add(30 * time.Second)
		size0 := fileSize(logPath)
		for fileSize(logPath) < size0+(1<<20) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		old := ie.relayPID(ctx, t)
		if old == 0 {
			t.Fatal("log relay has no main PID")
		}
		if err := syscall.Kill(int(old), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for pid := ie.relayPID(ctx, t); pid == 0 || pid == old; pid = ie.relayPID(ctx, t) {
			if time.Now().After(deadline) {
				t.Fatal("systemd did not restart the log relay")
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("relay %d killed at %d bytes of CRI log", old, fileSize(logPath))
	}
	ie.waitExited(ctx, t, m, id, 3*time.Minute)
	checkBurst(t, []string{logPath}, n)
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// The kubelet's rotation during a burst: rename, ReopenContainerLog; the
// old files and the new one hold every line once, in order.
func (ie *inside) reopenMidBurst(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	const n = 200000
	id := ie.run(ctx, t, m, shConfig("rotate", burstScript(n)))
	logPath := filepath.Join(ie.logDir, "rotate.log")
	cl := logrelay.Client{Socket: ie.opts.LogRelaySocket}
	var files []string
	for i := 0; i < 5; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for fileSize(logPath) < 1<<20 && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		rotated := fmt.Sprintf("%s.%d", logPath, i)
		if err := os.Rename(logPath, rotated); err != nil {
			t.Fatal(err)
		}
		if err := cl.Reopen(id, logPath); err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		files = append(files, rotated)
	}
	ie.waitExited(ctx, t, m, id, 3*time.Minute)
	checkBurst(t, append(files, logPath), n)
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// journalRateLimit: with logs.journald_rate_limit_* set, journald keeps
// only part of a chatty container's 20,000 lines and says it suppressed
// the rest (once a line arrives after the window), while the CRI log file
// has every one of them.
func (ie *inside) journalRateLimit(ctx context.Context, t *testing.T) {
	const n = 20000
	opts := ie.opts
	opts.JournalRateLimit = unitprops.RateLimit{Interval: 2 * time.Second, Burst: 200}
	m, err := New(opts, ie.deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	id := ie.run(ctx, t, m, shConfig("ratelimit", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo line-$i; i=$((i+1)); done; sleep 3; echo after-the-window`, n)))
	ie.waitExited(ctx, t, m, id, 2*time.Minute)
	b, err := os.ReadFile(filepath.Join(ie.logDir, "ratelimit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), " stdout F line-"); got != n || !strings.Contains(string(b), "after-the-window") {
		t.Errorf("CRI log has %d lines, want %d: the journal's limit must not touch it", got, n)
	}
	unit := unitName(id)
	var journal int
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.CommandContext(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", unit, "CONTAINER_ID="+id).Output()
		journal = strings.Count(string(out), "line-")
		if strings.Contains(string(out), "after-the-window") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// journald scales the burst with free disk space (up to 16 times
	// here), so only bound it from both sides.
	if journal < 200 || journal >= n {
		t.Errorf("journal has %d of the %d lines, want the burst (200, scaled by free space) and not all", journal, n)
	}
	out, _ := exec.CommandContext(ctx, "journalctl", "--no-pager", "-o", "cat", "_TRANSPORT=driver").Output()
	if !strings.Contains(string(out), "messages from "+unit) {
		t.Errorf("journald did not report suppressing %s's lines:\n%s", unit, out)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

// logDiskFull: the pod log directory is a 64 KiB tmpfs, full. The
// container's lines are longer than a page (a shorter one could still fit
// in the slack of the file's last page), so every write fails; the
// container is not held up; the relay counts the
// ENOSPC writes and reports the stream failing (podunit's metrics read
// this); once space returns the next line is written to the same file and
// nothing is failing any more.
func (ie *inside) logDiskFull(ctx context.Context, t *testing.T) {
	dir := filepath.Join(itestDir, "fulllogs")
	os.MkdirAll(dir, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "podunit-itest-full", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	filler := filepath.Join(dir, "filler")
	ff, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = ff.Write(bytes.Repeat([]byte("f"), 4096))
	}
	ff.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	deps := ie.deps
	deps.Pods = itestPods{logDir: dir}
	m, err := New(ie.opts, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	relay := logrelay.Client{Socket: ie.opts.LogRelaySocket}
	before, err := relay.Stats(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id := ie.run(ctx, t, m, shConfig("full", `line=$(head -c 5000 /dev/zero | tr '\0' x); i=0
while [ $i -lt 10 ]; do echo "$i $line"; i=$((i+1)); done
touch /tmp/phase1; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo after-space-returned; sleep 1000`))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, code, _ := m.ExecSync(ctx, id, []string{"test", "-e", "/tmp/phase1"}, 5); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the container did not get past its output: held up by the full log file system")
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := relay.Stats(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.NoSpaceErrors <= before.NoSpaceErrors || st.FailingStreams != before.FailingStreams+1 {
		t.Fatalf("relay stats %+v (before %+v): want more no-space errors and one more failing stream", st, before)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, _, code, err := m.ExecSync(ctx, id, []string{"touch", "/tmp/go"}, 5); code != 0 || err != nil {
		t.Fatalf("touch /tmp/go: %d %v", code, err)
	}
	logPath := filepath.Join(dir, "full.log")
	deadline = time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		st, err = relay.Stats(5 * time.Second)
		if err == nil && strings.Contains(string(b), " stdout F after-space-returned\n") && st.FailingStreams == before.FailingStreams {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after space returned: stats %+v (%v), log file ends %q", st, err, b[max(0, len(b)-200):])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}
