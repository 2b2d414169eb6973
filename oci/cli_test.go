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
	"syscall"
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
			{"run", c.RunArgv("ctr1", "/run/podunit/bundles/ctr1", "/run/podunit/bundles/ctr1/pid")},
			{"run-console", c.ConsoleRunArgv("ctr1", "/b", "/b/pid", "/b/console.sock")},
			{"exec", c.execArgv("ctr1", "/x/process.json", "/x/pid", "")},
			{"exec-tty", c.execArgv("ctr1", "/x/process.json", "/x/pid", "/x/console.sock")},
			{"kill", c.killArgv("ctr1", syscall.SIGTERM, false)},
			{"kill-all", c.killArgv("ctr1", syscall.SIGKILL, true)},
			{"delete", c.deleteArgv("ctr1", false)},
			{"delete-force", c.deleteArgv("ctr1", true)},
			{"update", c.updateArgv("ctr1")},
			{"state", c.stateArgv("ctr1")},
			{"list", c.listArgv()},
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

func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{max: 5}
	for _, s := range []string{"abc", "defg", "h"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q = %d, %v", s, n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcde" {
		t.Errorf("capped = %q", got)
	}
	tb := &tailBuffer{max: 4}
	_, _ = tb.Write([]byte("hello "))
	_, _ = tb.Write([]byte("world"))
	if tb.String() != "orld" {
		t.Errorf("tail = %q", tb.String())
	}
}

func TestExecProcessSpec(t *testing.T) {
	adj := 5
	ctr := &specs.Spec{Process: &specs.Process{
		Args: []string{"init"}, Env: []string{"A=1"}, Cwd: "/srv", User: specs.User{UID: 7},
		OOMScoreAdj: &adj, NoNewPrivileges: true, ConsoleSize: &specs.Box{Height: 1},
	}}
	p := ExecProcessSpec(ctr, []string{"ls", "-l"}, true)
	if p.Args[0] != "ls" || !p.Terminal || p.Cwd != "/srv" || p.User.UID != 7 || p.Env[0] != "A=1" ||
		!p.NoNewPrivileges || p.OOMScoreAdj != nil || p.ConsoleSize != nil {
		t.Errorf("process = %+v", p)
	}
	if ctr.Process.Args[0] != "init" {
		t.Error("container spec modified")
	}
	if p := ExecProcessSpec(nil, []string{"x"}, false); p.Cwd != "/" {
		t.Errorf("no spec: %+v", p)
	}
}

func TestWriteBundle(t *testing.T) {
	dir := t.TempDir()
	s := &specs.Spec{Version: specs.Version, Hostname: "h", Process: &specs.Process{Args: []string{"sh"}}}
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	s.Hostname = "h2"
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBundle(dir)
	if err != nil || got.Hostname != "h2" || got.Process.Args[0] != "sh" {
		t.Fatalf("read back %+v, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temp files left: %v", entries)
	}
	if st, _ := os.Stat(filepath.Join(dir, "config.json")); st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v", st.Mode())
	}
	if err := WriteBundle(filepath.Join(dir, "missing"), s); err == nil {
		t.Error("write into a missing dir succeeded")
	}
	if err := WriteBundle(dir, nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("nil spec: %v", err)
	}
}
