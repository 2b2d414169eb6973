package unitprops

import (
	"errors"
	"strings"
	"testing"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSplitStartLimits(t *testing.T) {
	r := &runtimeapi.LinuxContainerResources{CpuQuota: 10000, CpuPeriod: 100000, CpuShares: 102, MemoryLimitInBytes: 64 << 20}
	props, err := ResourceProperties(r, Caps{SystemdVersion: 252, CgroupV2: true})
	if err != nil {
		t.Fatal(err)
	}
	start, after := SplitStartLimits(props)
	if len(start)+len(after) != len(props) {
		t.Fatalf("lost properties: %d + %d of %d", len(start), len(after), len(props))
	}
	names := func(ps []systemd.Property) (n []string) {
		for _, p := range ps {
			n = append(n, p.Name)
		}
		return n
	}
	if got := strings.Join(names(after), ","); got != "MemoryMax,CPUQuotaPeriodUSec,CPUQuotaPerSecUSec" {
		t.Errorf("after the start job: %s", got)
	}
	for _, n := range names(start) {
		if strings.HasPrefix(n, "CPUQuota") || n == "MemoryMax" {
			t.Errorf("%s in the start properties", n)
		}
	}
}

// The unified keys systemd has a property for reach the unit on v2; the
// others are the runtime's, and v1 has no unified hierarchy.
func TestUnifiedProperties(t *testing.T) {
	r := &runtimeapi.LinuxContainerResources{Unified: map[string]string{
		"memory.swap.max": "0", "memory.high": "max", "memory.min": "1G", "pids.max": "100", "cpu.weight": "50", "memory.pressure": "x",
	}}
	props, err := ResourceProperties(r, Caps{SystemdVersion: 252, CgroupV2: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range props {
		got = append(got, p.Name+"="+p.Value.String())
	}
	if s := strings.Join(got, " "); s != "CPUWeight=@t 50 MemoryHigh=@t 18446744073709551615 MemoryMin=@t 1073741824 MemorySwapMax=@t 0 TasksMax=@t 100" {
		t.Errorf("properties %s", s)
	}
	if props, _ := ResourceProperties(r, Caps{SystemdVersion: 252}); len(props) != 0 {
		t.Errorf("v1 got unified properties %v", props)
	}
	for _, bad := range []map[string]string{{"memory.high": "1X"}, {"memory.low": "99999999999T"}, {"cpu.weight": "0"}, {"cpu.weight": "max"}, {"pids.max": "-1"}} {
		if _, err := ResourceProperties(&runtimeapi.LinuxContainerResources{Unified: bad}, Caps{SystemdVersion: 252, CgroupV2: true}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%v: %v, want invalid", bad, err)
		}
	}
}
