#!/usr/bin/env bash
# harness-prep.sh DIR — make a running test harness (test/harness) fit for a
# kubelet: the OOM watcher opens /dev/kmsg (the harness's /dev is private),
# and the kubelet refuses to start when vm.overcommit_memory, kernel.panic
# and kernel.panic_on_oops differ from what it wants and it cannot set them.
# /proc/sys is read-only in the harness and these are host-wide, so the
# harness's view of them is replaced instead (the host stays untouched).
# Used by test/kubelet/e2e.sh and test/bench/bench.sh (pleg figure).
set -euo pipefail
D=${1:?usage: harness-prep.sh HARNESS_DIR}
HARNESS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../harness" && pwd)/podunit-harness.sh
bash "$HARNESS" exec "$D" mknod -m 0600 /dev/kmsg c 1 11
bash "$HARNESS" exec "$D" sh -c 'set -e; d=/run/kubelet-e2e-sysctl; mkdir -p $d
	for kv in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1; do
		k=${kv%=*}; f=$d/$(echo $k | tr / .); echo ${kv#*=} >$f; mount -n --bind $f /proc/sys/$k
	done'
