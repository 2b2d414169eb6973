#!/usr/bin/env bash
# net-cleanup.sh [STATE_DIR] — undo on the host what the kubelet e2e's pod
# network did (the harness shares the host's network namespace): the pu-ke2e0
# bridge, the FORWARD rules tagged podunit-kubelet-e2e, and ip_forward as it
# was (STATE_DIR/ip_forward.orig) unless critest's network is up right now.
# The network is separate from critest's (test/cni, pu-test0, 10.214.0.0/16)
# so both can run at once; it creates no CNI-* chains (no ipMasq, no portmap).
set -uo pipefail
SUBNET=10.215.0.0/16
state=${1:-}
ip link del pu-ke2e0 2>/dev/null
while iptables -D FORWARD -s "$SUBNET" ! -d "$SUBNET" -m comment --comment podunit-kubelet-e2e -j DROP 2>/dev/null; do :; done
while iptables -D FORWARD -d "$SUBNET" ! -s "$SUBNET" -m comment --comment podunit-kubelet-e2e -j DROP 2>/dev/null; do :; done
if [[ -n $state && -f $state/ip_forward.orig ]] && ! ip link show pu-test0 >/dev/null 2>&1; then
	cat "$state/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
fi
exit 0
