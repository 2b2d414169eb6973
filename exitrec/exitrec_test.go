package exitrec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
)

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		rec  Record
		want int32
	}{
		{Record{ExitCode: "exited", ExitStatus: "0"}, 0},
		{Record{ExitCode: "exited", ExitStatus: "7"}, 7},
		{Record{ExitCode: "killed", ExitStatus: "TERM"}, 143},
		{Record{ExitCode: "killed", ExitStatus: "KILL"}, 137},
		{Record{ExitCode: "dumped", ExitStatus: "SEGV"}, 139},
		{Record{ExitCode: "killed", ExitStatus: "9"}, 137},
		{Record{ServiceResult: "exit-code"}, 128},
	} {
		if got := c.rec.Status(); got != c.want {
			t.Errorf("%+v: Status() = %d, want %d", c.rec, got, c.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs([]string{"--cgroup", "/a.slice/u.service", "/var/lib/c", "--", "runc", "delete", "--force", "x"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Dir != "/var/lib/c" || o.CgroupPath != "/a.slice/u.service" || len(o.Argv) != 4 {
		t.Errorf("got %+v", o)
	}
	for _, bad := range [][]string{{}, {"dir", "extra"}, {"dir", "--"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) accepted", bad)
		}
	}
}

func TestMainRecordsAndRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ctr")
	if _, err := Read(dir); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Read before write: %v", err)
	}
	marker := filepath.Join(t.TempDir(), "deleted")
	t.Setenv("SERVICE_RESULT", "exit-code")
	t.Setenv("EXIT_CODE", "exited")
	t.Setenv("EXIT_STATUS", "7")
	before := time.Now().UnixNano()
	if rc := Main([]string{"--cgroup-root", t.TempDir(), "--cgroup", "/x.service", dir, "--", "touch", marker}); rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	r, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status() != 7 || r.ServiceResult != "exit-code" || r.OOMKilled || r.FinishedAt < before {
		t.Errorf("record %+v", r)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("delete command did not run: %v", err)
	}
}

func TestOOMKills(t *testing.T) {
	v1 := t.TempDir()
	unit := "/pod.slice/podunit-ctr-x.service"
	mk := func(p, content string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(v1, "memory", unit, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
	if n := OOMKills(v1, unit); n != 0 {
		t.Errorf("v1 no kill: %d", n)
	}
	mk(filepath.Join(v1, "memory", unit, "container", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	if n := OOMKills(v1, unit); n != 1 {
		t.Errorf("v1 kill in container cgroup: %d", n)
	}
	v2 := t.TempDir()
	mk(filepath.Join(v2, "cgroup.controllers"), "memory pids\n")
	mk(filepath.Join(v2, unit, "memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
	if n := OOMKills(v2, unit); n != 2 {
		t.Errorf("v2: %d", n)
	}
	if n := OOMKills(v2, ""); n != 0 {
		t.Errorf("no cgroup: %d", n)
	}
}

func TestOOMResultFromSystemd(t *testing.T) {
	env := map[string]string{"SERVICE_RESULT": "oom-kill", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"}
	r := FromEnv(func(k string) string { return env[k] }, time.Unix(5, 0))
	if !r.OOMKilled || r.Status() != 137 || r.FinishedAt != 5e9 {
		t.Errorf("%+v", r)
	}
}

// Processes left in the unit's cgroup are killed, the caller is not.
func TestKillRestKillsAllButTheCaller(t *testing.T) {
	root := t.TempDir()
	unit := "/a.slice/u.service"
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	done := make(chan struct{})
	go func() { child.Wait(); close(done) }()
	dir := filepath.Join(root, "systemd", unit, "container")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	procs := fmt.Sprintf("%d\n%d\n", os.Getpid(), child.Process.Pid)
	os.WriteFile(filepath.Join(root, "systemd", unit, "cgroup.procs"), []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644)
	os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(procs), 0o644)
	// A fake cgroupfs does not drop dead processes: clear the file once
	// the child is gone, as the kernel would.
	go func() {
		<-done
		os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644)
	}()
	if n := KillRest(root, unit, 5*time.Second); n != 1 {
		t.Fatalf("killed %d, want 1", n)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process left in the unit still runs")
	}
	if KillRest(root, "", time.Second) != 0 || KillRest(root, "/no/such.service", time.Second) != 0 {
		t.Fatal("killed something without a cgroup")
	}
}
