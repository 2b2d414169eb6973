package stats

import (
	"os"
	"path/filepath"
	"testing"
)

func layoutV2(t *testing.T, src, path string) *Reader {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join("testdata", src))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata", src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return NewReaderWith(ReaderOptions{V2Root: root})
}

// Files captured in the cgroup v2 VM from a unit with MemoryMax=64M and
// TasksMax=40 that holds 20 MB of shmem and burns a core.
func TestReadV2Fixture(t *testing.T) {
	const unit = "/system.slice/fx-run.service"
	r := layoutV2(t, "v2/running", unit)
	if r.Version() != 2 {
		t.Fatal("not v2")
	}
	st, err := r.Read("k", unit)
	if err != nil {
		t.Fatal(err)
	}
	if st.CPU == nil || st.CPU.UsageNanos != 6714643000 {
		t.Fatalf("cpu = %+v", st.CPU)
	}
	m := st.Memory
	if m == nil || m.Usage != 20283392 || m.WorkingSet != 20283392-45056 || m.RSS != 106496 ||
		m.PageFaults != 171 || m.MajorPageFaults != 1 || m.Limit != 64<<20 || m.Available == nil ||
		*m.Available != 64<<20-(20283392-45056) || m.OOMKills != 0 {
		t.Fatalf("memory = %+v", m)
	}
	if st.Swap == nil || st.Swap.Usage != 0 || st.Swap.Limit != 0 || st.Swap.Available != nil {
		t.Fatalf("swap = %+v", st.Swap)
	}
	if st.Pids == nil || st.Pids.Current != 1 || st.Pids.Limit != 40 {
		t.Fatalf("pids = %+v", st.Pids)
	}
	if ok, err := r.OOMKilled(unit); ok || err != nil {
		t.Fatalf("OOMKilled = %v, %v", ok, err)
	}
}

// memory.events read by the unit's ExecStopPost after `tail /dev/zero`
// hit MemoryMax=32M (systemd reported Result=oom-kill).
func TestOOMV2Fixture(t *testing.T) {
	const unit = "/system.slice/fx-oom.service"
	r := layoutV2(t, "v2/oom", unit)
	k, under, err := r.OOMCount(unit)
	if err != nil || k != 1 || under {
		t.Fatalf("OOMCount = %d, %v, %v", k, under, err)
	}
}

func TestV1CPUFallbackSchedstat(t *testing.T) {
	root := t.TempDir()
	mounts := map[string]string{"name=systemd": filepath.Join(root, "systemd"), "cpuacct": filepath.Join(root, "cpuacct")}
	proc := filepath.Join(root, "proc")
	const unit = "/p.slice/c.service"
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(mounts["name=systemd"], unit, "cgroup.procs"), "10\n")
	write(filepath.Join(mounts["name=systemd"], unit, "container", "cgroup.procs"), "20\n99\n")
	write(filepath.Join(proc, "10/task/10/schedstat"), "1000 5 6\n")
	write(filepath.Join(proc, "20/task/20/schedstat"), "200 5 6\n")
	write(filepath.Join(proc, "20/task/21/schedstat"), "30 5 6\n")
	r := NewReaderWith(ReaderOptions{V1Mounts: mounts, ProcRoot: proc})
	st, err := r.Read("", unit)
	if err != nil {
		t.Fatal(err)
	}
	// pid 99 exited between listing and reading: counted as zero.
	if st.CPU == nil || st.CPU.UsageNanos != 1230 {
		t.Fatalf("cpu = %+v", st.CPU)
	}
	if st.Memory != nil || st.Pids != nil {
		t.Fatalf("controllers without hierarchy reported: %+v", st)
	}
}
