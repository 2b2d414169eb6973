package main

import (
	"os/exec"
	"strings"
	"testing"
)

// systemd runs this binary twice per container (ExecStart, ExecStopPost),
// in the container's unit: every package init it links is paid at each
// start and stop and charged to the container. The D-Bus client, the
// metrics library and protobuf cost ~7 ms of CPU per run on a 2-core node
// (docs/benchmarks.md), and none of them is needed here; nor regexp,
// whose patterns compiled at init cost ~1.5 ms.
func TestLinksNoHeavyPackages(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{
			"github.com/godbus/dbus",
			"github.com/coreos/go-systemd/v22/dbus",
			"github.com/prometheus",
			"google.golang.org/protobuf",
			"google.golang.org/grpc",
			"github.com/podunit/podunit/systemd",
			"regexp",
		} {
			if dep == heavy || strings.HasPrefix(dep, heavy+"/") {
				t.Errorf("podunit-unithelper links %s", dep)
			}
		}
	}
}
