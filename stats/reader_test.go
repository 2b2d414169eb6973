package stats

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
)

// layoutV1 copies the captured v1 files into a hybrid-like tree where cpu
// and cpuacct are separate hierarchies, as on the test hosts.
func layoutV1(t *testing.T, src, path string) *Reader {
	t.Helper()
	root := t.TempDir()
	mounts := map[string]string{}
	for _, c := range []string{"memory", "cpuacct", "cpu", "pids", "name=systemd"} {
		mounts[c] = filepath.Join(root, c)
	}
	copyInto := func(ctrl, rel, name string) {
		b, err := os.ReadFile(filepath.Join("testdata", src, rel, name))
		if err != nil {
			return
		}
		d := filepath.Join(mounts[ctrl], path, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"", "child"} {
		for _, n := range []string{"memory.usage_in_bytes", "memory.limit_in_bytes", "memory.stat", "memory.memsw.usage_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control"} {
			copyInto("memory", rel, n)
		}
		copyInto("cpuacct", rel, "cpuacct.usage")
		copyInto("pids", rel, "pids.current")
		copyInto("pids", rel, "pids.max")
	}
	if err := os.MkdirAll(filepath.Join(mounts["name=systemd"], path), 0o755); err != nil {
		t.Fatal(err)
	}
	return NewReaderWith(ReaderOptions{V1Mounts: mounts})
}

func TestReadV1Fixture(t *testing.T) {
	const unit = "/podunit.slice/podunit-c1.service"
	r := layoutV1(t, "v1/running", unit)
	if r.Version() != 1 {
		t.Fatal("not v1")
	}
	// v1 hierarchies have no pressure files; these are planted in every
	// one of them so that a reader that looked for PSI on v1 would report
	// figures where the CRI must say "unknown".
	for _, mp := range r.v1 {
		copyFixture(t, "v2/psi", filepath.Join(mp, unit))
	}
	st, err := r.Read("c1", unit)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pressure != (Pressure{}) {
		t.Fatalf("v1 reported pressure: %+v", st.Pressure)
	}
	if st.CPU == nil || st.CPU.UsageNanos != 1005698331 || st.CPU.NanoCores != nil {
		t.Fatalf("cpu = %+v", st.CPU)
	}
	m := st.Memory
	if m == nil || m.Usage != 29753344 || m.WorkingSet != 29753344-1003520 || m.RSS != 28012544 ||
		m.PageFaults != 15009 || m.MajorPageFaults != 0 || m.Limit != 33554432 || m.Available == nil ||
		*m.Available != 33554432-(29753344-1003520) {
		t.Fatalf("memory = %+v", m)
	}
	if st.Swap == nil || st.Swap.Usage != 0 || st.Swap.Available != nil {
		t.Fatalf("swap = %+v", st.Swap)
	}
	if st.Pids == nil || st.Pids.Current != 2 || st.Pids.Limit != 50 {
		t.Fatalf("pids = %+v", st.Pids)
	}
	if _, err := r.Read("x", "/podunit.slice/gone.service"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing cgroup: %v", err)
	}
	if _, err := r.Read("x", "podunit.slice/../etc"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("relative path: %v", err)
	}
}

func TestReadRate(t *testing.T) {
	const unit = "/p.slice/c.service"
	r := layoutV1(t, "v1/running", unit)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	if _, err := r.Read("c", unit); err != nil {
		t.Fatal(err)
	}
	usage := filepath.Join(r.v1["cpuacct"], unit, "cpuacct.usage")
	if err := os.WriteFile(usage, []byte("1505698331\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	st, err := r.Read("c", unit)
	if err != nil {
		t.Fatal(err)
	}
	if st.CPU.NanoCores == nil || *st.CPU.NanoCores != 5e8 {
		t.Fatalf("nano cores = %v", st.CPU.NanoCores)
	}
	r.Forget("c")
	if st, _ = r.Read("c", unit); st.CPU.NanoCores != nil {
		t.Fatal("rate after Forget")
	}
	r.Keep(func(string) bool { return false })
	if len(r.last) != 0 {
		t.Fatal("Keep kept")
	}
}

func TestOOMV1CountsSubtree(t *testing.T) {
	const unit = "/podunit.slice/podunit-oom.service"
	r := layoutV1(t, "v1/oom", unit)
	// The kernel counted both kills in the container's own cgroup
	// ("child"), none in the unit's: captured on this host.
	k, under, err := r.OOMCount(unit)
	if err != nil || k != 2 || under {
		t.Fatalf("OOMCount = %d, %v, %v", k, under, err)
	}
	if ok, err := r.OOMKilled(unit); !ok || err != nil {
		t.Fatalf("OOMKilled = %v, %v", ok, err)
	}
	r2 := layoutV1(t, "v1/running", unit)
	if ok, err := r2.OOMKilled(unit); ok || err != nil {
		t.Fatalf("no OOM: %v, %v", ok, err)
	}
	if _, err := r2.OOMKilled("/nope.service"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

func TestV1OOMOldKernel(t *testing.T) {
	if k, u := V1OOM(map[string]uint64{"oom_kill_disable": 1, "under_oom": 1}); k != 0 || !u {
		t.Fatal("under_oom without counter not detected")
	}
}
