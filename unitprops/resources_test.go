package unitprops

import (
	"strings"
	"testing"

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
