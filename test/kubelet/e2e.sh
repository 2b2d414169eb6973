#!/usr/bin/env bash
# e2e.sh — podunit under a real kubelet (standalone, static pods), both inside
# the project's systemd test harness. `make kubelet-e2e` runs it.
#
# Usage: e2e.sh [SCENARIO...]     (default: all, in this order)
#   plumbing   kubelet starts, calls RuntimeConfig/Status, runs a pod sandbox
#   logs       two containers; CRI log files with stdout/stderr tags
#   exec       crictl exec (streaming) and exec -s (ExecSync) into a kubelet container
#   liveness   exec liveness probe starts failing: kubelet restarts the container
#   readiness  nginx with an httpGet readiness probe becomes Ready
#   crashloop  a container exiting 3 with restartPolicy Always: CrashLoopBackOff
#   kill       SIGKILL podunit while pods run: nothing restarted, kubelet reconnects
#   killcreate SIGKILL podunit while the kubelet is creating a pod (RunPodSandbox)
#   killstart  SIGKILL podunit while a container unit is being started
#   killstop   SIGKILL podunit while the kubelet stops a pod (grace period)
#   dbus       restart dbus-daemon: podunit keeps serving, creating and noticing exits
#   attach     kubectl attach -it through the kubelet: echo, resize, ^C, detach
#   evented    the kubelet with featureGates EventedPLEG: it subscribes to
#              GetContainerEvents and sees container exits at once (exit
#              latency measured under generic and evented PLEG)
#   userns     a hostUsers: false pod (crun made the default handler by a reload)
#   teardown   removing manifests tears pods down: no units, mounts, pins left
#   (scenarios after plumbing need the pods of logs/web/liveness/crash; pass
#   the ones you want, e.g. `e2e.sh plumbing logs exec`)
# Environment:
#   PODUNIT_BINARY  podunit binary (default <repo>/bin/podunit; inside the repo)
#   KUBELET         kubelet binary (default: built/cached by build-kubelet.sh)
#   E2E_OUT         journals and logs (default /var/tmp/podunit-kubelet-e2e; replaced)
#   KEEP=1          leave harness, podunit and kubelet running at the end
# Output: one line per check, then as the very last line
#   kubelet-e2e: N passed, M failed
# The podunit and kubelet journals land in E2E_OUT; a failed check prints the
# podunit journal lines that explain it.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
source "$REPO/test/critest/lib.sh"
source "$HERE/lib.sh"
hx() { bash "$HARNESS" exec "$D" "$@"; }
# the harness's podunit.service is a transient unit without ExecReload=: the
# same command ExecReload= runs (contrib/systemd/podunit.service)
reload_podunit() { hx "$PODUNIT_BINARY" reload --config /etc/podunit/podunit.toml; }

: "${PODUNIT_BINARY:=$REPO/bin/podunit}"
: "${E2E_OUT:=/var/tmp/podunit-kubelet-e2e}"
: "${KEEP:=0}"
PODUNIT_METRICS_ADDR=127.0.0.1:11256
HARNESS=$REPO/test/harness/podunit-harness.sh
CNI_DIR=$HERE/cni # its own bridge and subnet: critest may run at the same time
SUBNET=10.215.0.0/16 # cni/10-kubelet-e2e.conflist
SCENARIOS=("$@")
((${#SCENARIOS[@]})) || SCENARIOS=("${ALL_SCENARIOS[@]}")

require_root
PODUNIT_BINARY=$(realpath -e "$PODUNIT_BINARY") || die "no podunit binary (run make build)"
case $PODUNIT_BINARY in "$REPO"/*) ;; *) die "PODUNIT_BINARY must lie inside $REPO (bound into the harness)" ;; esac
command -v crictl >/dev/null || die "crictl missing: run test/critest/install-tools.sh"
[[ -n ${KUBELET:-} ]] || KUBELET=$(bash "$HERE/build-kubelet.sh")
KUBELET=$(realpath -e "$KUBELET")
for p in 11248 11250 11255 11256; do
	! ss -Htln "sport = :$p" | grep -q . || die "port $p is in use (the test kubelet listens on 11248/11250/11255, podunit's metrics on 11256)"
done

rm -rf "$E2E_OUT"
mkdir -p "$E2E_OUT"
BASE=$(mktemp -d /tmp/puk-XXXXXX) # short: sockets live in $BASE/sd/run
D=$BASE/sd
SOCK=$D/run/podunit/podunit.sock
MANIFESTS=$BASE/manifests
PODLOGS=$BASE/pods
PODUNIT_LIB=$BASE/lib
PODUNIT_ETC=$BASE/etc
ATTACH_TOOL=$BASE/kubelet-attach
# kubelet configurations the scenarios write (the evented one): KCFG on the
# host is KCFG_NODE in the harness
KCFG=$BASE/kcfg
KCFG_NODE=/etc/kubelet-e2e
KUBELET_CONFIG=$HERE/kubelet-config.yaml
mkdir -p "$BASE/lib" "$PODLOGS" "$BASE/etc" "$BASE/kubelet" "$MANIFESTS" "$KCFG"
cat /proc/sys/net/ipv4/ip_forward >"$BASE/ip_forward.orig"
registry_hold

cleanup_done=0
cleanup() {
	local rc=$? left=0
	((cleanup_done)) && return
	cleanup_done=1
	save_journals
	if [[ $KEEP == 1 ]]; then
		log "KEEP=1: harness left running at $D (podunit: unix://$SOCK, kubelet: http://127.0.0.1:11255/pods)"
		log "tear down: bash $HARNESS stop $D; bash $HERE/net-cleanup.sh $BASE"
		return
	fi
	if [[ -e $D ]]; then
		# the kubelet first: it would otherwise restart what podunit stops
		hx systemctl stop kubelet.service >/dev/null 2>&1 || true
		hx systemctl stop podunit.service >/dev/null 2>&1 || true
		bash "$HARNESS" stop "$D" || left=1
	fi
	bash "$HERE/net-cleanup.sh" "$BASE" || left=1
	registry_release || left=1
	if ((left)) || grep -qF " $BASE/" /proc/self/mountinfo; then
		log "ERROR: teardown incomplete: mounts or cgroups left under $BASE"
		rc=1
	else
		rm -rf "$BASE"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ setup ---
(cd "$REPO" && go build -o "$ATTACH_TOOL" ./test/kubelet/attach) || die "cannot build test/kubelet/attach"
ensure_test_registry "$E2E_OUT/images.log"

# pods get no default route; this keeps anything else from leaving the subnet
iptables -I FORWARD -s "$SUBNET" ! -d "$SUBNET" -m comment --comment podunit-kubelet-e2e -j DROP
iptables -I FORWARD -d "$SUBNET" ! -s "$SUBNET" -m comment --comment podunit-kubelet-e2e -j DROP

bash "$HARNESS" start "$D" --host-net --net-rw --bind "$REPO" --bind "${KUBELET%/*}" \
	--bind "$BASE/lib:/var/lib/podunit" --bind "$PODLOGS:/var/log/pods" --bind "$BASE/etc:/etc/podunit" \
	--bind "$BASE/kubelet:/var/lib/kubelet" --bind "$MANIFESTS:/etc/kubernetes/manifests" \
	--bind "$KCFG:$KCFG_NODE" >"$BASE/env"

bash "$HERE/harness-prep.sh" "$D"

cat >"$BASE/etc/podunit.toml" <<EOF
# written by test/kubelet/e2e.sh
[server]
log_level = "debug"

[image]
registries_conf = "$REPO/test/critest/registries.conf"
policy_path = "$REPO/test/critest/policy.json"

[cni]
conf_dir = "$CNI_DIR"
bin_dirs = ["/usr/lib/cni", "/opt/cni/bin"]

[streaming]
address = "127.0.0.1:0"

# the evented scenario reads podunit_events_subscribers
[metrics]
address = "$PODUNIT_METRICS_ADDR"
EOF
cp "$BASE/etc/podunit.toml" "$E2E_OUT/podunit.toml"

log "starting podunit in the harness ($D)"
# Restart=always as in contrib/systemd/podunit.service: the kill scenario
# relies on systemd bringing podunit back
hx systemd-run --unit=podunit.service -p Type=notify -p NotifyAccess=main -p TimeoutStartSec=60 \
	-p TimeoutStopSec=30 -p Restart=always -p RestartSec=1 \
	"$PODUNIT_BINARY" serve --config /etc/podunit/podunit.toml >/dev/null ||
	{ journal podunit.service | tail -n 30 >&2; die "podunit did not start"; }
wait_until 30 "CRI socket" test -S "$SOCK" || die "no CRI socket at $SOCK"
cri version >/dev/null || die "crictl version failed"

log "starting kubelet $("$KUBELET" --version) in the harness"
start_kubelet "$KUBELET_CONFIG"
NODE=$(hx hostname)

# ---------------------------------------------------------------- scenarios --
source "$HERE/scenarios.sh"
run_scenarios "${SCENARIOS[@]}"

finish_run
