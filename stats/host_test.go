package stats

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain doubles as the workload for TestHostV1Live: with
// PODUNIT_STATS_HELPER set the test binary allocates 64 MiB, burns CPU
// for a second and waits to be measured.
func TestMain(m *testing.M) {
	if os.Getenv("PODUNIT_STATS_HELPER") != "" {
		// Wait until the test has moved us into the cgroup.
		_, _ = os.Stdin.Read(make([]byte, 1))
		b := make([]byte, 64<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		// Burn one second of CPU time, however busy the machine is.
		for {
			var ru unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
			if time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= time.Second {
				break
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		b[0]++
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// On this project's v1 hosts, reads a real cgroup holding a process that
// allocated 64 MiB and burned a second of CPU.
func TestHostV1Live(t *testing.T) {
	r, err := Host()
	if err != nil {
		t.Fatal(err)
	}
	if r.Version() != 1 || os.Geteuid() != 0 {
		t.Skip("live v1 test needs root on a v1/hybrid host; v2 is covered by the VM tier")
	}
	path := fmt.Sprintf("/podunit-stats-test-%d", os.Getpid())
	var dirs []string
	for _, c := range []string{"memory", "cpuacct", "pids"} {
		d := r.v1Dir(c, path)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PODUNIT_STATS_HELPER=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for _, d := range dirs {
			for i := 0; i < 50 && os.Remove(d) != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	st, err := r.Read("live", path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Memory == nil || st.Memory.WorkingSet < 64<<20 || st.Memory.RSS < 60<<20 || st.Memory.Limit != 0 || st.Memory.Available != nil {
		t.Fatalf("memory = %+v", st.Memory)
	}
	if st.CPU == nil || st.CPU.UsageNanos < 9e8 {
		t.Fatalf("cpu = %+v", st.CPU)
	}
	if st.Pids == nil || st.Pids.Current < 1 {
		t.Fatalf("pids = %+v", st.Pids)
	}
	if ok, err := r.OOMKilled(path); ok || err != nil {
		t.Fatalf("OOMKilled = %v, %v", ok, err)
	}
	x, err := r.ReadExtended("", path)
	if err != nil {
		t.Fatal(err)
	}
	if x.Processes != 1 || x.Threads < 2 || x.FileDescriptors < 3 || x.CPUUserNanos+x.CPUSystemNanos < 9e8 {
		t.Fatalf("extended = %+v", x)
	}
}

func TestReadExtendedFixtures(t *testing.T) {
	r := layoutV2(t, "v2/running", "/system.slice/fx-run.service")
	x, err := r.ReadExtended("", "/system.slice/fx-run.service")
	if err != nil {
		t.Fatal(err)
	}
	if x.CPUUserNanos != 6391824000 || x.CPUSystemNanos != 322819000 || x.MemoryCache != 20049920 ||
		x.MemoryKernel != 126976 || x.PgFaultHierarchy != 171 || x.ThreadsMax != 40 {
		t.Fatalf("v2 extended = %+v", x)
	}
	const unit = "/p.slice/c.service"
	r1 := layoutV1(t, "v1/running", unit)
	if err := os.WriteFile(filepath.Join(r1.v1["cpuacct"], unit, "cpuacct.stat"), []byte(fixture(t, "v1/running/cpuacct.stat")), 0o644); err != nil {
		t.Fatal(err)
	}
	x, err = r1.ReadExtended("", unit)
	if err != nil {
		t.Fatal(err)
	}
	if x.CPUUserNanos != 940_000_000 || x.CPUSystemNanos != 60_000_000 || x.MemoryCache != 1003520 ||
		x.PgFaultHierarchy != 15009 || x.PgFaultContainer != 0 || x.ThreadsMax != 50 {
		t.Fatalf("v1 extended = %+v", x)
	}
}
