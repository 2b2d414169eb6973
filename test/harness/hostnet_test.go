//go:build integration

package harness

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A fresh machine has ip_forward = 0 and no pu-test0 bridge; a host-net
// harness must run a pod on the test network there (the bridge plugin cannot
// write ip_forward through its read-only /proc/sys/net) and leave the host as
// it found it: ip_forward 0 again, bridge and CNI chains gone.
func TestHostNetHarnessOnFreshHost(t *testing.T) {
	if pids := HostNetHarnesses(); len(pids) > 0 {
		// its pods need forwarding, and net-cleanup.sh leaves the network
		// to it: nothing here could be judged
		t.Skipf("another host-network harness is running (pids %v): the host network is in use", pids)
	}
	orig, err := os.ReadFile(IPForwardPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(IPForwardPath, orig, 0o644); err != nil {
			t.Errorf("restoring ip_forward: %v", err)
		}
	})
	if err := os.WriteFile(IPForwardPath, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("pod", func(t *testing.T) {
		h := Start(t, Options{HostNet: true})
		p := h.StartPodunit(h.TestConfig())
		ctx := Context(t, 2*time.Minute)
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "fresh", Namespace: "default", Uid: "fresh-uid-1"},
			Linux:    &runtimeapi.LinuxPodSandboxConfig{},
		}
		pod, err := p.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			t.Fatalf("RunPodSandbox on the test bridge network: %v", err)
		}
		st, err := p.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod.PodSandboxId})
		if err != nil {
			t.Fatalf("PodSandboxStatus: %v", err)
		}
		_, subnet, _ := net.ParseCIDR("10.214.0.0/16")
		if ip := net.ParseIP(st.GetStatus().GetNetwork().GetIp()); ip == nil || !subnet.Contains(ip) {
			t.Errorf("pod IP %q, want one in %s", st.GetStatus().GetNetwork().GetIp(), subnet)
		}
		if _, err := p.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
			t.Errorf("StopPodSandbox: %v", err)
		}
		if _, err := p.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
	})

	if pids := HostNetHarnesses(); len(pids) > 0 {
		t.Skipf("another host-network harness started meanwhile (pids %v): net-cleanup.sh left the host network to it", pids)
	}
	if b, err := os.ReadFile(IPForwardPath); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Errorf("ip_forward after teardown is %q (%v), want 0 as before the harness", b, err)
	}
	if out, err := exec.Command("ip", "link", "show", "pu-test0").CombinedOutput(); err == nil {
		t.Errorf("bridge pu-test0 still exists after teardown:\n%s", out)
	}
	for _, table := range []string{"nat", "filter"} {
		out, err := exec.Command("iptables", "-t", table, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -t %s -S: %v\n%s", table, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "-N CNI-") {
				t.Errorf("CNI chain left in table %s: %s", table, line)
			}
		}
	}
}
