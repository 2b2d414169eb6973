package idindex

import (
	"errors"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

func TestResolve(t *testing.T) {
	ids := map[string]int{"abc123": 1, "abd456": 2, "ab": 3, "ff00": 4}
	for _, tc := range []struct {
		ref, want string
		err       error
	}{
		{"abc123", "abc123", nil}, // exact
		{"ab", "ab", nil},         // exact wins over being a prefix of others
		{"abc", "abc123", nil},    // unique prefix
		{"f", "ff00", nil},
		{"a", "", errdefs.ErrInvalid}, // ambiguous
		{"abc1234", "", errdefs.ErrNotFound},
		{"zz", "", errdefs.ErrNotFound},
		{"", "", errdefs.ErrInvalid},
	} {
		got, err := Resolve("container", tc.ref, ids)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", tc.ref, got, err, tc.want, tc.err)
		}
	}
	if _, err := Resolve[struct{}]("pod sandbox", "a", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("empty index: %v", err)
	}
}
