package unitprops

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if string(want) != got {
		t.Errorf("%s mismatch\n--- want\n%s--- got\n%s", path, want, got)
	}
}

func baseService() Service {
	return Service{
		Unit:        "podunit-ctr-abc.service",
		Slice:       "kubepods-besteffort-pod1.slice",
		Description: "default/web/nginx",
		ExecStart: Exec{Argv: []string{"/usr/bin/podunit", "_stdio", "--unit", "podunit-ctr-abc.service",
			"--pid-file", "/run/podunit/containers/abc/pid",
			"--start-arg=/usr/sbin/runc", "--start-arg=--root", "--start-arg=/run/podunit/runc", "--start-arg=start", "--start-arg=abc", "--",
			"/usr/sbin/runc", "--root", "/run/podunit/runc", "create", "--pid-file",
			"/run/podunit/containers/abc/pid", "-b", "/run/podunit/containers/abc/bundle", "abc"}},
		ExecStopPost:     Exec{Argv: []string{"/usr/bin/podunit", "_exitrec", "/var/lib/podunit/containers/abc"}, IgnoreFailure: true},
		KillSignal:       15,
		StopTimeout:      30 * time.Second,
		StartTimeout:     2 * time.Minute,
		SyslogIdentifier: "nginx",
		LogFields:        []string{"POD_NAMESPACE=default", "POD_NAME=web", "CONTAINER_NAME=nginx", "CONTAINER_ID=abc"},
		JournalRateLimit: RateLimit{Interval: 30 * time.Second, Burst: 10000},
	}
}

func TestPropertiesGolden(t *testing.T) {
	full := &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 1024,
		MemoryLimitInBytes: 128 << 20, MemorySwapLimitInBytes: 256 << 20,
		CpusetCpus: "0-1,4", CpusetMems: "0",
	}
	cases := []struct {
		name string
		svc  Service
		res  *runtimeapi.LinuxContainerResources
		caps Caps
	}{
		{"minimal-v1", Service{Unit: "u.service", Slice: "podunit.slice",
			ExecStart: Exec{Argv: []string{"/bin/true"}}}, nil, Caps{SystemdVersion: 252}},
		{"full-v1-252", baseService(), full, Caps{SystemdVersion: 252}},
		{"full-v2-252", baseService(), full, Caps{SystemdVersion: 252, CgroupV2: true}},
		{"full-v2-240", baseService(), full, Caps{SystemdVersion: 240, CgroupV2: true}},
		{"unlimited-quota-v2", baseService(), &runtimeapi.LinuxContainerResources{CpuQuota: -1, CpuShares: 2}, Caps{SystemdVersion: 252, CgroupV2: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			props, err := Properties(c.svc, c.res, c.caps)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, Render(props))
		})
	}
}

func TestPropertiesRejects(t *testing.T) {
	s := baseService()
	s.LogFields = []string{"_SYSTEMD_UNIT=evil"}
	if _, err := Properties(s, nil, Caps{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("trusted journal field accepted: %v", err)
	}
	s = baseService()
	s.Slice = "/kubepods.slice"
	if _, err := Properties(s, nil, Caps{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("path-form slice accepted: %v", err)
	}
	if _, err := Properties(baseService(), &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1}, Caps{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("negative memory accepted: %v", err)
	}
}

func TestSharesToWeight(t *testing.T) {
	for _, c := range []struct {
		shares int64
		want   uint64
	}{{0, 0}, {1, 1}, {2, 1}, {1024, 39}, {262144, 10000}, {1 << 30, 10000}} {
		if got := SharesToWeight(c.shares); got != c.want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", c.shares, got, c.want)
		}
	}
}

func TestQuotaPerSec(t *testing.T) {
	for _, c := range []struct {
		quota  int64
		period uint64
		want   uint64
	}{{50000, 100000, 500000}, {1, 100000, 10000}, {12345, 100000, 130000}, {20000, 50000, 400000}} {
		if got := quotaPerSec(c.quota, c.period); got != c.want {
			t.Errorf("quotaPerSec(%d, %d) = %d, want %d", c.quota, c.period, got, c.want)
		}
	}
}

func TestRangeToBits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []byte
		ok   bool
	}{
		{"0", []byte{0x01}, true},
		{"0-3", []byte{0x0f}, true},
		{"1,9", []byte{0x02, 0x02}, true},
		{"0-1,4", []byte{0x13}, true},
		{"3-1", nil, false},
		{"x", nil, false},
		{"", nil, false},
	} {
		got, err := RangeToBits(c.in)
		if (err == nil) != c.ok || string(got) != string(c.want) {
			t.Errorf("RangeToBits(%q) = %x, %v; want %x ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func FuzzRangeToBits(f *testing.F) {
	for _, s := range []string{"0", "0-3,7", "1,2,3", "65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := RangeToBits(s)
		if err == nil && len(b) == 0 {
			t.Fatalf("RangeToBits(%q) gave an empty mask without error", s)
		}
	})
}

// The (sasb) bool is systemd's ignore_failure: a failing ExecStart must
// fail the unit, a failing ExecStopPost recorder must not.
func TestExecIgnoreFailureOnTheWire(t *testing.T) {
	props, err := Properties(baseService(), nil, Caps{SystemdVersion: 252})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"ExecStart": false, "ExecStopPost": true}
	for _, p := range props {
		w, ok := want[p.Name]
		if !ok {
			continue
		}
		delete(want, p.Name)
		cmds := p.Value.Value().([]execCommand)
		if cmds[0].IgnoreFailure != w {
			t.Errorf("%s: ignore_failure %v, want %v", p.Name, cmds[0].IgnoreFailure, w)
		}
		if sig := p.Value.Signature().String(); sig != "a(sasb)" {
			t.Errorf("%s signature %s", p.Name, sig)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing %v", want)
	}
}

// Render prints properties as sorted "Name=Value" lines, the golden-file
// format; byte arrays print as strings, exec lists as argv.
func Render(props []systemd.Property) string {
	lines := make([]string, 0, len(props))
	for _, p := range props {
		lines = append(lines, p.Name+"="+renderValue(p.Value.Value()))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func renderValue(v any) string {
	switch x := v.(type) {
	case []execCommand:
		var parts []string
		for _, e := range x {
			s := strings.Join(e.Args, " ")
			if e.IgnoreFailure {
				s = "-" + s
			}
			parts = append(parts, "{"+e.Path+": "+s+"}")
		}
		return strings.Join(parts, " ")
	case [][]byte:
		var parts []string
		for _, b := range x {
			parts = append(parts, fmt.Sprintf("%q", b))
		}
		return strings.Join(parts, " ")
	case []byte:
		return fmt.Sprintf("%x", x)
	case uint64:
		if x == math.MaxUint64 {
			return "infinity"
		}
		return fmt.Sprint(x)
	default:
		return fmt.Sprint(x)
	}
}
