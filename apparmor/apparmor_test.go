package apparmor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
)

// fakeHost is an AppArmor host in a temp dir: securityfs with a profiles
// file, the parser's config dir, and a parser script that records its
// arguments and stdin and then "loads" what loads says.
type fakeHost struct {
	*Host
	dir  string
	logs *bytes.Buffer
}

func newFake(t *testing.T, profiles string) *fakeHost {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"module", "securityfs", "apparmor.d/tunables", "apparmor.d/abstractions", "apparmor.d/abi"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, "module/enabled"), "Y\n")
	write(t, filepath.Join(dir, "securityfs/profiles"), profiles)
	write(t, filepath.Join(dir, "self"), "unconfined\n")
	logs := &bytes.Buffer{}
	h := NewHost(slog.New(slog.NewTextHandler(logs, nil)))
	h.EnabledParam = filepath.Join(dir, "module/enabled")
	h.SecurityFS = filepath.Join(dir, "securityfs")
	h.ConfigDir = filepath.Join(dir, "apparmor.d")
	h.SelfLabel = filepath.Join(dir, "self")
	h.Parser = filepath.Join(dir, "no-parser")
	return &fakeHost{Host: h, dir: dir, logs: logs}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// parser installs a fake apparmor_parser that appends "<name> (enforce)"
// to the profiles file (nothing for an empty name) and exits with rc.
func (f *fakeHost) parser(t *testing.T, loads string, rc int) {
	t.Helper()
	add := ""
	if loads != "" {
		add = fmt.Sprintf("echo '%s (enforce)' >> %s/securityfs/profiles\n", loads, f.dir)
	}
	script := fmt.Sprintf("#!/bin/sh\necho \"$@\" >> %[1]s/args\ncat > %[1]s/stdin\n%[2]secho parser says hi >&2\nexit %[3]d\n", f.dir, add, rc)
	p := filepath.Join(f.dir, "apparmor_parser")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.Parser = p
}

func (f *fakeHost) runs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "args"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestEnabled(t *testing.T) {
	f := newFake(t, "")
	if !f.Enabled() {
		t.Fatal("Y and securityfs: want enabled")
	}
	write(t, f.EnabledParam, "N\n")
	if f.Enabled() {
		t.Fatal("N: want disabled")
	}
	write(t, f.EnabledParam, "Y\n")
	f.SecurityFS = filepath.Join(f.dir, "nosecurityfs")
	if f.Enabled() {
		t.Fatal("no securityfs: want disabled")
	}
	f.EnabledParam = filepath.Join(f.dir, "nomodule")
	if f.Enabled() {
		t.Fatal("no module: want disabled")
	}
}

func TestIsLoaded(t *testing.T) {
	f := newFake(t, "cri-validate-apparmor-test-deny-write (enforce)\n/usr/bin/man (enforce)\n"+
		"name with space (complain)\nparent//child (enforce)\nunconfined-ish (kill)\n")
	for name, want := range map[string]bool{
		"cri-validate-apparmor-test-deny-write": true,
		"cri-validate-apparmor-test":            false,
		"/usr/bin/man":                          true,
		"name with space":                       true,
		"name":                                  false,
		"parent//child":                         true,
		"parent":                                false,
		"non-existent-profile":                  false,
		"enforce":                               false,
	} {
		got, err := f.IsLoaded(name)
		if err != nil || got != want {
			t.Errorf("IsLoaded(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	f.SecurityFS = filepath.Join(f.dir, "gone")
	if _, err := f.IsLoaded("x"); err == nil {
		t.Fatal("missing profiles file: want an error")
	}
}

func TestProfileName(t *testing.T) {
	for in, want := range map[string]string{
		"unconfined\n":          "unconfined",
		"":                      "unconfined",
		"foo (enforce)\n":       "foo",
		"a (b) (complain)":      "a (b)",
		"/usr/sbin/x (enforce)": "/usr/sbin/x",
	} {
		if got := profileName(in); got != want {
			t.Errorf("profileName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnsureDefaultAlreadyLoaded(t *testing.T) {
	f := newFake(t, "podunit-default (enforce)\n")
	f.parser(t, "", 1)
	if err := f.EnsureDefault(context.Background(), DefaultProfile); err != nil {
		t.Fatal(err)
	}
	if r := f.runs(t); r != nil {
		t.Fatalf("parser ran for a loaded profile: %v", r)
	}
}

func TestEnsureDefaultLoads(t *testing.T) {
	f := newFake(t, "other (enforce)\n")
	f.parser(t, DefaultProfile, 0)
	for range 3 {
		if err := f.EnsureDefault(context.Background(), DefaultProfile); err != nil {
			t.Fatal(err)
		}
	}
	if r := f.runs(t); len(r) != 1 || r[0] != "-Kr" {
		t.Fatalf("parser runs = %q, want one with -Kr", r)
	}
	stdin, err := os.ReadFile(filepath.Join(f.dir, "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := f.Profile(DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stdin, want) || !bytes.Contains(stdin, []byte("profile podunit-default flags=")) {
		t.Fatalf("parser's stdin is not the profile:\n%s", stdin)
	}
	if !strings.Contains(f.logs.String(), "loaded AppArmor default profile") || strings.Contains(f.logs.String(), "WARN") {
		t.Fatalf("logs: %s", f.logs)
	}
}

func TestEnsureDefaultConcurrent(t *testing.T) {
	f := newFake(t, "")
	f.parser(t, DefaultProfile, 0)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = f.EnsureDefault(context.Background(), DefaultProfile) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if r := f.runs(t); len(r) != 1 {
		t.Fatalf("parser ran %d times, want once", len(r))
	}
}

func TestEnsureDefaultFailures(t *testing.T) {
	ctx := context.Background()
	f := newFake(t, "")
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }

	// no parser
	err := f.EnsureDefault(ctx, DefaultProfile)
	if !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), "no parser") {
		t.Fatalf("no parser: err = %v", err)
	}

	// the parser fails; the failure is remembered for RetryAfter
	f.parser(t, "", 1)
	if err := f.EnsureDefault(ctx, DefaultProfile); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("within RetryAfter: err = %v", err)
	}
	if r := f.runs(t); r != nil {
		t.Fatalf("parser ran within RetryAfter: %v", r)
	}
	now = now.Add(2 * f.RetryAfter)
	err = f.EnsureDefault(ctx, DefaultProfile)
	if !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), "parser says hi") {
		t.Fatalf("failing parser: err = %v", err)
	}
	if r := f.runs(t); len(r) != 1 {
		t.Fatalf("parser runs = %v, want 1", r)
	}

	// the parser succeeds but loads nothing
	f.parser(t, "", 0)
	now = now.Add(2 * f.RetryAfter)
	if err := f.EnsureDefault(ctx, DefaultProfile); err == nil || !strings.Contains(err.Error(), "not among the loaded profiles") {
		t.Fatalf("silent parser: err = %v", err)
	}
	if n := strings.Count(f.logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings for one failure streak, want 1:\n%s", n, f.logs)
	}

	// someone else loads it: no parser run needed, the streak ends
	write(t, filepath.Join(f.SecurityFS, "profiles"), "podunit-default (enforce)\n")
	if err := f.EnsureDefault(ctx, DefaultProfile); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.SecurityFS, "profiles"), "")
	f.Parser = filepath.Join(f.dir, "no-parser")
	if err := f.EnsureDefault(ctx, DefaultProfile); err == nil {
		t.Fatal("unloaded again, no parser: want an error")
	}
	if n := strings.Count(f.logs.String(), "level=WARN"); n != 2 {
		t.Fatalf("a new failure streak warns again: %d warnings:\n%s", n, f.logs)
	}
}

func TestProfileIncludes(t *testing.T) {
	f := newFake(t, "")
	b, err := f.Profile(DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, w := range []string{"@{PROC}=/proc/\n"} {
		if !strings.Contains(s, w) {
			t.Errorf("no includes on the host: profile lacks %q:\n%s", w, s)
		}
	}
	for _, w := range []string{"abi <", "#include"} {
		if strings.Contains(s, w) {
			t.Errorf("no includes on the host: profile has %q:\n%s", w, s)
		}
	}
	write(t, filepath.Join(f.ConfigDir, "abi/3.0"), "")
	write(t, filepath.Join(f.ConfigDir, "tunables/global"), "")
	write(t, filepath.Join(f.ConfigDir, "abstractions/base"), "")
	write(t, f.SelfLabel, "podunit-daemon (enforce)\n")
	if b, err = f.Profile(DefaultProfile); err != nil {
		t.Fatal(err)
	}
	s = string(b)
	for _, w := range []string{"abi <abi/3.0>,\n", "#include <tunables/global>\n", "  #include <abstractions/base>\n",
		"signal (receive) peer=podunit-daemon,\n"} {
		if !strings.Contains(s, w) {
			t.Errorf("profile lacks %q:\n%s", w, s)
		}
	}
	if strings.Contains(s, "@{PROC}=") {
		t.Errorf("@{PROC} defined besides tunables:\n%s", s)
	}
}

func TestGenerate(t *testing.T) {
	var buf bytes.Buffer
	if err := Generate(&buf, Params{Name: "podunit-default"}); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	for _, w := range []string{
		"profile podunit-default flags=(attach_disconnected,mediate_deleted) {\n",
		"  deny mount,\n",
		"  deny @{PROC}/sys/[^k]** w,\n",
		"  deny @{PROC}/sysrq-trigger rwklx,\n",
		"  deny /sys/kernel/security/** rwklx,\n",
		"  signal (receive) peer=unconfined,\n",
		"  signal (receive) peer=runc,\n",
		"  signal (send,receive) peer=podunit-default,\n",
		"  ptrace (trace,read,tracedby,readby) peer=podunit-default,\n",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("profile lacks %q:\n%s", w, s)
		}
	}
	if strings.Count(s, "peer=unconfined") != 1 {
		t.Errorf("unconfined daemon: one unconfined signal rule:\n%s", s)
	}

	buf.Reset()
	if err := Generate(&buf, Params{Name: "my profile", DaemonProfile: "d (x)"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`profile "my profile" flags=`, `peer="d (x)",`, `peer="my profile",`} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("names needing quotes: profile lacks %q:\n%s", w, buf.String())
		}
	}

	for _, p := range []Params{{}, {Name: `a"b`}, {Name: "a\nb"}, {Name: "ok", DaemonProfile: "x\x00"}} {
		if err := Generate(&bytes.Buffer{}, p); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Generate(%+v) err = %v, want ErrInvalid", p, err)
		}
	}
}

// TestProfileParses runs the real parser without loading (-Q) when the
// machine has it: the generated text must be valid policy, with and
// without the host's includes.
func TestProfileParses(t *testing.T) {
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		t.Skip("no apparmor_parser")
	}
	sys := NewHost(nil)
	for name, h := range map[string]*Host{"system includes": sys, "no includes": newFake(t, "").Host} {
		b, err := h.Profile(DefaultProfile)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(parser, "-QK", "-I", sys.ConfigDir)
		cmd.Stdin = bytes.NewReader(b)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("%s: %v: %s\n%s", name, err, stderr.String(), b)
		}
	}
}
