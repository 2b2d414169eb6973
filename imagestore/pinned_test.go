package imagestore

import "testing"

func TestPinSet(t *testing.T) {
	p, err := newPinSet([]string{"registry.k8s.io/pause:3.10", "busybox", "quay.io/podunit/*", "docker.io/library/nginx:1.2?"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"registry.k8s.io/pause:3.10":       true,
		"registry.k8s.io/pause:3.9":        false,
		"docker.io/library/busybox:latest": true, // normalized exact reference
		"docker.io/library/busybox:1.36":   false,
		"quay.io/podunit/agent:v1":         true,
		"quay.io/podunit/sub/agent:v1":     false, // * does not cross /
		"docker.io/library/nginx:1.25":     true,
		"docker.io/library/nginx:1.3":      false,
	} {
		if got := p.match(name); got != want {
			t.Errorf("%s: pinned = %t, want %t", name, got, want)
		}
	}
	for _, bad := range []string{"quay.io/[podunit", "UPPER/case:1", ""} {
		if _, err := newPinSet([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
