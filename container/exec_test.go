package container

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestExecProcess(t *testing.T) {
	adj := 5
	ctr := &specs.Process{
		Args: []string{"init"}, Env: []string{"A=1"}, Cwd: "/srv", User: specs.User{UID: 7},
		OOMScoreAdj: &adj, NoNewPrivileges: true, Terminal: true, ConsoleSize: &specs.Box{Height: 1},
	}
	cmd := []string{"ls", "-l"}
	p := execProcess(ctr, cmd, false)
	if p.Args[0] != "ls" || p.Terminal || p.Cwd != "/srv" || p.User.UID != 7 || p.Env[0] != "A=1" ||
		!p.NoNewPrivileges || p.ConsoleSize != nil || p.OOMScoreAdj == nil || *p.OOMScoreAdj != 5 {
		t.Errorf("process = %+v", p)
	}
	cmd[0] = "rm"
	if ctr.Args[0] != "init" || !ctr.Terminal || p.Args[0] != "ls" {
		t.Error("container process or command shared with the exec")
	}
	if p := execProcess(&specs.Process{}, []string{"x"}, false); p.Cwd != "/" {
		t.Errorf("no cwd: %+v", p)
	}
	// A terminal exec gets a terminal of its own size (the runtime's
	// Exec sets the client's), in a container with or without one.
	if p := execProcess(ctr, cmd, true); !p.Terminal || p.ConsoleSize != nil || p.Cwd != "/srv" {
		t.Errorf("terminal: %+v", p)
	}
	if p := execProcess(&specs.Process{}, []string{"x"}, true); !p.Terminal {
		t.Errorf("terminal in a container without one: %+v", p)
	}
}
