#!/usr/bin/env bash
# fresh-host.sh — put back on this host, where cheap, what a fresh Debian 12
# machine has, so a test that only passes because of state an earlier run
# left behind fails here too (issue 14: the CNI bridge plugin passed on CI
# only because ip_forward was 1 from earlier runs). .ci/run calls it before
# `make test`. Undone here:
#   * a test registry left running (test/critest/registry.sh stop; its storage
#     under /var/lib/podunit-test-registry stays: a cache, images.sh fills it);
#   * the test network on the host: pu-test0, the CNI chains and critest's
#     FORWARD rules (test/cni/net-cleanup.sh);
#   * net.ipv4.ip_forward back to 0, the kernel's default;
#   * empty harness cgroups of killed runs (podunit-harness.sh gc).
# Not on a host where a host-network podunit harness runs (someone's test, a
# `make run`): it would pull the network from under it. Then it does nothing
# to the network and says so.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/critest/lib.sh"
require_root

bash "$HERE/critest/registry.sh" stop
# the same test as net-cleanup.sh's shared_net_in_use
for f in /proc/[0-9]*/cmdline; do
	if { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -qE 'HOST_NET=1 .*podunit-harness\.sh __inner '; then
		log "fresh-host: a host-network podunit harness is running (pid $(basename "$(dirname "$f")")); leaving the host network as it is"
		exit 0
	fi
done
bash "$HERE/cni/net-cleanup.sh"
echo 0 >/proc/sys/net/ipv4/ip_forward
bash "$HERE/harness/podunit-harness.sh" gc
log "fresh-host: no test registry, no test network, ip_forward=0"
