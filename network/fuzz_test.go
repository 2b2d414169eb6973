package network

import (
	"errors"
	"strconv"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"10M", "1Gi", "0", "", "k", "18446744073709551615", "99999999999Pi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseQuantity(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		// A plain number parses to itself.
		if v, perr := strconv.ParseUint(s, 10, 64); perr == nil && v != n {
			t.Fatalf("%q = %d", s, n)
		}
	})
}
