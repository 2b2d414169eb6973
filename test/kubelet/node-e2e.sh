#!/usr/bin/env bash
# node-e2e.sh — the kubelet scenarios of e2e.sh on a real node: runs INSIDE
# the node tier's VM (test/vm/run.sh pushes it there with the kubelet), where
# systemd is PID 1, the hierarchy is cgroup v2 only and podunit is the
# package's podunit.service. No harness: the paths are the node's own.
#
# Usage: node-e2e.sh KUBELET [SCENARIO...]   (default: all, as in e2e.sh)
# Environment:
#   E2E_OUT   journals and logs (default /var/tmp/kubelet-e2e; replaced)
# Output: one line per check, then as the very last line
#   kubelet-e2e: N passed, M failed
#
# What differs from e2e.sh, and why:
#   - the kubelet runs with failCgroupV1 at its default (the node is v2) and
#     sets the sysctls it wants itself (/proc/sys is writable here);
#   - the liveness probe's timeout is 10 s, not 2 (an exec in the emulated
#     VM takes 1-2 s; the probe must only fail once the file is gone);
#   - podunit is the installed service: a drop-in turns on debug logging (the
#     plumbing checks look for the kubelet's calls in its journal) and the
#     service is restarted the way an operator would;
#   - the node keeps podunit, its package and the registry tunnel afterwards;
#     the kubelet, its pods and the drop-in go.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../critest/lib.sh"
# the probed container's exec probe may not time out while it is healthy:
# an exec takes about 1 s in the emulated VM, 2 s when it is busy
TEMPLATES=/var/tmp/kubelet-e2e-manifests
rm -rf "$TEMPLATES"
cp -r "$HERE/manifests" "$TEMPLATES"
sed -i 's/^      timeoutSeconds: 2$/      timeoutSeconds: 10/' "$TEMPLATES/liveness.yaml"
grep -q 'timeoutSeconds: 10' "$TEMPLATES/liveness.yaml" || { echo "liveness.yaml has no 2 s probe timeout to raise" >&2; exit 1; }
source "$HERE/lib.sh"

KUBELET=$(realpath -e "${1:?usage: node-e2e.sh KUBELET [SCENARIO...]}")
shift
: "${E2E_OUT:=/var/tmp/kubelet-e2e}"
SCENARIOS=("$@")
((${#SCENARIOS[@]})) || SCENARIOS=("${ALL_SCENARIOS[@]}")

require_root
D="" # the node's /run is /run
SOCK=/run/podunit/podunit.sock
MANIFESTS=/etc/kubernetes/manifests
PODLOGS=/var/log/pods
PODUNIT_LIB=/var/lib/podunit
PODUNIT_ETC=/etc/podunit
# test/vm/run.sh pushes it beside the kubelet
: "${ATTACH_TOOL:=$HERE/../../../kubelet-attach}"
reload_podunit() { systemctl reload podunit.service; }
DROPIN=/etc/podunit/podunit.toml.d/60-kubelet-e2e.toml
hx() { "$@"; }
# the pods' network is the one podunit's CNI config on the node gives them
SUBNET=$(jq -r '.plugins[] | select(.type == "bridge") | .ipam.ranges[0][0].subnet' /etc/podunit/kit/10-podunit-test.conflist)
[[ $SUBNET == *.0.0/16 ]] || die "pod subnet '$SUBNET' is not a /16"
# the node's journal is volatile (/run/log/journal), as journal() expects
[[ -d /run/log/journal ]] || die "no volatile journal in /run/log/journal"
systemctl is-active -q podunit.service || die "podunit.service is not running"
command -v crictl >/dev/null || die "crictl missing"
for p in 11248 11250 11255 11256; do
	! ss -Htln "sport = :$p" | grep -q . || die "port $p is in use"
done

rm -rf "$E2E_OUT"
mkdir -p "$E2E_OUT" "$MANIFESTS" /var/lib/kubelet
[[ -z $(ls -A "$MANIFESTS") ]] || die "$MANIFESTS is not empty"

restart_podunit() {
	systemctl restart podunit.service
	wait_until 60 "podunit serving" cri version || die "podunit did not come back after a restart"
}

cleanup_done=0
cleanup() {
	local rc=$?
	((cleanup_done)) && return
	cleanup_done=1
	save_journals
	rm -f "$MANIFESTS"/*.yaml
	systemctl stop kubelet.service >/dev/null 2>&1 || true
	systemctl reset-failed kubelet.service >/dev/null 2>&1 || true
	# whatever the kubelet left (a failed run): gone before the next test
	local p
	for p in $(cri pods -q); do cri stopp "$p" >/dev/null || true; cri rmp -f "$p" >/dev/null || true; done
	if [[ -e $DROPIN || -e $PODUNIT_ETC/$USERNS_DROPIN ]]; then
		rm -f "$DROPIN" "$PODUNIT_ETC/$USERNS_DROPIN"
		restart_podunit || rc=1
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PODUNIT_METRICS_ADDR=127.0.0.1:11256
cat >"$DROPIN" <<EOF
# written by node-e2e.sh for the kubelet scenarios; removed at their end
[server]
log_level = "debug"

# the evented scenario reads podunit_events_subscribers
[metrics]
address = "$PODUNIT_METRICS_ADDR"
EOF
log "podunit: debug logging (drop-in $DROPIN), restarting the service"
restart_podunit

# the harness's kubelet config, minus what only the v1 harness needs
sed '/^# the harness runs on these hosts/d; /^failCgroupV1:/d' "$HERE/kubelet-config.yaml" >"$E2E_OUT/kubelet-config.yaml"
grep -q failCgroupV1 "$E2E_OUT/kubelet-config.yaml" && die "failCgroupV1 still set"
log "starting kubelet $("$KUBELET" --version) on the node"
# kubelet configurations the scenarios write (the evented one)
KCFG=$E2E_OUT
KCFG_NODE=$E2E_OUT
KUBELET_CONFIG=$E2E_OUT/kubelet-config.yaml
start_kubelet "$KUBELET_CONFIG"
NODE=$(hostname)

source "$HERE/scenarios.sh"
run_scenarios "${SCENARIOS[@]}"

finish_run
