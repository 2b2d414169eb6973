#!/usr/bin/env bash
# run.sh — the upstream Kubernetes node e2e suite (k8s.io/kubernetes
# test/e2e_node, v1.37.2), [NodeConformance] specs, against podunit, both
# inside the project's systemd test harness. `make node-conformance` runs it.
#
# Usage: run.sh
# Environment:
#   PODUNIT_BINARY  podunit binary (default <repo>/bin/podunit; inside the repo)
#   CONFORMANCE_OUT reports and logs (default /var/tmp/podunit-conformance; replaced)
#   FOCUS, SKIP     ginkgo regexes (default: the upstream jobs' \[NodeConformance\]
#                   and \[Flaky\]|\[Slow\]|\[Serial\])
#   SHARD=1         only the specs listed in shard.txt (the fast subset CI
#                   runs), judged by that list; FOCUS is then ignored
#   NODES           ginkgo parallel processes (default 4)
#   SUITE_TIMEOUT   ginkgo suite timeout (default 3h; ginkgo's own 1h aborts a full run)
#   KEEP=1          leave harness and podunit running afterwards (debugging only)
#
# What runs where (docs/conformance.md has the why):
#   * build.sh builds/caches e2e_node.test, ginkgo, agnhost and the kubelet;
#   * images.sh pushes the suite's image stand-ins to the critest kit's registry
#     (127.0.0.1:5000; test/critest/registries.conf maps registry.k8s.io there);
#   * the harness boots with --host-net --net-rw (the suite's kube-apiserver on
#     127.0.0.1:6443, the kubelet on 10248/10250/10255 of the host network);
#     podunit runs inside as podunit.service with handlers runc (default) and
#     test-handler (runc again, as the upstream jobs configure it), CNI bridge
#     pu-nce0 on 10.216.0.0/16 without a default route in pods;
#   * ginkgo runs e2e_node.test inside the harness: the suite starts its own
#     services (embedded etcd, in-process kube-apiserver, namespace
#     controller) and the kubelet as a systemd-run unit there, with the
#     systemd cgroup driver and podunit's socket as its runtime endpoint;
#     --prepull-images=false (the pre-pull list holds a digest-pinned image).
# Output: in CONFORMANCE_OUT: e2e.log, report.json, junit.xml, specs.tsv
# ("state<TAB>spec<TAB>message"), artifacts/ (kubelet.log, the suite's logs),
# podunit.journal; the ratchet's findings (expected-pass.txt, or shard.txt
# with SHARD=1); and as the very last line
#   node-conformance: podunit N passed, M failed, K skipped
# Exit status: non-zero when a listed spec did not pass, when nothing ran, or
# when the harness could not be set up or left something behind.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
source "$REPO/test/critest/lib.sh"

: "${PODUNIT_BINARY:=$REPO/bin/podunit}"
: "${CONFORMANCE_OUT:=/var/tmp/podunit-conformance}"
: "${FOCUS:=\[NodeConformance\]}"
: "${SKIP:=\[Flaky\]|\[Slow\]|\[Serial\]}"
: "${SHARD:=0}"
: "${NODES:=4}"
: "${SUITE_TIMEOUT:=3h}"
: "${KEEP:=0}"
OUT=$CONFORMANCE_OUT
HARNESS=$REPO/test/harness/podunit-harness.sh
CNI_DIR=$HERE/cni
SUBNET=10.216.0.0/16 # cni/10-node-conformance.conflist
BRIDGE=pu-nce0
RULE_TAG=podunit-conformance
EXPECTED=$HERE/expected-pass.txt
PORTS=(6443 10248 10250 10255) # kube-apiserver; the kubelet's (10248 and 10255 are fixed in the suite)

require_root
PODUNIT_BINARY=$(realpath -e "$PODUNIT_BINARY") || die "no podunit binary (run make build)"
case $PODUNIT_BINARY in "$REPO"/*) ;; *) die "PODUNIT_BINARY must lie inside $REPO (bound into the harness)" ;; esac
for p in "${PORTS[@]}"; do
	! ss -Htln "sport = :$p" | grep -q . || die "port $p is in use (the suite's apiserver and kubelet listen on ${PORTS[*]})"
done

if [[ $SHARD == 1 ]]; then
	EXPECTED=$HERE/shard.txt
	# the shard's focus: each listed spec's full name, regex-quoted
	FOCUS=$(grep -vE '^\s*(#|$)' "$EXPECTED" | sed 's/[][\\.*^$(){}?+|/]/\\&/g' | paste -sd'|')
	[[ -n $FOCUS ]] || die "$EXPECTED lists no spec"
fi

BIN=$(bash "$HERE/build.sh")
log "suite binaries: $BIN"
rm -rf "$OUT"
mkdir -p "$OUT/artifacts"

registry_was_up=0
registry_up && registry_was_up=1
ensure_test_registry "$OUT/images.log"
if ! curl -fsS -o /dev/null -H 'Accept: application/vnd.oci.image.index.v1+json' \
	"http://$PODUNIT_TEST_REGISTRY/v2/e2e-test-images/agnhost/manifests/$(cat "$BIN/agnhost.version")"; then
	log "building and pushing the node e2e images (images.sh, log $OUT/node-images.log)"
	bash "$HERE/images.sh" "$BIN/agnhost" >"$OUT/node-images.log" 2>&1 ||
		{ tail -n 30 "$OUT/node-images.log" >&2; die "images.sh failed"; }
fi

BASE=$(mktemp -d /tmp/pnc-XXXXXX) # short: sockets live in $BASE/sd/run
D=$BASE/sd
SOCK=$D/run/podunit/podunit.sock
W=$BASE/work # the suite's cwd: kubeconfig, kubelet-config, static pods
mkdir -p "$BASE/lib" "$BASE/pods" "$BASE/etc" "$BASE/kubelet" "$W"
cat /proc/sys/net/ipv4/ip_forward >"$BASE/ip_forward.orig"
# the kubelet makes its KUBE-* canary chains in the host's tables (host
# network); the ones it adds go again at the end
iptables-save 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p' | sort -u >"$BASE/kube-chains.orig"

hx() { bash "$HARNESS" exec "$D" "$@"; }
journal() { journalctl -D "$D/run/log/journal" --no-pager -o short-precise "$@" 2>/dev/null; }

net_cleanup() {
	local t c
	ip link del "$BRIDGE" 2>/dev/null
	while iptables -D FORWARD -s "$SUBNET" ! -d "$SUBNET" -m comment --comment "$RULE_TAG" -j DROP 2>/dev/null; do :; done
	while iptables -D FORWARD -d "$SUBNET" ! -s "$SUBNET" -m comment --comment "$RULE_TAG" -j DROP 2>/dev/null; do :; done
	for t in filter nat mangle; do
		for c in $(iptables -t "$t" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
			grep -qx "$c" "$BASE/kube-chains.orig" && continue
			iptables -t "$t" -F "$c" && iptables -t "$t" -X "$c" || return 1
		done
	done
	if ! ip link show pu-test0 >/dev/null 2>&1 && ! ip link show pu-ke2e0 >/dev/null 2>&1; then
		cat "$BASE/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
	fi
}

cleanup_done=0
cleanup() {
	local rc=$? left=0
	((cleanup_done)) && return
	cleanup_done=1
	if [[ -d $D/run/log/journal ]]; then
		journal -u podunit.service >"$OUT/podunit.journal" || true
		journal >"$OUT/all.journal" || true
	fi
	if [[ $KEEP == 1 ]]; then
		log "KEEP=1: harness left running at $D (podunit: unix://$SOCK)"
		return
	fi
	if [[ -e $D ]]; then
		# the kubelet first: it would otherwise restart what podunit stops
		hx sh -c 'systemctl stop "kubelet-*.service"' >/dev/null 2>&1 || true
		hx systemctl stop podunit.service >/dev/null 2>&1 || true
		bash "$HARNESS" stop "$D" || left=1
	fi
	net_cleanup || left=1
	((registry_was_up)) || bash "$REPO/test/critest/registry.sh" stop || left=1
	if ((left)) || grep -qF " $BASE/" /proc/self/mountinfo; then
		log "ERROR: teardown incomplete: mounts, cgroups or chains left under $BASE"
		rc=1
	else
		rm -rf "$BASE"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ setup ---
iptables -I FORWARD -s "$SUBNET" ! -d "$SUBNET" -m comment --comment "$RULE_TAG" -j DROP
iptables -I FORWARD -d "$SUBNET" ! -s "$SUBNET" -m comment --comment "$RULE_TAG" -j DROP

bash "$HARNESS" start "$D" --host-net --net-rw --bind "$REPO" --bind "$BIN" --bind "$OUT" --bind "$W" \
	--bind "$BASE/lib:/var/lib/podunit" --bind "$BASE/pods:/var/log/pods" --bind "$BASE/etc:/etc/podunit" \
	--bind "$BASE/kubelet:/var/lib/kubelet" >"$BASE/env"

# as test/kubelet/e2e.sh: the kubelet's OOM watcher opens /dev/kmsg, and the
# kubelet refuses to start unless it sees the sysctls it wants (read-only and
# host-wide here: the harness's view is replaced, the host stays untouched)
hx mknod -m 0600 /dev/kmsg c 1 11
hx sh -c 'set -e; d=/run/node-conformance-sysctl; mkdir -p $d
	for kv in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1; do
		k=${kv%=*}; f=$d/$(echo $k | tr / .); echo ${kv#*=} >$f; mount -n --bind $f /proc/sys/$k
	done'
# the suite stops its kubelet unit with `sudo systemctl stop`; Debian here has
# no sudo and everything runs as root: a shim in the harness's overlay only
hx sh -c 'printf "#!/bin/sh\nexec \"\$@\"\n" >/usr/local/bin/sudo && chmod 0755 /usr/local/bin/sudo'

cat >"$BASE/etc/podunit.toml" <<EOF
# written by test/conformance/run.sh
[image]
registries_conf = "$REPO/test/critest/registries.conf"
policy_path = "$REPO/test/critest/policy.json"

[cni]
conf_dir = "$CNI_DIR"
bin_dirs = ["/usr/lib/cni", "/opt/cni/bin"]

[streaming]
address = "127.0.0.1:0"

# the RuntimeClass specs name handler "test-handler", which the upstream
# jobs configure as a second runc (test-infra jobs/e2e_node/containerd)
[runtime.handlers.runc]
type = "runc"
path = "/usr/sbin/runc"
root = "/run/podunit/runc"

[runtime.handlers.crun]
type = "crun"
path = "/usr/bin/crun"
root = "/run/podunit/crun"

[runtime.handlers.test-handler]
type = "runc"
path = "/usr/sbin/runc"
root = "/run/podunit/runc-test-handler"
EOF
cp "$BASE/etc/podunit.toml" "$OUT/podunit.toml"

log "starting podunit in the harness ($D)"
hx systemd-run --unit=podunit.service -p Type=notify -p NotifyAccess=main -p TimeoutStartSec=60 \
	-p TimeoutStopSec=30 "$PODUNIT_BINARY" serve --config /etc/podunit/podunit.toml >/dev/null ||
	{ journal -u podunit.service | tail -n 30 >&2; die "podunit did not start"; }
for _ in $(seq 1 150); do [[ -S $SOCK ]] && break; sleep 0.2; done
[[ -S $SOCK ]] || die "no CRI socket at $SOCK"

# the suite's base kubelet configuration (it forces authn/authz, ports and
# the static pod path on top); test/kubelet/kubelet-config.yaml explains the
# harness-specific values
cat >"$W/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cgroupRoot: /
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
podCIDR: $SUBNET
clusterDomain: cluster.local
serializeImagePulls: false
volumeStatsAggPeriod: 10s
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
runtimeRequestTimeout: 2m
resolvConf: /etc/resolv.conf
EOF
cp "$W/kubelet.yaml" "$OUT/kubelet.yaml"

NODE=$(hx hostname)
ENDPOINT=unix:///run/podunit/podunit.sock
ginkgo_args=(--nodes="$NODES" --timeout="$SUITE_TIMEOUT" --no-color --poll-progress-after=10m
	--focus="$FOCUS" --skip="$SKIP" --output-dir="$OUT" --json-report=report.json --junit-report=junit.xml)
suite_args=(--container-runtime-endpoint="$ENDPOINT" --image-service-endpoint="$ENDPOINT"
	--container-runtime-process-name="$PODUNIT_BINARY" --container-runtime-pid-file=
	--prepull-images=false --node-name="$NODE" --report-dir="$OUT/artifacts"
	--kubelet-config-file="$W/kubelet.yaml" --dns-domain=cluster.local
	--kubelet-flags="--runtime-cgroups=/system.slice/podunit.service --cluster-domain=cluster.local"
	--extra-log='{"name":"podunit.log","journalctl":["-u","podunit.service"]}' --v=4)
printf '%q ' "$BIN/ginkgo" "${ginkgo_args[@]}" "$BIN/e2e_node.test" -- "${suite_args[@]}" >"$OUT/command"
log "running the suite (focus ${#FOCUS} chars, skip '$SKIP', $NODES processes; log $OUT/e2e.log)"
started=$(date +%s)
erc=0
# shellcheck disable=SC2016
hx env HOME=/root sh -c 'cd "$1" && shift && exec "$@"' _ "$W" \
	"$BIN/ginkgo" "${ginkgo_args[@]}" "$BIN/e2e_node.test" -- "${suite_args[@]}" >"$OUT/e2e.log" 2>&1 || erc=$?
log "the suite took $(($(date +%s) - started)) s (exit $erc)"
[[ -s $OUT/report.json ]] || { tail -n 40 "$OUT/e2e.log" >&2; die "the suite wrote no report (exit $erc)"; }

# one line per spec: state <TAB> full name <TAB> skip/failure message <TAB> seconds
jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It")
	| [.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")),
	   ((.Failure.Message // "") | gsub("[\t\n]"; " ")), ((.RunTime // 0) / 1e9 | floor)] | @tsv' \
	"$OUT/report.json" >"$OUT/specs.tsv"
grep -P '^(failed|panicked|timedout|interrupted|aborted)\t' "$OUT/specs.tsv" | cut -f1,2 | sed 's/^/  /' || true

rrc=0
# a full-suite ratchet only when the whole conformance set ran
if [[ $SHARD == 1 || ($FOCUS == '\[NodeConformance\]' && -s $EXPECTED) ]]; then
	bash "$REPO/test/critest/ratchet.sh" "$OUT/specs.tsv" "$EXPECTED" || rrc=$?
fi
summary=$(awk -F'\t' '$1 == "passed" {p++} $1 == "skipped" || $1 == "pending" {s++}
	$1 != "passed" && $1 != "skipped" && $1 != "pending" {f++}
	END {printf "node-conformance: podunit %d passed, %d failed, %d skipped\n", p, f, s}' "$OUT/specs.tsv")
trap - EXIT INT TERM
trc=0
(cleanup) >"$OUT/teardown.log" 2>&1 || trc=$?
((trc == 0)) || { cat "$OUT/teardown.log" >&2; log "ERROR: teardown failed"; }
echo "$summary"
((rrc == 0 && trc == 0))
