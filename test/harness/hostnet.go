package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// IPForwardPath is the host's net.ipv4.ip_forward. A --host-net harness sees
// it read-only (unless NetRW), and the CNI bridge plugin of the test network
// writes it whenever it is not 1 already: on a fresh machine (0) every pod on
// the bridge would fail with "failed to enable forwarding ... read-only file
// system", on one where an earlier run left 1 it would pass.
const IPForwardPath = "/proc/sys/net/ipv4/ip_forward"

// ipForwardOrig is the file in Base recording the host's ip_forward before the
// harness set it; test/cni/net-cleanup.sh reads it under that name.
const ipForwardOrig = "ip_forward.orig"

// prepareHostNet makes a --host-net harness independent of what earlier runs
// left on the host: it records ip_forward in Base and sets it to 1, so the
// bridge plugin never has to write it. cleanupHostNet undoes it at teardown.
func (h *Harness) prepareHostNet() error {
	cur, err := os.ReadFile(IPForwardPath)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(h.Base, ipForwardOrig), cur, 0o644); err != nil {
		return err
	}
	h.hostNet = true
	if strings.TrimSpace(string(cur)) == "1" {
		return nil
	}
	if err := os.WriteFile(IPForwardPath, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("setting %s to 1: %w", IPForwardPath, err)
	}
	return nil
}

// cleanupHostNet runs test/cni/net-cleanup.sh with Base as its state dir once
// the harness is stopped: it restores ip_forward from ip_forward.orig and
// removes the test network's bridge and CNI chains, unless another host-net
// harness still runs (then it leaves those to it).
func (h *Harness) cleanupHostNet() error {
	if !h.hostNet {
		return nil
	}
	script := filepath.Join(h.Repo, "test", "cni", "net-cleanup.sh")
	out, err := runTimeout(time.Minute, "bash", script, h.Base)
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", script, h.Base, err, out)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		h.t.Logf("harness: %s", bytes.TrimSpace(out))
	}
	return nil
}

// HostNetHarnesses lists the host PIDs of running --host-net harnesses (this
// test process' and anybody else's), the way net-cleanup.sh finds them: the
// launcher's command line carries HOST_NET=1 and `podunit-harness.sh __inner`.
func HostNetHarnesses() []string {
	var pids []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		cmd := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		i := strings.Index(cmd, "HOST_NET=1 ")
		if i >= 0 && strings.Contains(cmd[i:], "podunit-harness.sh __inner ") {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

func runTimeout(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s", timeout)
	}
	return out, err
}
