// Package critest holds the critest kit's scripts; this test pins what
// ratchet.sh lets through, since CI's critest stages pass or fail by it.
package critest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func runRatchet(t *testing.T, specs, expected string, args ...string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	sp, ex := filepath.Join(dir, "specs.tsv"), filepath.Join(dir, "expected.txt")
	if err := os.WriteFile(sp, []byte(specs), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ex, []byte(expected), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", append([]string{"ratchet.sh", sp, ex}, args...)...).CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return string(out), err == nil
}

func TestRatchet(t *testing.T) {
	specs := strings.Join([]string{
		"passed\tA runs\t",
		"passed\tB runs\t",
		"failed\tC breaks\tboom",
		"skipped\tD out of focus\t",
		"skipped\tE skips itself\tno userns",
		"passed\tF new\t",
	}, "\n") + "\n"
	for _, tc := range []struct {
		name, expected string
		args           []string
		ok             bool
		want           string
	}{
		{"all listed pass", "# comment\nA runs\n  B runs  \n\n", nil, true, "2 listed, 2 passed, 0 not run (focus), 0 broken, 1 newly passing"},
		{"a listed spec fails", "A runs\nC breaks\n", nil, false, "FAIL listed spec failed: C breaks  (boom)"},
		{"a listed spec is gone", "A runs\nZ renamed\n", nil, false, "FAIL listed spec is not in the suite (renamed?): Z renamed"},
		{"skipped without focus is broken", "A runs\nD out of focus\n", nil, false, "FAIL listed spec skipped: D out of focus"},
		{"focus leaves a listed spec out", "A runs\nD out of focus\n", []string{"A"}, true, "2 listed, 1 passed, 1 not run (focus), 0 broken"},
		{"a skip with a reason is judged under focus", "A runs\nE skips itself\n", []string{"A"}, false, "FAIL listed spec skipped: E skips itself"},
		{"focus ran enough", "A runs\nB runs\nD out of focus\n", []string{"A|B", "2"}, true, "3 listed, 2 passed, 1 not run"},
		{"focus ran too few", "A runs\nB runs\nD out of focus\n", []string{"A|B", "3"}, false, "the focus ran 2 listed specs, fewer than the 3 expected"},
		{"min run needs a focus", "A runs\n", []string{"", "5"}, true, "1 listed, 1 passed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := runRatchet(t, specs, tc.expected, tc.args...)
			if ok != tc.ok || !strings.Contains(out, tc.want) {
				t.Errorf("ok %v (want %v), output:\n%s\nwant it to contain %q", ok, tc.ok, out, tc.want)
			}
		})
	}
}
