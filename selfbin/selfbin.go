// Package selfbin finds the small helper binaries installed next to
// podunit (podunit-logrelay, podunit-unithelper). Each helper is also a
// subcommand of podunit itself, so a missing one costs memory, not function.
package selfbin

import (
	"os"
	"path/filepath"
)

// Sibling is the executable regular file name in self's directory, if
// there is one.
func Sibling(self, name string) (string, bool) {
	p := filepath.Join(filepath.Dir(self), name)
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", false
	}
	return p, true
}
