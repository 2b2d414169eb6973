//go:build integration

package logs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
)

// The integration tests run a real journald (the harness' systemd) and a
// transient unit whose stdout and stderr are two journal streams, like a
// container unit's; the Manager runs on the host and reads the harness'
// journal with journalctl --directory.

// genScript connects fds 1 and 2 to journald as two streams (stdout at
// priority 6, stderr at 3, as podunit's stdio wrapper does) and prints what
// the mode asks for.
const genScript = `import os, socket, sys, time
unit, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def stream(prio):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect('/run/systemd/journal/stdout')
    s.shutdown(socket.SHUT_RD)
    s.sendall(("gen\n%s\n%d\n0\n0\n0\n0\n" % (unit, prio)).encode())
    return s
o, e = stream(6), stream(3)
os.dup2(o.fileno(), 1); os.dup2(e.fileno(), 2)
out = os.fdopen(1, 'wb', 1 << 16); err = os.fdopen(2, 'wb', 1 << 16)
if mode == 'mixed':
    for i in range(n):
        out.write(b'out %d\n' % i); out.flush()
        err.write(b'err %d\n' % i); err.flush()
    out.write(b'L' * (100 << 10) + b'\n'); out.flush()
    err.write(b'abc'); err.flush(); time.sleep(0.2); err.write(b'def\n'); err.flush()
    out.write(b'bin \xff\xfe\n'); out.flush()
    out.write(b'no newline at exit'); out.flush()
    err.write(b'stderr without newline'); err.flush()
elif mode == 'burst':
    for i in range(n):
        (out if i % 2 == 0 else err).write(b'%s %07d\n' % (b'out' if i % 2 == 0 else b'err', i))
elif mode == 'big':
    line = b'B' * 4090
    for i in range(n):
        out.write(b'%05d ' % i + line + b'\n')
out.flush(); err.flush()
`

func TestMain(m *testing.M) {
	if os.Getenv("PODUNIT_LOGS_CHILD") != "" {
		runChild()
		return
	}
	os.Exit(m.Run())
}

// runChild is a podunit stand-in for kill -9 tests: a Manager in its own
// process that registers one container and runs until killed.
func runChild() {
	m, err := New(Options{
		StateDir:       os.Getenv("PODUNIT_LOGS_STATE"),
		JournalctlArgs: []string{"--directory", os.Getenv("PODUNIT_LOGS_JOURNAL")},
		CommitInterval: 20 * time.Millisecond,
	})
	if err == nil {
		err = m.Start(context.Background())
	}
	if err == nil {
		err = m.Register(os.Getenv("PODUNIT_LOGS_ID"), os.Getenv("PODUNIT_LOGS_PATH"), 0, 0)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

type env struct {
	h       *harness.Harness
	dir     string
	script  string
	journal string
	state   string
}

func setup(t *testing.T) *env {
	dir, err := os.MkdirTemp("", "pulogs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	script := filepath.Join(dir, "gen.py")
	if err := os.WriteFile(script, []byte(genScript), 0o644); err != nil {
		t.Fatal(err)
	}
	h := harness.Start(t, harness.Options{Binds: []string{dir}})
	return &env{h: h, dir: dir, script: script, journal: h.JournalDir(), state: filepath.Join(dir, "state")}
}

// run starts the generator as a transient unit carrying a container's
// journal fields; with wait it returns once the unit has ended.
func (e *env) run(t *testing.T, unit string, id Identity, wait bool, mode string, n int) time.Duration {
	args := []string{"systemd-run", "--quiet", "--unit", unit, "--collect",
		"-p", "LogRateLimitIntervalSec=0"}
	for _, f := range ExtraFields(id) {
		args = append(args, "-p", "LogExtraFields="+f)
	}
	if wait {
		args = append(args, "--wait")
	}
	args = append(args, "python3", e.script, unit+".service", mode, strconv.Itoa(n))
	start := time.Now()
	out, err := e.h.ExecTimeout(5*time.Minute, args...)
	if err != nil {
		t.Fatalf("systemd-run: %v\n%s", err, out)
	}
	return time.Since(start)
}

// settle waits for the unit to end and journald to store all it received.
func (e *env) settle(t *testing.T, unit string) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out, _ := e.h.Exec("systemctl", "is-active", unit+".service")
		if s := strings.TrimSpace(out); s == "inactive" || s == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unit %s still running", unit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.h.MustExec("journalctl", "--sync")
}

func (e *env) manager(t *testing.T) *Manager {
	m, err := New(Options{StateDir: e.state, JournalctlArgs: []string{"--directory", e.journal}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func flushIt(t *testing.T, m *Manager, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Flush(ctx, id); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func TestIntegrationStreamsAndFields(t *testing.T) {
	e := setup(t)
	m := e.manager(t)
	id := Identity{PodNamespace: "ns", PodName: "web", PodUID: "uid-1", ContainerName: "app", ContainerID: "ctr1", Attempt: 3}
	logPath := filepath.Join(e.dir, "pods", "ns_web_uid-1", "app", "3.log")
	if err := m.Register(id.ContainerID, logPath, 0, 0); err != nil {
		t.Fatal(err)
	}
	e.run(t, "gen-mixed", id, true, "mixed", 50)
	e.settle(t, "gen-mixed")
	flushIt(t, m, id.ContainerID)

	lines := readCRI(t, logPath)
	for _, l := range lines {
		if len(l.Text) > MaxLineSize {
			t.Fatalf("CRI line of %d bytes", len(l.Text))
		}
	}
	got := logical(lines)
	var wantOut, wantErr []string
	for i := 0; i < 50; i++ {
		wantOut = append(wantOut, fmt.Sprintf("out %d", i))
		wantErr = append(wantErr, fmt.Sprintf("err %d", i))
	}
	wantOut = append(wantOut, strings.Repeat("L", 100<<10), "bin \xff\xfe", "no newline at exit")
	wantErr = append(wantErr, "abcdef", "stderr without newline")
	if strings.Join(got[Stdout], "\n") != strings.Join(wantOut, "\n") {
		t.Errorf("stdout lines:\n%q\nwant\n%q", trunc(strings.Join(got[Stdout], "|")), trunc(strings.Join(wantOut, "|")))
	}
	if strings.Join(got[Stderr], "\n") != strings.Join(wantErr, "\n") {
		t.Errorf("stderr lines:\n%q\nwant\n%q", got[Stderr], wantErr)
	}
	// the 100 KiB line: journald cut it at LineMax (48 KiB), podunit at 16 KiB
	nP := 0
	for _, l := range lines {
		if l.Stream == Stdout && l.Tag == 'P' && strings.HasPrefix(l.Text, "L") {
			nP++
		}
	}
	if nP != 6 {
		t.Errorf("100 KiB line as %d partial lines, want 6 (two 48 KiB journal entries of 3 pieces each)", nP)
	}

	// journal side: the container's fields and the stream priorities
	out, err := exec.Command("journalctl", "--directory", e.journal, "-o", "json", "-a", "CONTAINER_ID=ctr1").Output()
	if err != nil {
		t.Fatal(err)
	}
	prios := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var f map[string]any
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{FieldLog: "1", FieldPodNamespace: "ns", FieldPodName: "web", FieldPodUID: "uid-1",
			FieldContainerName: "app", FieldContainerAttempt: "3", "_SYSTEMD_UNIT": "gen-mixed.service"} {
			if f[k] != v {
				t.Fatalf("journal entry %s=%v, want %s", k, f[k], v)
			}
		}
		msg, _ := f["MESSAGE"].(string)
		prios[fmt.Sprint(f["PRIORITY"])+" "+strings.Fields(msg + " x")[0]]++
	}
	if prios["6 out"] != 50 || prios["3 err"] != 50 {
		t.Errorf("journal priorities by line kind: %v", prios)
	}
}

// childManager is a Manager in another process, to be killed with SIGKILL.
type childManager struct{ cmd *exec.Cmd }

func (e *env) startChild(t *testing.T, id, logPath string) *childManager {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PODUNIT_LOGS_CHILD=1", "PODUNIT_LOGS_STATE="+e.state,
		"PODUNIT_LOGS_JOURNAL="+e.journal, "PODUNIT_LOGS_ID="+id, "PODUNIT_LOGS_PATH="+logPath)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child manager: %q", line)
	}
	return &childManager{cmd: cmd}
}

func (c *childManager) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

func checkBurst(t *testing.T, logPath string, n int) {
	got := logical(readCRI(t, logPath))
	for k, s := range []Stream{Stdout, Stderr} {
		want := (n + 1 - k) / 2
		if len(got[s]) != want {
			t.Errorf("%s: %d lines, want %d", s, len(got[s]), want)
		}
		for j, l := range got[s] {
			w := fmt.Sprintf("%s %07d", []string{"out", "err"}[k], 2*j+k)
			if l != w {
				t.Fatalf("%s line %d: %q, want %q", s, j, l, w)
			}
		}
	}
}

// TestIntegrationKillDuringBurst: 200k lines; the manager is SIGKILLed and
// restarted several times while they flow; every line ends up in the file
// exactly once, in order per stream.
func TestIntegrationKillDuringBurst(t *testing.T) {
	e := setup(t)
	const n = 200000
	id := Identity{PodNamespace: "ns", PodName: "burst", PodUID: "u", ContainerName: "c", ContainerID: "burst1"}
	logPath := filepath.Join(e.dir, "pods", "burst.log")
	c := e.startChild(t, id.ContainerID, logPath)
	e.run(t, "gen-burst", id, false, "burst", n)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for i := 0; i < 8; i++ {
		time.Sleep(time.Duration(50+rng.Intn(400)) * time.Millisecond)
		c.kill()
		if st, err := os.Stat(logPath); err == nil {
			t.Logf("killed the manager with %d bytes in the log", st.Size())
		}
		time.Sleep(time.Duration(rng.Intn(300)) * time.Millisecond)
		c = e.startChild(t, id.ContainerID, logPath)
	}
	e.settle(t, "gen-burst")
	c.kill()
	m := e.manager(t)
	flushIt(t, m, id.ContainerID)
	checkBurst(t, logPath, n)
}

// TestIntegrationNoBlockWhileDown: with the manager down, a container
// prints 64 MiB; journald absorbs it so the unit finishes, and the
// restarted manager writes all of it.
func TestIntegrationNoBlockWhileDown(t *testing.T) {
	e := setup(t)
	const n = 16384 // lines of 4 KiB: 64 MiB
	id := Identity{PodNamespace: "ns", PodName: "big", PodUID: "u", ContainerName: "c", ContainerID: "big1"}
	logPath := filepath.Join(e.dir, "pods", "big.log")
	c := e.startChild(t, id.ContainerID, logPath)
	c.kill()
	took := e.run(t, "gen-big", id, true, "big", n)
	t.Logf("64 MiB printed with the manager down in %v", took)
	e.settle(t, "gen-big")
	m := e.manager(t)
	start := time.Now()
	flushIt(t, m, id.ContainerID)
	t.Logf("caught up in %v", time.Since(start))
	got := logical(readCRI(t, logPath))[Stdout]
	if len(got) != n {
		t.Fatalf("%d lines, want %d", len(got), n)
	}
	for i, l := range got {
		if !strings.HasPrefix(l, fmt.Sprintf("%05d B", i)) || len(l) != 6+4090 {
			t.Fatalf("line %d: %q", i, trunc(l))
		}
	}
}

// TestIntegrationCatchUpRate reports how fast the manager turns journal
// entries into CRI lines (200k short lines already in the journal).
func TestIntegrationCatchUpRate(t *testing.T) {
	e := setup(t)
	const n = 200000
	id := Identity{PodNamespace: "ns", PodName: "rate", PodUID: "u", ContainerName: "c", ContainerID: "rate1"}
	logPath := filepath.Join(e.dir, "pods", "rate.log")
	c := e.startChild(t, id.ContainerID, logPath)
	c.kill()
	took := e.run(t, "gen-rate", id, true, "burst", n)
	e.settle(t, "gen-rate")
	t.Logf("journald took %v for %d lines (%.0f lines/s)", took, n, n/took.Seconds())
	m := e.manager(t)
	start := time.Now()
	flushIt(t, m, id.ContainerID)
	d := time.Since(start)
	st, err := os.Stat(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manager caught up in %v: %.0f lines/s, %.1f MB/s of CRI log", d, n/d.Seconds(), float64(st.Size())/1e6/d.Seconds())
	checkBurst(t, logPath, n)
}
