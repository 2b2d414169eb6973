package container

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A tty container keeps process.terminal (the runtime makes a real
// terminal), its wrapper and the runtime's create get the console socket,
// and it has no stdin FIFO (the terminal is its stdin); attach learns it is
// a terminal. A stdin container without tty keeps pipes and the FIFO.
func TestTTYContainerRunsOnATerminal(t *testing.T) {
	e := newEnv(t)
	for _, tty := range []bool{true, false} {
		name := "pipes"
		if tty {
			name = "tty"
		}
		cfg := containerConfig(name)
		cfg.Tty, cfg.Stdin, cfg.StdinOnce = tty, true, true
		id, err := e.m.Create(ctx, "pod1", cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		var spec specs.Spec
		b, err := os.ReadFile(filepath.Join(e.opts.RunDir, id, "bundle", "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		if spec.Process.Terminal != tty {
			t.Errorf("%s: process.terminal %v", name, spec.Process.Terminal)
		}
		c, err := e.m.get(id)
		if err != nil {
			t.Fatal(err)
		}
		argv := e.m.service(c.rec, e.rt).ExecStart.Argv
		sep := slices.Index(argv, "--")
		wrapper, create := strings.Join(argv[:sep], " "), strings.Join(argv[sep+1:], " ")
		sock := filepath.Join(e.opts.RunDir, id, "console.sock")
		if got := strings.Contains(wrapper, "--console-socket "+sock) && strings.Contains(create, "--console-socket "+sock); got != tty {
			t.Errorf("%s: console socket in %q", name, argv)
		}
		if strings.Contains(wrapper, "--stdin-fifo") == tty {
			t.Errorf("%s: stdin FIFO in %q", name, wrapper)
		}
		if err := e.m.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		tg, err := e.m.StreamTarget(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tg.TTY != tty || !tg.StdinOnce || !tg.Stdin || tg.TapDir != filepath.Join(e.opts.RunDir, id) || (tg.StdinPath != "") == tty {
			t.Errorf("%s: stream target %+v", name, tg)
		}
	}
}
