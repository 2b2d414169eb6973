package oci

import (
	"encoding/json"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestExecSpec(t *testing.T) {
	adj := 5
	ctr := &specs.Process{
		Args: []string{"init"}, Env: []string{"A=1"}, Cwd: "/srv", User: specs.User{UID: 7},
		OOMScoreAdj: &adj, NoNewPrivileges: true, Terminal: true, ConsoleSize: &specs.Box{Height: 1},
	}
	cmd := []string{"ls", "-l"}
	p := ExecSpec(ctr, cmd, false)
	if p.Args[0] != "ls" || p.Terminal || p.Cwd != "/srv" || p.User.UID != 7 || p.Env[0] != "A=1" ||
		!p.NoNewPrivileges || p.ConsoleSize != nil || p.OOMScoreAdj == nil || *p.OOMScoreAdj != 5 {
		t.Errorf("process = %+v", p)
	}
	cmd[0] = "rm"
	if ctr.Args[0] != "init" || !ctr.Terminal || p.Args[0] != "ls" {
		t.Error("container process or command shared with the exec")
	}
	if p := ExecSpec(&specs.Process{}, []string{"x"}, false); p.Cwd != "/" {
		t.Errorf("no cwd: %+v", p)
	}
	// A terminal exec gets a terminal of its own size (the runtime's
	// Exec sets the client's), in a container with or without one.
	if p := ExecSpec(ctr, cmd, true); !p.Terminal || p.ConsoleSize != nil || p.Cwd != "/srv" {
		t.Errorf("terminal: %+v", p)
	}
	if p := ExecSpec(&specs.Process{}, []string{"x"}, true); !p.Terminal {
		t.Errorf("terminal in a container without one: %+v", p)
	}
}

func TestCLISpecRoundTrip(t *testing.T) {
	for _, c := range []*CLI{
		NewRunc(CLIConfig{Binary: "/usr/bin/runc", Root: "/run/r", ExecDir: "/run/x", ExecHelper: []string{"/p", ExecHelperName}}),
		NewCrun(CLIConfig{Name: "fast", Binary: "crun", Root: "/run/c", ExecDir: "/run/x"}),
	} {
		raw, err := json.Marshal(c.Spec())
		if err != nil {
			t.Fatal(err)
		}
		var s CLISpec
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		got := s.CLI()
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip %s: got %+v, want %+v", raw, got, c)
		}
		if !reflect.DeepEqual(got.execArgv("a", "p.json", "pid"), c.execArgv("a", "p.json", "pid")) {
			t.Errorf("%s: exec argv differs after the round trip", c.Name())
		}
	}
}
