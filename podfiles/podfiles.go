// Package podfiles renders the files every container of a pod shares
// (resolv.conf, hosts, hostname) and sorts a pod's sysctls by the namespace
// that owns them.
package podfiles

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// HostResolvConf is used when the pod gives no DNS configuration, the
// kubelet's behaviour for dnsPolicy Default.
const HostResolvConf = "/etc/resolv.conf"

// ResolvConf renders a resolv.conf. A nil or empty dns yields the content of
// hostFile, so a pod without DNS settings resolves like the node does.
func ResolvConf(dns *runtimeapi.DNSConfig, hostFile string) ([]byte, error) {
	if dns == nil || len(dns.GetServers())+len(dns.GetSearches())+len(dns.GetOptions()) == 0 {
		b, err := os.ReadFile(hostFile)
		if err != nil {
			return nil, fmt.Errorf("host resolv.conf: %w", err)
		}
		return b, nil
	}
	var b bytes.Buffer
	line := func(key string, vals []string) error {
		if len(vals) == 0 {
			return nil
		}
		for _, v := range vals {
			if v == "" || strings.ContainsAny(v, " \t\r\n#;") {
				return fmt.Errorf("dns %s entry %q: %w", key, v, errdefs.ErrInvalid)
			}
		}
		if key == "nameserver" {
			for _, v := range vals {
				fmt.Fprintf(&b, "nameserver %s\n", v)
			}
			return nil
		}
		fmt.Fprintf(&b, "%s %s\n", key, strings.Join(vals, " "))
		return nil
	}
	if err := line("search", dns.GetSearches()); err != nil {
		return nil, err
	}
	if err := line("nameserver", dns.GetServers()); err != nil {
		return nil, err
	}
	if err := line("options", dns.GetOptions()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Hosts renders /etc/hosts for a pod with its own network namespace: the
// loopback names plus the hostname on each pod IP.
func Hosts(hostname string, ips []string) []byte {
	var b bytes.Buffer
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	if hostname != "" {
		for _, ip := range ips {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	return b.Bytes()
}

// HostHosts is the node's hosts file, which host-network pods share.
const HostHosts = "/etc/hosts"

// NodeHosts returns /etc/hosts for a host-network pod: the content of the
// node's hostFile. A node without one (minimal images have none) gets the
// loopback entries of Hosts, as a pod with its own network namespace would;
// any other problem with the file (unreadable, not a regular file) is an
// error, so a broken node is not papered over.
func NodeHosts(hostFile string) ([]byte, error) {
	fi, err := os.Stat(hostFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Hosts("", nil), nil
	}
	if err != nil {
		return nil, fmt.Errorf("node hosts file: %w", err)
	}
	// checked before reading: a FIFO would block the read
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("node hosts file %s is not a regular file (%s)", hostFile, fi.Mode().Type())
	}
	b, err := os.ReadFile(hostFile)
	if err != nil {
		return nil, fmt.Errorf("node hosts file: %w", err)
	}
	return b, nil
}

// Hostname renders /etc/hostname.
func Hostname(name string) []byte { return []byte(name + "\n") }

// ValidHostname rejects names the kernel or a resolver would choke on.
func ValidHostname(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("hostname %q longer than 64 bytes: %w", name, errdefs.ErrInvalid)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return fmt.Errorf("hostname %q contains %q: %w", name, r, errdefs.ErrInvalid)
		}
	}
	return nil
}

// WriteFile writes data to dir/name through a temporary file and a rename,
// so a container that bind-mounts the file never sees it half written.
// Mode 0644: containers running as any user read these files.
func WriteFile(dir, name string, data []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("pod file dir: %w", err)
	}
	p := filepath.Join(dir, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return "", fmt.Errorf("chmod %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return p, nil
}
