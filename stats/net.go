package stats

import (
	"fmt"
	"os"

	"github.com/podunit/podunit/netns"
)

// NetworkStats returns the interface counters of the network namespace
// pinned at nsPath. /sys/class/net would show the namespace that mounted
// /sys, so the counters come from /proc/thread-self/net/dev read on a
// thread that has joined the namespace (and is discarded afterwards).
// The loopback interface is left out: it says nothing about pod traffic.
func NetworkStats(nsPath string) ([]InterfaceStats, error) {
	var data []byte
	err := netns.Do(map[netns.Kind]string{netns.Net: nsPath}, func() error {
		var err error
		data, err = os.ReadFile("/proc/thread-self/net/dev")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("network stats of %s: %w", nsPath, err)
	}
	all, err := ParseNetDev(string(data))
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, s := range all {
		if s.Name != "lo" {
			out = append(out, s)
		}
	}
	return out, nil
}

// HostNetworkStats returns the interface counters of podunit's own network
// namespace, which host-network pods share.
func HostNetworkStats() ([]InterfaceStats, error) {
	data, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return nil, fmt.Errorf("host network stats: %w", err)
	}
	all, err := ParseNetDev(string(data))
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, s := range all {
		if s.Name != "lo" {
			out = append(out, s)
		}
	}
	return out, nil
}
