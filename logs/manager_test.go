package logs

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
)

func newTestManager(t *testing.T, stateDir string, j *fakeJournal, commit time.Duration) *Manager {
	t.Helper()
	m, err := New(Options{StateDir: stateDir, Source: j, CommitInterval: commit})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func flush(t *testing.T, m *Manager, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Flush(ctx, id); err != nil {
		t.Fatalf("Flush(%s): %v", id, err)
	}
}

func readCRI(t *testing.T, path string) []criLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := parseCRI(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return lines
}

func TestManagerWritesCRILog(t *testing.T) {
	dir := t.TempDir()
	j := newFakeJournal()
	j.add("c1", Stdout, "before registration", "")
	m := newTestManager(t, filepath.Join(dir, "state"), j, time.Hour)
	defer m.Close()
	logPath := filepath.Join(dir, "pods", "ns_pod_uid", "ctr", "0.log")
	if err := os.MkdirAll(filepath.Join(dir, "pods", "ns_pod_uid"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.Register("c1", logPath, -1, -1); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 48<<10)
	j.add("c1", Stdout, "hello", "")
	j.add("c2", Stdout, "other container", "")
	j.add("c1", Stderr, "err one", "")
	j.add("c1", Stdout, big, "line-max")
	j.add("c1", Stdout, "end of big", "")
	j.add("c1", Stderr, "nul", "nul")
	j.add("c1", Stdout, "\xff\xfe binary", "")
	j.add("c1", Stderr, "no newline", "eof")
	flush(t, m, "c1")

	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	j.mu.Lock()
	for _, e := range j.entries[1:] {
		if e.ContainerID == "c1" {
			want = AppendCRI(want, e.Time, e.Stream, e.Message, e.Complete())
		}
	}
	j.mu.Unlock()
	if string(data) != string(want) {
		t.Fatalf("file:\n%s\nwant:\n%s", trunc(string(data)), trunc(string(want)))
	}
	got := logical(readCRI(t, logPath))
	if strings.Join(got[Stdout], "|") != "hello|"+big+"end of big|\xff\xfe binary" {
		t.Fatalf("stdout lines: %q", trunc(strings.Join(got[Stdout], "|")))
	}
	if strings.Join(got[Stderr], "|") != "err one|nul|no newline" {
		t.Fatalf("stderr lines: %q", got[Stderr])
	}
	if !strings.Contains(string(data), " stdout P "+strings.Repeat("x", MaxLineSize)+"\n") {
		t.Fatal("48 KiB journal line not split into 16 KiB partial lines")
	}
}

func TestManagerRegisterRules(t *testing.T) {
	dir := t.TempDir()
	j := newFakeJournal()
	m, err := New(Options{StateDir: dir, Source: j})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Register("c", filepath.Join(dir, "a.log"), 0, 0); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("Register before Start: %v", err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Register("c", "rel/a.log", 0, 0); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("relative path: %v", err)
	}
	if err := m.Register("../c", filepath.Join(dir, "a.log"), 0, 0); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
	if err := m.Register("c", filepath.Join(dir, "a.log"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Register("c", filepath.Join(dir, "a.log"), 0, 0); err != nil {
		t.Fatalf("same registration again: %v", err)
	}
	if err := m.Register("c", filepath.Join(dir, "b.log"), 0, 0); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("other path: %v", err)
	}
	if err := m.Reopen("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Reopen unknown: %v", err)
	}
	if err := m.Flush(context.Background(), "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Flush unknown: %v", err)
	}
	if got := strings.Join(m.Containers(), ","); got != "c" {
		t.Fatalf("Containers() = %s", got)
	}
}

func TestManagerOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("must run as root (chown)")
	}
	dir := t.TempDir()
	podDir := filepath.Join(dir, "pod")
	if err := os.Mkdir(podDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(podDir, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, filepath.Join(dir, "state"), newFakeJournal(), time.Hour)
	defer m.Close()
	if err := m.Register("c1", filepath.Join(podDir, "ctr", "0.log"), -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := m.Register("c2", filepath.Join(podDir, "1.log"), 42, -1); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][2]uint32{
		filepath.Join(podDir, "ctr"):       {1234, 5678},
		filepath.Join(podDir, "ctr/0.log"): {1234, 5678},
		filepath.Join(podDir, "1.log"):     {42, 5678},
	} {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, want[0], want[1])
		}
	}
}

func TestManagerReopenAndUnregister(t *testing.T) {
	dir := t.TempDir()
	j := newFakeJournal()
	m := newTestManager(t, filepath.Join(dir, "state"), j, time.Hour)
	defer m.Close()
	logPath := filepath.Join(dir, "0.log")
	if err := m.Register("c1", logPath, 0, 0); err != nil {
		t.Fatal(err)
	}
	j.add("c1", Stdout, "one", "")
	j.add("c1", Stdout, "two", "")
	flush(t, m, "c1")
	rotated := logPath + ".20261130-140000"
	if err := os.Rename(logPath, rotated); err != nil {
		t.Fatal(err)
	}
	if err := m.Reopen("c1"); err != nil {
		t.Fatal(err)
	}
	j.add("c1", Stdout, "three", "")
	flush(t, m, "c1")
	if got := logical(readCRI(t, rotated))[Stdout]; strings.Join(got, ",") != "one,two" {
		t.Fatalf("rotated file: %q", got)
	}
	if got := logical(readCRI(t, logPath))[Stdout]; strings.Join(got, ",") != "three" {
		t.Fatalf("new file: %q", got)
	}
	if err := m.Unregister("c1"); err != nil {
		t.Fatal(err)
	}
	j.add("c1", Stdout, "after removal", "")
	if err := m.Flush(context.Background(), "c1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Flush after Unregister: %v", err)
	}
	if got := logical(readCRI(t, logPath))[Stdout]; strings.Join(got, ",") != "three" {
		t.Fatalf("file after Unregister: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "logs", "c1.json")); !os.IsNotExist(err) {
		t.Fatalf("state file left: %v", err)
	}
	if err := m.Unregister("c1"); err != nil {
		t.Fatalf("second Unregister: %v", err)
	}
}

// TestManagerExactlyOnceAcrossCrashes kills the manager (no commit) at
// random points while two containers print on two streams, sometimes leaves
// a torn tail as a crash mid-write would, restarts it without registering
// anything again, and checks that every line is in the file once, in order.
func TestManagerExactlyOnceAcrossCrashes(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	j := newFakeJournal()
	rng := rand.New(rand.NewSource(1))
	ids := []string{"c1", "c2"}
	m := newTestManager(t, state, j, time.Millisecond)
	for _, id := range ids {
		if err := m.Register(id, filepath.Join(dir, id+".log"), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	const total = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i++ {
			id := ids[i%2]
			s := Stdout
			if i%3 == 0 {
				s = Stderr
			}
			msg := fmt.Sprintf("%s %s %06d", id, s, i)
			if i%97 == 0 {
				// a long line journald cut in two
				j.add(id, s, msg+" "+strings.Repeat("y", 20000), "line-max")
				j.add(id, s, "tail", "")
			} else {
				j.add(id, s, msg, "")
			}
			if i%500 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	for crash := 0; crash < 25; crash++ {
		time.Sleep(time.Duration(rng.Intn(8)) * time.Millisecond)
		m.abandoned = true
		m.Close()
		if crash%3 == 0 {
			// a crash in the middle of a write leaves a torn line
			f, err := os.OpenFile(filepath.Join(dir, ids[crash%2]+".log"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("2026-11-30T14:00:00Z stdout F torn")
			f.Close()
		}
		m = newTestManager(t, state, j, time.Duration(rng.Intn(3))*time.Millisecond+time.Millisecond)
		if got := strings.Join(m.Containers(), ","); got != "c1,c2" {
			t.Fatalf("after restart: containers %s", got)
		}
	}
	wg.Wait()
	for _, id := range ids {
		flush(t, m, id)
	}
	m.Close()
	for k, id := range ids {
		got := logical(readCRI(t, filepath.Join(dir, id+".log")))
		for _, s := range []Stream{Stdout, Stderr} {
			var want []string
			for i := 0; i < total; i++ {
				if i%2 != k || (i%3 == 0) != (s == Stderr) {
					continue
				}
				msg := fmt.Sprintf("%s %s %06d", id, s, i)
				if i%97 == 0 {
					msg += " " + strings.Repeat("y", 20000) + "tail"
				}
				want = append(want, msg)
			}
			if len(got[s]) != len(want) {
				t.Fatalf("%s %s: %d lines, want %d", id, s, len(got[s]), len(want))
			}
			for i := range want {
				if got[s][i] != want[i] {
					t.Fatalf("%s %s line %d: %q, want %q", id, s, i, trunc(got[s][i]), trunc(want[i]))
				}
			}
		}
	}
}

// TestManagerFileReplacedWhileDown: the kubelet rotated the file while
// podunit was down (rename without a successful reopen): the writer starts
// a new file at the path instead of cutting someone else's file.
func TestManagerFileReplacedWhileDown(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	j := newFakeJournal()
	m := newTestManager(t, state, j, time.Hour)
	logPath := filepath.Join(dir, "0.log")
	if err := m.Register("c1", logPath, 0, 0); err != nil {
		t.Fatal(err)
	}
	j.add("c1", Stdout, "one", "")
	flush(t, m, "c1")
	m.Close()
	if err := os.Rename(logPath, logPath+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("2026-11-30T14:00:00Z stdout F not ours but kept\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	j.add("c1", Stdout, "two", "")
	m = newTestManager(t, state, j, time.Hour)
	defer m.Close()
	flush(t, m, "c1")
	if got := logical(readCRI(t, logPath))[Stdout]; strings.Join(got, ",") != "not ours but kept,two" {
		t.Fatalf("file: %q", got)
	}
	if got := logical(readCRI(t, logPath+".old"))[Stdout]; strings.Join(got, ",") != "one" {
		t.Fatalf("old file: %q", got)
	}
}

// TestManagerIdleContainerAdvances: a quiet container's recorded position
// follows the journal, so a restart does not re-read what others printed.
func TestManagerIdleContainerAdvances(t *testing.T) {
	dir := t.TempDir()
	j := newFakeJournal()
	m := newTestManager(t, filepath.Join(dir, "state"), j, time.Millisecond)
	defer m.Close()
	for _, id := range []string{"busy", "quiet"} {
		if err := m.Register(id, filepath.Join(dir, id+".log"), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ {
		j.add("busy", Stdout, "x", "")
	}
	flush(t, m, "busy")
	var quietPos Position
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_ = m.call(func() error { quietPos = m.writers["quiet"].pos; return nil })
		if quietPos.Seqnum == 10 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("quiet container's position %+v, want seqnum 10", quietPos)
}
