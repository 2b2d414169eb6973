package stats

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
)

func fixture(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseFlatKeyed(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]uint64
		err      bool
	}{
		{"empty", "", map[string]uint64{}, false},
		{"oom_control", "oom_kill_disable 0\nunder_oom 1\noom_kill 3\n", map[string]uint64{"oom_kill_disable": 0, "under_oom": 1, "oom_kill": 3}, false},
		{"blank lines", "\na 1\n\n", map[string]uint64{"a": 1}, false},
		{"negative", "a -1\n", nil, true},
		{"no value", "a\n", nil, true},
		{"text value", "a b\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFlatKeyed(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			if !tc.err && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// A real v1 memory.stat captured on the test host.
	m, err := ParseFlatKeyed(fixture(t, "v1/running/memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	if m["total_rss"] != 28012544 || m["hierarchical_memory_limit"] != 33554432 {
		t.Fatalf("memory.stat parsed wrong: %v", m)
	}
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]uint64{
		"max\n":                 0,
		"9223372036854771712\n": 0, // v1 "no limit" on 4 KiB pages
		"9223372036854775807":   0,
		"33554432\n":            33554432,
		" 1048576 ":             1048576,
	} {
		got, err := ParseLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "maxx", "-1", "12k"} {
		if _, err := ParseLimit(in); err == nil {
			t.Errorf("ParseLimit(%q) succeeded", in)
		}
	}
}

func TestParseNetDev(t *testing.T) {
	got, err := ParseNetDev(fixture(t, "proc/net_dev"))
	if err != nil {
		t.Fatal(err)
	}
	want := []InterfaceStats{
		{Name: "lo", RxBytes: 74261166, RxPackets: 8711, TxBytes: 74261166, TxPackets: 8711},
		{Name: "ifb0"}, {Name: "ifb1"},
		{Name: "eth0", RxBytes: 378181878, RxPackets: 22950, TxBytes: 1885722, TxPackets: 19100},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	errs, err := ParseNetDev("h1\nh2\n eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n")
	if err != nil || errs[0] != (InterfaceStats{Name: "eth0", RxBytes: 1, RxPackets: 2, RxErrors: 3, RxDropped: 4,
		TxBytes: 9, TxPackets: 10, TxErrors: 11, TxDropped: 12}) {
		t.Fatalf("field positions wrong: %+v %v", errs, err)
	}
	if _, err := ParseNetDev("eth0: 1 2 3\n"); err == nil {
		t.Fatal("short line accepted")
	}
}

func TestParseCgroupMounts(t *testing.T) {
	v1, v2, err := ParseCgroupMounts(fixture(t, "proc/mountinfo_hybrid"))
	if err != nil {
		t.Fatal(err)
	}
	if v2 != "/sys/fs/cgroup/unified" {
		t.Errorf("v2 = %q", v2)
	}
	for c, mp := range map[string]string{
		"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct", "memory": "/sys/fs/cgroup/memory",
		"pids": "/sys/fs/cgroup/pids", "name=systemd": "/sys/fs/cgroup/systemd",
	} {
		if v1[c] != mp {
			t.Errorf("v1[%s] = %q, want %q", c, v1[c], mp)
		}
	}
	joined := "30 23 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n" +
		"31 23 0:28 / /sys/fs/cgroup/my\\040dir rw - cgroup2 cgroup2 rw,nsdelegate\n"
	v1, v2, err = ParseCgroupMounts(joined)
	if err != nil || v1["cpu"] != "/sys/fs/cgroup/cpu,cpuacct" || v1["cpuacct"] != v1["cpu"] || v2 != "/sys/fs/cgroup/my dir" {
		t.Fatalf("joined: %v %q %v", v1, v2, err)
	}
}

func TestNanoCores(t *testing.T) {
	t0 := time.Unix(100, 0)
	if v := NanoCores(t0, 1e9, t0.Add(2*time.Second), 3e9); v == nil || *v != 1e9 {
		t.Fatalf("one core over 2s: %v", v)
	}
	if v := NanoCores(t0, 1e9, t0.Add(time.Second), 1.5e9); v == nil || *v != 5e8 {
		t.Fatalf("half a core: %v", v)
	}
	if NanoCores(t0, 5, t0, 6) != nil {
		t.Fatal("empty interval gave a rate")
	}
	if NanoCores(t0, 6, t0.Add(time.Second), 5) != nil {
		t.Fatal("counter reset gave a rate")
	}
}

func FuzzParseFlatKeyed(f *testing.F) {
	f.Add("total_rss 1\ntotal_cache 2\n")
	f.Add(fixture(f, "v1/running/memory.stat"))
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseFlatKeyed(s)
		if err == nil && m == nil {
			t.Fatal("nil map without error")
		}
	})
}

func FuzzParseNetDev(f *testing.F) {
	f.Add(fixture(f, "proc/net_dev"))
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseNetDev(s)
		if err != nil {
			return
		}
		for _, i := range st {
			if i.Name == "" {
				t.Fatal("interface without a name")
			}
		}
	})
}

func FuzzParseCgroupMounts(f *testing.F) {
	f.Add(fixture(f, "proc/mountinfo_hybrid"))
	f.Fuzz(func(t *testing.T, s string) {
		_, _, _ = ParseCgroupMounts(s)
	})
}

func FuzzMemory(f *testing.F) {
	f.Add("29753344", "33554432", fixture(f, "v1/running/memory.stat"), "oom_kill 1")
	f.Fuzz(func(t *testing.T, usage, limit, stat, events string) {
		for _, m := range []*MemoryStats{
			first(V1Memory(V1MemoryFiles{Usage: usage, Limit: limit, Stat: stat, OOMControl: events})),
			first(V2Memory(V2MemoryFiles{Current: usage, Max: limit, Stat: stat, Events: events})),
		} {
			if m == nil {
				continue
			}
			if m.WorkingSet > m.Usage {
				t.Fatalf("working set %d above usage %d", m.WorkingSet, m.Usage)
			}
			if m.Available != nil && (m.Limit == 0 || *m.Available > m.Limit) {
				t.Fatalf("available %d with limit %d", *m.Available, m.Limit)
			}
		}
	})
}

func first(m *MemoryStats, _ *SwapStats) *MemoryStats { return m }

func TestParseCPUMax(t *testing.T) {
	for in, want := range map[string][2]int64{"max 100000\n": {-1, 100000}, "20000 100000": {20000, 100000}} {
		q, p, err := ParseCPUMax(in)
		if err != nil || q != want[0] || int64(p) != want[1] {
			t.Errorf("ParseCPUMax(%q) = %d %d %v", in, q, p, err)
		}
	}
	for _, in := range []string{"", "max", "-5 100000", "1 2 3", "x 100"} {
		if _, _, err := ParseCPUMax(in); err == nil {
			t.Errorf("ParseCPUMax(%q) succeeded", in)
		}
	}
}

func TestWeightToShares(t *testing.T) {
	// runc maps shares 1024 to weight 39 (CPUWeight 100 default is
	// shares 2597); the inverse lands near the original.
	for w, want := range map[uint64]uint64{0: 0, 1: 2, 100: 2597, 10000: 262144} {
		if got := WeightToShares(w); got != want {
			t.Errorf("WeightToShares(%d) = %d, want %d", w, got, want)
		}
	}
}

func TestParseCPUAcctStat(t *testing.T) {
	u, s, err := ParseCPUAcctStat(fixture(t, "v1/running/cpuacct.stat"))
	if err != nil || u != 940_000_000 || s != 60_000_000 {
		t.Fatalf("ParseCPUAcctStat = %d %d %v", u, s, err)
	}
}
