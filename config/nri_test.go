package config

import (
	"strings"
	"testing"
)

// [nri] is checked only when enabled, and each bad key is named.
func TestValidateNRI(t *testing.T) {
	c := Default()
	c.NRI.SocketPath = "nri.sock"
	if err := c.Validate(); err != nil {
		t.Errorf("disabled NRI validated: %v", err)
	}
	c.NRI.Enabled = true
	c.NRI.RequestTimeout = 0
	err := c.Validate()
	for _, key := range []string{"nri.socket_path", "nri.request_timeout"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%v, want mention of %s", err, key)
		}
	}
	c = Default()
	c.NRI.Enabled = true
	if err := c.Validate(); err != nil {
		t.Errorf("enabled defaults: %v", err)
	}
}
