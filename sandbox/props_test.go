package sandbox

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/systemd"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestPropertiesGolden(t *testing.T) {
	cases := map[string]string{
		"slice-empty": renderProperties(sliceProperties("podunit pod default/web", nil)),
		"slice-limits": renderProperties(sliceProperties("podunit pod default/web", &runtimeapi.LinuxContainerResources{
			CpuShares: 512, CpuQuota: 33333, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20,
		})),
		"slice-quota-default-period": renderProperties(resourceProperties(&runtimeapi.LinuxContainerResources{CpuQuota: 20000})),
		"init":                       renderProperties(initProperties("init", "podunit-pod-x.slice", DefaultPodInit)),
	}
	for name, got := range cases {
		p := filepath.Join("testdata", name+".golden")
		if *update {
			os.WriteFile(p, []byte(got), 0o644)
		}
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s:\n%s\nwant\n%s", name, got, want)
		}
	}
}

// The slice of a pod podunit owns gets the containers' sum plus the pod
// overhead, the way the kubelet sizes the pod cgroups it owns (node
// conformance: 100m/100Mi limits + 200m/140Mi overhead = quota 30000,
// 240Mi). Limits the containers leave unset stay unset.
func TestPodLimits(t *testing.T) {
	overhead := &runtimeapi.LinuxContainerResources{CpuShares: 204, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 140 << 20}
	for name, c := range map[string]struct {
		r, overhead, want *runtimeapi.LinuxContainerResources
	}{
		"nil":         {nil, overhead, nil},
		"no overhead": {&runtimeapi.LinuxContainerResources{CpuQuota: 10000, MemoryLimitInBytes: 1 << 20}, nil, &runtimeapi.LinuxContainerResources{CpuQuota: 10000, MemoryLimitInBytes: 1 << 20}},
		"guaranteed": {
			&runtimeapi.LinuxContainerResources{CpuShares: 102, CpuQuota: 10000, CpuPeriod: 100000, MemoryLimitInBytes: 100 << 20},
			overhead,
			&runtimeapi.LinuxContainerResources{CpuShares: 306, CpuQuota: 30000, CpuPeriod: 100000, MemoryLimitInBytes: 240 << 20},
		},
		"unlimited stays unlimited": {&runtimeapi.LinuxContainerResources{CpuShares: 2}, overhead, &runtimeapi.LinuxContainerResources{CpuShares: 206}},
		"overhead quota in the pod's period": {
			&runtimeapi.LinuxContainerResources{CpuQuota: 5000, CpuPeriod: 50000},
			&runtimeapi.LinuxContainerResources{CpuQuota: 20000}, // default period 100 ms
			&runtimeapi.LinuxContainerResources{CpuQuota: 15000, CpuPeriod: 50000},
		},
	} {
		got := podLimits(c.r, c.overhead)
		if (got == nil) != (c.want == nil) || got != nil && (got.CpuShares != c.want.CpuShares || got.CpuQuota != c.want.CpuQuota ||
			got.CpuPeriod != c.want.CpuPeriod || got.MemoryLimitInBytes != c.want.MemoryLimitInBytes) {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
	if overhead.CpuQuota != 20000 {
		t.Fatal("podLimits changed its input")
	}
}

func TestSharesToWeight(t *testing.T) {
	for shares, want := range map[int64]uint64{0: 1, 2: 1, 1024: 39, 262144: 10000, 1 << 30: 10000} {
		if got := sharesToWeight(shares); got != want {
			t.Errorf("shares %d: %d, want %d", shares, got, want)
		}
	}
}

// renderProperties is the golden-test form: sorted Name=Value lines.
func renderProperties(props []systemd.Property) string {
	lines := make([]string, 0, len(props))
	for _, p := range props {
		lines = append(lines, fmt.Sprintf("%s=%v", p.Name, p.Value.Value()))
	}
	sort.Strings(lines)
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}
