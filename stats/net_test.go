package stats

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/podunit/podunit/netns"
)

// Needs root (creates a network namespace); the project's tests run as root.
func TestNetworkStatsInPinnedNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	pin := filepath.Join(t.TempDir(), "net")
	if err := netns.New(map[netns.Kind]string{netns.Net: pin}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Unpin(pin) })
	st, err := NetworkStats(pin)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 0 {
		t.Fatalf("fresh namespace has interfaces besides lo: %+v", st)
	}
	sh := func(args ...string) {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"--net=" + pin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	sh("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	sh("ip", "addr", "add", "10.231.0.1/24", "dev", "eth0")
	sh("ip", "addr", "add", "10.231.0.2/24", "dev", "peer0")
	sh("ip", "link", "set", "eth0", "up")
	sh("ip", "link", "set", "peer0", "up")
	// Traffic must leave through eth0, so send to an address nobody
	// has: the ARP request for it still counts as transmitted bytes.
	err = netns.Do(map[netns.Kind]string{netns.Net: pin}, func() error {
		c, err := net.Dial("udp4", "10.231.0.9:9")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	st, err = NetworkStats(pin)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]InterfaceStats{}
	for _, s := range st {
		byName[s.Name] = s
	}
	if len(byName) != 2 || byName["eth0"].TxBytes == 0 || byName["peer0"].RxBytes == 0 {
		t.Fatalf("interfaces = %+v", st)
	}
	if _, err := NetworkStats(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing namespace pin accepted")
	}
}
