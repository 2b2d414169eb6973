package logrelay

import (
	"regexp"
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	// The rule as it was first written; ValidID must agree with it.
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	cases := []string{
		"", "a", "Z9", "0", "abc_def.g-h", "_a", ".a", "-a", "a/b", "a b", "a\n",
		"../x", "é", "a\x00", strings.Repeat("a", 128), strings.Repeat("a", 129),
		"a" + strings.Repeat("-", 127), "a" + strings.Repeat("-", 128),
		"4f2c1e9b0d8a7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b",
	}
	for _, id := range cases {
		if got, want := ValidID(id), re.MatchString(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}
