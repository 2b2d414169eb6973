#!/usr/bin/env bash
# net-cleanup.sh [STATE_DIR] — undo on the host what the test network did when
# podunit ran in a --host-net harness: the pu-test0 bridge, the FORWARD DROP
# rules for 10.214.0.0/16 tagged "podunit-critest", the CNI-* chains that the
# bridge and portmap plugins create (with the jumps into them), and, when
# STATE_DIR/ip_forward.orig exists, the host's ip_forward as it was before.
# Idempotent; touches only those names, and of those only this run's own
# FORWARD rules (STATE_DIR/forward-rules) while another host-network podunit
# harness runs: a Go test's host-net harness (test/harness) calls this at
# teardown too, possibly beside a running critest.
set -uo pipefail
SUBNET=10.214.0.0/16
BRIDGE=pu-test0
state=${1:-}

# Another podunit harness sharing the host's network (a colleague's test, a
# `make run`) may be using the bridge, the CNI chains and forwarding right now:
# then only this run's own FORWARD rules go.
shared_net_in_use() {
	local f
	for f in /proc/[0-9]*/cmdline; do
		{ tr '\0' ' ' <"$f"; } 2>/dev/null | grep -qE 'HOST_NET=1 .*podunit-harness\.sh __inner ' && return 0
	done
	return 1
}

# drop_forward once|all: the FORWARD DROP rules critest/run.sh inserts
drop_forward() {
	local r
	for r in "-s $SUBNET ! -d $SUBNET" "-d $SUBNET ! -s $SUBNET"; do
		# shellcheck disable=SC2086
		while iptables -D FORWARD $r -m comment --comment podunit-critest -j DROP 2>/dev/null; do
			[[ $1 == all ]] || break
		done
	done
}

# STATE_DIR/forward-rules: this run inserted one pair (critest/run.sh)
if [[ -n $state && -f $state/forward-rules ]]; then
	drop_forward once
	rm -f "$state/forward-rules"
fi
if shared_net_in_use; then
	echo "net-cleanup: another host-network podunit harness is running; leaving $BRIDGE, CNI chains, its FORWARD rules and ip_forward to it" >&2
	exit 0
fi
drop_forward all   # leftovers of killed runs
ip link del "$BRIDGE" 2>/dev/null
for table in nat filter; do
	chains=$(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}')
	[[ -n $chains ]] || continue
	# first every jump into a CNI chain (from built-in chains or other CNI chains)
	iptables -t "$table" -S 2>/dev/null | grep -E -- '-j CNI-[^ ]+' | sed 's/^-A/-D/' | while read -r rule; do
		eval iptables -t "$table" "$rule" 2>/dev/null
	done
	for c in $chains; do iptables -t "$table" -F "$c" 2>/dev/null; done
	for c in $chains; do iptables -t "$table" -X "$c" 2>/dev/null; done
done
if [[ -n $state && -f $state/ip_forward.orig ]]; then
	cat "$state/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
fi
exit 0
