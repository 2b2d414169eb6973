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
