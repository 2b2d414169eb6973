package podfiles

import (
	"errors"
	"strings"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

// FuzzClassify: whatever the name, a sysctl is either rejected as invalid
// or lands in exactly one namespace and can never name a path outside
// /proc/sys.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"net.ipv4.ip_forward", "net/ipv4/conf/eth0.1/rp_filter", "kernel.shmmax",
		"fs.mqueue.msg_max", "kernel.pid_max", "net/../../etc", "/net/x", "..", "net..x"} {
		f.Add(s, "1")
	}
	f.Fuzz(func(t *testing.T, name, val string) {
		got, err := Classify(map[string]string{name: val}, false, false)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("%q: error %v is not ErrInvalid", name, err)
			}
			return
		}
		n := 0
		for _, m := range got {
			n += len(m)
		}
		if n != 1 {
			t.Fatalf("%q classified %d times", name, n)
		}
		_, p := normalize(name)
		if strings.Contains(p, "..") || strings.HasPrefix(p, "/") || strings.ContainsAny(val, "\n\x00") {
			t.Fatalf("%q=%q accepted: path %q", name, val, p)
		}
	})
}

// FuzzResolvConf: an accepted DNS config never yields more lines than
// its entries ask for (no injected directives).
func FuzzResolvConf(f *testing.F) {
	f.Add("10.0.0.1", "svc.cluster.local", "ndots:5")
	f.Add("1.1.1.1\nnameserver 6.6.6.6", "a b", "x")
	f.Fuzz(func(t *testing.T, server, search, opt string) {
		dns := dnsConfig(server, search, opt)
		b, err := ResolvConf(dns, "/nonexistent")
		if err != nil {
			return
		}
		if lines := strings.Count(string(b), "\n"); lines != 3 {
			t.Fatalf("%d lines from one entry each:\n%s", lines, b)
		}
	})
}
