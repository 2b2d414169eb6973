package stats

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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

func TestParsePressure(t *testing.T) {
	const (
		some = "some avg10=1.80 avg60=1.43 avg300=1.16 total=292659222\n"
		full = "full avg10=1.10 avg60=0.93 avg300=0.67 total=76597596\n"
	)
	someData := &PSIData{Avg10: 1.80, Avg60: 1.43, Avg300: 1.16, TotalNanos: 292659222000}
	fullData := &PSIData{Avg10: 1.10, Avg60: 0.93, Avg300: 0.67, TotalNanos: 76597596000}
	for _, tc := range []struct {
		name, in string
		want     *PSIStats
	}{
		{"some and full", some + full, &PSIStats{Some: someData, Full: fullData}},
		// cpu.pressure before Linux 5.13 has no "full" line.
		{"cpu before 5.13", some, &PSIStats{Some: someData}},
		{"full first", full + some, &PSIStats{Some: someData, Full: fullData}},
		{"zeros", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			&PSIStats{Some: &PSIData{}, Full: &PSIData{}}},
		{"no trailing newline, blank line", "\n" + strings.TrimSuffix(some, "\n"), &PSIStats{Some: someData}},
		{"full stall", "some avg10=100.00 avg60=100.00 avg300=100.00 total=18446744073709551\n",
			&PSIStats{Some: &PSIData{Avg10: 100, Avg60: 100, Avg300: 100, TotalNanos: 18446744073709551000}}},
		{"field order and unknown key", "some total=5 avg300=0.01 future=7 avg60=0.02 avg10=0.03\n",
			&PSIStats{Some: &PSIData{Avg10: 0.03, Avg60: 0.02, Avg300: 0.01, TotalNanos: 5000}}},
		{"empty", "", nil},
		{"only full", full, nil},
		{"unknown kind", some + "most avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", nil},
		{"some twice", some + some, nil},
		{"missing total", "some avg10=0.00 avg60=0.00 avg300=0.00\n", nil},
		{"missing avg300", "some avg10=0.00 avg60=0.00 total=1\n", nil},
		{"kind only", "some\n", nil},
		{"key twice", "some avg10=0.00 avg10=0.00 avg60=0.00 avg300=0.00 total=1\n", nil},
		{"no equals", "some avg10 0.00 avg60=0.00 avg300=0.00 total=1\n", nil},
		{"empty key", "some =1 avg10=0.00 avg60=0.00 avg300=0.00 total=1\n", nil},
		{"negative avg", "some avg10=-1.00 avg60=0.00 avg300=0.00 total=1\n", nil},
		{"NaN avg", "some avg10=NaN avg60=0.00 avg300=0.00 total=1\n", nil},
		{"Inf avg", "some avg10=+Inf avg60=0.00 avg300=0.00 total=1\n", nil},
		{"negative total", "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n", nil},
		{"fractional total", "some avg10=0.00 avg60=0.00 avg300=0.00 total=1.5\n", nil},
		{"total overflows in ns", "some avg10=0.00 avg60=0.00 avg300=0.00 total=18446744073709552\n", nil},
		{"malformed full", some + "full avg10=x avg60=0.00 avg300=0.00 total=0\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePressure(tc.in)
			if tc.want == nil {
				if err == nil || !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("ParsePressure(%q) = %+v, %v; want ErrInvalid", tc.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got some %+v full %+v, want some %+v full %+v", got.Some, got.Full, tc.want.Some, tc.want.Full)
			}
		})
	}
	// The captured files parse (total µs → ns).
	p, err := ParsePressure(fixture(t, "v2/psi/io.pressure"))
	if err != nil || p.Some.TotalNanos != 292659222000 || p.Full == nil || p.Full.Avg300 != 0.67 {
		t.Fatalf("io.pressure = %+v, %v", p, err)
	}
}

func FuzzParsePressure(f *testing.F) {
	f.Add(fixture(f, "v2/psi/cpu.pressure"))
	f.Add("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePressure(s)
		if err != nil {
			return
		}
		if p.Some == nil {
			t.Fatal("parsed without a some line")
		}
		for _, d := range []*PSIData{p.Some, p.Full} {
			if d != nil && (!(d.Avg10 >= 0) || !(d.Avg60 >= 0) || !(d.Avg300 >= 0) || math.IsInf(d.Avg10+d.Avg60+d.Avg300, 0) || d.TotalNanos%1000 != 0) {
				t.Fatalf("implausible line %+v", d)
			}
		}
	})
}
