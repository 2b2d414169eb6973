package selfbin

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSibling(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "podunit")
	for name, mode := range map[string]os.FileMode{"exec": 0o755, "plain": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, ok := Sibling(self, "exec"); !ok || p != filepath.Join(dir, "exec") {
		t.Errorf("exec: %q %v", p, ok)
	}
	for _, name := range []string{"plain", "adir", "missing"} {
		if p, ok := Sibling(self, name); ok {
			t.Errorf("%s: found %q", name, p)
		}
	}
}
