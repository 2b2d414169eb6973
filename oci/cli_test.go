package oci

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/errdefs"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func TestArgvGolden(t *testing.T) {
	var out bytes.Buffer
	for _, c := range []*CLI{
		NewRunc(CLIConfig{Binary: "runc", Root: "/run/podunit/runc"}),
		NewCrun(CLIConfig{Binary: "crun", Root: "/run/podunit/crun"}),
		NewRunc(CLIConfig{Name: "runc-custom", Binary: "/opt/bin/runc", Root: "/run/other"}),
	} {
		fmt.Fprintf(&out, "## %s\n", c.Name())
		for _, l := range []struct {
			name string
			argv []string
		}{
			{"create", c.CreateArgv("ctr1", "/run/podunit/bundles/ctr1", "/run/podunit/bundles/ctr1/pid", "/run/podunit/ctr1/runtime.log", "")},
			{"create-tty", c.CreateArgv("ctr1", "/run/podunit/bundles/ctr1", "/run/podunit/bundles/ctr1/pid", "/run/podunit/ctr1/runtime.log", "/run/podunit/ctr1/console.sock")},
			{"start", c.StartArgv("ctr1", "/run/podunit/ctr1/runtime.log")},
			{"exec", c.execArgv("ctr1", "/x/process.json", "/x/pid")},
			{"exec-tty", c.terminalExecArgv("ctr1", "/x/process.json", "/x/console.sock", "/x/pid")},
			{"delete", c.DeleteArgv("ctr1")},
			{"update", c.updateArgv("ctr1")},
			{"checkpoint", c.CheckpointArgv("ctr1", Checkpoint{ImagePath: "/var/lib/podunit/ctr1/checkpoint", WorkPath: "/run/podunit/ctr1/criu"})},
			{"restore", c.RestoreArgv("ctr1", "/run/podunit/bundles/ctr1", "/run/podunit/bundles/ctr1/pid", "/run/podunit/ctr1/runtime.log", Checkpoint{ImagePath: "/var/lib/podunit/ctr1/checkpoint", WorkPath: "/run/podunit/ctr1/criu"})},
			{"pause", c.PauseArgv("ctr1")},
			{"resume", c.ResumeArgv("ctr1")},
			{"features", c.featuresArgv()},
			{"version", c.versionArgv()},
		} {
			line := strings.Join(l.argv, " ")
			if l.argv == nil {
				line = "(not run)"
			}
			fmt.Fprintf(&out, "%-13s %s\n", l.name, line)
		}
	}
	golden := filepath.Join("testdata", "argv.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("argv differ from %s (go test -update to accept):\n%s", golden, out.String())
	}
}

func TestClassify(t *testing.T) {
	exitErr := exec.Command("false").Run()
	tests := []struct {
		stderr string
		err    error
		want   error
		msg    string
	}{
		{stderr: `time="2026-11-30T14:13:28Z" level=error msg="container does not exist"` + "\n", err: exitErr, want: errdefs.ErrNotFound, msg: "container does not exist"},
		{stderr: "error opening file `/run/crun/x/status`: No such file or directory\n", err: exitErr, want: errdefs.ErrNotFound},
		{stderr: "cannot open directory '/run/crun/x': No such file or directory", err: exitErr, want: errdefs.ErrNotFound},
		{stderr: `time="x" level=error msg="container not running"`, err: exitErr, want: errdefs.ErrPrecondition},
		{stderr: "kill container: No such process", err: exitErr, want: errdefs.ErrPrecondition},
		{stderr: `level=error msg="exec failed: \"quoted\""`, err: exitErr, msg: `exec failed: "quoted"`},
		{stderr: "", err: errors.New("fork/exec: no such file"), msg: "no such file"},
	}
	for _, tt := range tests {
		err := classify("runc op", tt.stderr, tt.err)
		if tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%q: err = %v, want %v", tt.stderr, err, tt.want)
		}
		if tt.want == nil && (errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrPrecondition)) {
			t.Errorf("%q: misclassified: %v", tt.stderr, err)
		}
		if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%q: message %q lacks %q", tt.stderr, err, tt.msg)
		}
	}
}

// Update hands runc the limits as JSON on stdin; crun's containers have no
// cgroup of their own, so nothing runs for them.
func TestUpdateStdin(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runc")
	script := "#!/bin/sh\necho \"$@\" > " + dir + "/args\ncat > " + dir + "/stdin\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	limit, quota, period := int64(64<<20), int64(10000), uint64(100000)
	r := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}, CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}}
	if err := NewRunc(CLIConfig{Binary: bin, Root: "/r"}).Update(t.Context(), "c1", r); err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	in, _ := os.ReadFile(filepath.Join(dir, "stdin"))
	if string(args) != "--root /r update --resources - c1\n" {
		t.Errorf("args = %q", args)
	}
	if string(in) != `{"memory":{"limit":67108864},"cpu":{"quota":10000,"period":100000}}` {
		t.Errorf("stdin = %s", in)
	}
	if err := NewCrun(CLIConfig{Binary: filepath.Join(dir, "missing")}).Update(t.Context(), "c1", r); err != nil {
		t.Errorf("crun update ran something: %v", err)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 4}
	_, _ = tb.Write([]byte("hello "))
	_, _ = tb.Write([]byte("world"))
	if tb.String() != "orld" {
		t.Errorf("tail = %q", tb.String())
	}
}
