package stats

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func layoutV2(t *testing.T, src, path string) *Reader {
	t.Helper()
	root := t.TempDir()
	copyFixture(t, src, filepath.Join(root, path))
	return NewReaderWith(ReaderOptions{V2Root: root})
}

// copyFixture copies the files of testdata/src into dir, creating it.
func copyFixture(t *testing.T, src, dir string) {
	t.Helper()
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

// The *.pressure files of testdata/v2/psi were captured at the unified
// hierarchy's root on the development host (kernel 6.18); a unit's have the
// same format. Total is the kernel's microseconds in nanoseconds.
func TestReadV2Pressure(t *testing.T) {
	const unit = "/system.slice/fx-run.service"
	r := layoutV2(t, "v2/running", unit)
	dir := filepath.Join(r.v2Root, unit)
	copyFixture(t, "v2/psi", dir)
	st, err := r.Read("", unit)
	if err != nil {
		t.Fatal(err)
	}
	want := Pressure{
		CPU:    &PSIStats{Some: &PSIData{Avg10: 14.58, Avg60: 28.81, Avg300: 34.96, TotalNanos: 6427777130000}, Full: &PSIData{}},
		Memory: &PSIStats{Some: &PSIData{TotalNanos: 49961000}, Full: &PSIData{TotalNanos: 29235000}},
		IO:     &PSIStats{Some: &PSIData{Avg10: 1.80, Avg60: 1.43, Avg300: 1.16, TotalNanos: 292659222000}, Full: &PSIData{Avg10: 1.10, Avg60: 0.93, Avg300: 0.67, TotalNanos: 76597596000}},
	}
	if !reflect.DeepEqual(st.Pressure, want) {
		t.Fatalf("pressure = cpu %+v memory %+v io %+v", st.Pressure.CPU, st.Pressure.Memory, st.Pressure.IO)
	}

	// cpu.pressure of a kernel before 5.13 has no "full" line: Full is
	// unknown, not zero.
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cpu.pressure", "some avg10=0.50 avg60=0.10 avg300=0.02 total=1234\n")
	// A malformed file costs only its own part.
	write("memory.pressure", "some avg10=0.00\n")
	st, err = r.Read("", unit)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Pressure.CPU; c == nil || c.Full != nil || c.Some == nil || c.Some.TotalNanos != 1234000 || c.Some.Avg10 != 0.5 {
		t.Fatalf("cpu pressure without full = %+v", c)
	}
	if st.Pressure.Memory != nil || st.Pressure.IO == nil || st.Memory == nil || st.CPU == nil {
		t.Fatalf("malformed memory.pressure: %+v", st)
	}

	// A kernel without PSI (or psi=0, cgroup.pressure=0) has no files:
	// every part is absent while the other figures stay.
	for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	st, err = r.Read("", unit)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pressure != (Pressure{}) || st.CPU == nil || st.Memory == nil {
		t.Fatalf("without PSI files: %+v", st)
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
