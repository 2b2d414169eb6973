#!/usr/bin/env bash
# run.sh — run critest v1.37.0, unchanged, against podunit running inside the
# test harness, then apply the ratchet (expected-pass.txt).
#
# Usage: run.sh            (make critest FOCUS='<ginkgo regex>' calls this)
# Environment:
#   FOCUS           ginkgo focus regex; empty = the whole validation suite
#   PODUNIT_BINARY  podunit binary (default: <repo>/bin/podunit, must exist)
#   CRITEST_OUT     reports and logs (default /var/tmp/podunit-critest; replaced)
#   CRITEST_ARGS    extra critest flags, word-split (e.g. -ginkgo.v)
#   CRITEST_WEBSOCKET=0  skip the second pass that reruns the Streaming specs
#                   with -websocket-exec -websocket-attach -websocket-portforward
#                   (it runs when FOCUS is empty or contains "Streaming")
#   CRITEST_USERNS_HANDLER  runtime handler the "Security Context UserNamespaces"
#                   specs run on (default crun): critest runs them on its
#                   -runtime-handler only, and Debian's runc 1.1, the default
#                   handler, has no idmapped mounts (docs/userns.md). They
#                   run in a pass of their own whose results replace the
#                   main pass's before the ratchet; empty: no such pass.
#   SKIP_IMAGES=1   do not rebuild/push the images (registry must hold them)
#   KEEP=1          leave harness and podunit running afterwards (debugging only;
#                   stop them with: test/harness/podunit-harness.sh stop DIR)
#
# Layout of the run:
#   * the harness boots with --host-net --net-rw --host-ipc: critest on the host
#     reaches pod IPs over the CNI bridge and host ports (12000-12003), podunit
#     reaches the image registry on 127.0.0.1:5000, and the HostIpc specs see
#     the SysV segments critest creates on the host with ipcmk; critest's
#     TMPDIR is a --shared-bind, so the host paths it makes for volumes, logs
#     and seccomp profiles exist inside, and mounts propagate both ways;
#   * podunit runs inside as podunit.service with registries.conf/policy.json
#     from this directory (every critest registry rewritten to the local one)
#     and the CNI config in test/cni (bridge pu-test0, 10.214.0.0/16, no default
#     route in pods; FORWARD drops anything between that subnet and elsewhere);
#   * the host settings the run changes (ip_forward, FORWARD rules, CNI chains,
#     the bridge, SysV segments from critest) are restored on exit.
#
# Output: critest.log, report.json, junit.xml, podunit.journal in CRITEST_OUT,
# the ratchet's findings, and as the very last line
#   critest: N passed, M failed, K skipped
# Exit status: non-zero when a spec listed in expected-pass.txt did not pass,
# when the harness could not be set up, or when it left something behind.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPO=$(cd "$KIT_DIR/../.." && pwd)
HARNESS=$REPO/test/harness/podunit-harness.sh
: "${FOCUS:=}"
: "${PODUNIT_BINARY:=$REPO/bin/podunit}"
: "${CRITEST_OUT:=/var/tmp/podunit-critest}"
: "${CRITEST_ARGS:=}"
: "${CRITEST_WEBSOCKET:=1}"
: "${SKIP_IMAGES:=0}"
: "${CRITEST_USERNS_HANDLER=crun}"
USERNS_SPECS="Security Context UserNamespaces"
: "${KEEP:=0}"

SUBNET=10.214.0.0/16    # must match test/cni/10-podunit-test.conflist
BRIDGE=pu-test0
CNI_DIR=$REPO/test/cni
EXPECTED=$KIT_DIR/expected-pass.txt
# The one spec no runtime can pass offline: it pulls
# gcr.io/k8s-staging-cri-tools/test-image-digest@sha256:9700f9a2..., a digest
# that only the real upstream image has; the local stand-in cannot match it.
DIGEST_SPEC='public image with digest should be pulled and removed'

require_root
# one run at a time on a machine: runs share host ports 12000-12003, the
# pu-test0 bridge, the CNI chains and the output directory
# (braces: a bare `exec 9>F 2>/dev/null` would send the script's stderr to /dev/null for good)
{ exec 9>"/run/lock/podunit-critest.lock"; } 2>/dev/null || exec 9>"/tmp/podunit-critest.lock"
if ! flock -n 9; then
	log "another critest run holds the lock; waiting for it"
	flock 9
fi
PODUNIT_BINARY=$(realpath -e "$PODUNIT_BINARY") || die "no podunit binary (run make build)"
case $PODUNIT_BINARY in "$REPO"/*) ;; *) die "PODUNIT_BINARY must lie inside $REPO (bound into the harness)";; esac
command -v critest >/dev/null || die "critest missing: run test/critest/install-tools.sh"
command -v iptables >/dev/null || die "iptables missing: run test/critest/install-tools.sh"

BASE="" D="" ENDPOINT=""
cleanup_done=0
cleanup() {
	local rc=$? left=0
	((cleanup_done)) && return
	cleanup_done=1
	if [[ -d $D/run/log/journal ]]; then
		journalctl -D "$D/run/log/journal" --no-pager -o short-precise >"$CRITEST_OUT/podunit.journal" 2>&1 || true
	fi
	if [[ $KEEP == 1 ]]; then
		log "KEEP=1: harness left running at $D (podunit on $ENDPOINT)"
		log "tear down with: bash $HARNESS stop $D; then remove the $BRIDGE bridge, CNI-* chains, and FORWARD rules for $SUBNET"
		return
	fi
	if [[ -z $BASE ]]; then   # died before the harness was set up
		registry_release
		exit "$rc"
	fi
	if [[ -e $D ]]; then
		bash "$HARNESS" exec "$D" systemctl stop podunit.service >/dev/null 2>&1 || true
		bash "$HARNESS" stop "$D" || left=1
	fi
	net_cleanup
	registry_release || left=1
	if ((left)) || grep -qF " $BASE/" /proc/self/mountinfo; then
		log "ERROR: teardown incomplete: the harness left mounts or cgroups behind under $BASE, or the registry did not stop"
		rc=1
	else
		rm -rf "$BASE"
	fi
	exit "$rc"
}

net_cleanup() {
	local id
	bash "$CNI_DIR/net-cleanup.sh" "$BASE"
	# critest's HostIpc specs create SysV segments on the host and never remove them
	if [[ -f $BASE/shm.before ]]; then
		for id in $(ipcs -m | awk '$2 ~ /^[0-9]+$/ {print $2}'); do
			grep -qx "$id" "$BASE/shm.before" || ipcrm -m "$id" || true
		done
	fi
}


# the registry is stopped again at the end when this run was its last user
# and a run started it (registry_hold; a registry started by hand stays up)
registry_hold
trap cleanup EXIT INT TERM
if [[ $SKIP_IMAGES != 1 ]]; then
	ensure_test_registry "$CRITEST_OUT.images.log"
else
	bash "$KIT_DIR/registry.sh" start
	registry_up || die "no registry at $PODUNIT_TEST_REGISTRY"
fi
for p in 12000 12001 12002 12003; do
	! ss -Htln "sport = :$p" | grep -q . || die "host port $p is in use (critest needs 12000-12003)"
done

rm -rf "$CRITEST_OUT"
mkdir -p "$CRITEST_OUT"
BASE=$(mktemp -d /tmp/puc-XXXXXX)   # short: sockets live in $BASE/sd/run
D=$BASE/sd
SOCK=$D/run/podunit/podunit.sock
ENDPOINT=unix://$SOCK
mkdir -p "$BASE/lib" "$BASE/pods" "$BASE/etc" "$BASE/tmp"
cat /proc/sys/net/ipv4/ip_forward >"$BASE/ip_forward.orig"
ipcs -m | awk '$2 ~ /^[0-9]+$/ {print $2}' >"$BASE/shm.before"

# pods get no default route; this keeps anything else from leaving the subnet
iptables -I FORWARD -s "$SUBNET" ! -d "$SUBNET" -m comment --comment podunit-critest -j DROP
iptables -I FORWARD -d "$SUBNET" ! -s "$SUBNET" -m comment --comment podunit-critest -j DROP
touch "$BASE/forward-rules"   # net-cleanup.sh removes this pair even beside another harness

# critest makes host paths (volumes, log dirs, seccomp profiles) in its TMPDIR
# and mounts there for the propagation specs: a shared bind at the same path.
# The harness outlives this script with KEEP=1 and must not hold the lock (9>&-).
bash "$HARNESS" start "$D" --host-net --net-rw --host-ipc --shared-bind "$BASE/tmp" \
	--bind "$REPO" --bind "$BASE/lib:/var/lib/podunit" --bind "$BASE/pods:/var/log/pods" \
	--bind "$BASE/etc:/etc/podunit" >"$BASE/env" 9>&-

cat >"$BASE/etc/podunit.toml" <<EOF
# written by test/critest/run.sh
[image]
registries_conf = "$KIT_DIR/registries.conf"
policy_path = "$KIT_DIR/policy.json"

[cni]
conf_dir = "$CNI_DIR"
bin_dirs = ["/usr/lib/cni", "/opt/cni/bin"]

[streaming]
address = "127.0.0.1:0"

# critest's NRI specs connect their plugin stubs here (-nri-socket); their
# late-joining plugins hold Synchronize open for 2s on purpose, longer than
# NRI's default 2s request timeout would let them stay registered
[nri]
enabled = true
socket_path = "/run/nri/nri.sock"
request_timeout = "10s"
EOF
cp "$BASE/etc/podunit.toml" "$CRITEST_OUT/podunit.toml"

log "starting podunit in the harness ($D)"
if ! bash "$HARNESS" exec "$D" systemd-run --unit=podunit.service --collect \
	-p Type=notify -p NotifyAccess=main -p TimeoutStartSec=60 -p TimeoutStopSec=30 \
	"$PODUNIT_BINARY" serve --config /etc/podunit/podunit.toml; then
	journalctl -D "$D/run/log/journal" --no-pager -u podunit.service | tail -n 30 >&2 || true
	die "podunit did not start"
fi
for _ in $(seq 1 150); do [[ -S $SOCK ]] && break; sleep 0.2; done
[[ -S $SOCK ]] || die "no CRI socket at $SOCK"
crictl --runtime-endpoint "$ENDPOINT" --image-endpoint "$ENDPOINT" version || die "crictl version failed"

log "skipping by hand, only: '$DIGEST_SPEC' (its digest is hard-coded to the real upstream image, which cannot be served offline)"
main_skip=$DIGEST_SPEC
[[ -n $CRITEST_USERNS_HANDLER ]] && main_skip="$DIGEST_SPEC|$USERNS_SPECS"
args=(-runtime-endpoint "$ENDPOINT" -image-endpoint "$ENDPOINT" -nri-socket "$D/run/nri/nri.sock"
	-ginkgo.skip="$main_skip" -ginkgo.no-color -ginkgo.timeout=40m
	-ginkgo.junit-report="$CRITEST_OUT/junit.xml" -ginkgo.json-report="$CRITEST_OUT/report.json")
[[ -n $FOCUS ]] && args+=(-ginkgo.focus="$FOCUS")
# shellcheck disable=SC2206
[[ -n $CRITEST_ARGS ]] && args+=($CRITEST_ARGS)
log "critest ${args[*]}  (log: $CRITEST_OUT/critest.log)"
crc=0
# critest fetches pod web servers with Go's default client, which honours proxies
env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY TMPDIR="$BASE/tmp" \
	critest "${args[@]}" >"$CRITEST_OUT/critest.log" 2>&1 || crc=$?
grep -E '^\s*\[FAIL\]' "$CRITEST_OUT/critest.log" | sort -u | sed 's/^ */  /' || true
[[ -s $CRITEST_OUT/report.json ]] || { tail -n 40 "$CRITEST_OUT/critest.log" >&2; die "critest wrote no report (exit $crc)"; }

# one line per spec: state <TAB> full name <TAB> skip/failure message
jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It")
	| [.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")),
	   ((.Failure.Message // "") | gsub("[\t\n]"; " "))] | @tsv' \
	"$CRITEST_OUT/report.json" >"$CRITEST_OUT/specs.tsv"

# The user namespace specs on a handler that has user namespaces: their
# rows replace the main pass's (where -ginkgo.skip left them out).
if [[ -n $CRITEST_USERNS_HANDLER ]] && { [[ -z $FOCUS ]] || [[ $FOCUS == *UserNamespaces* ]]; }; then
	UN=$CRITEST_OUT/userns
	mkdir -p "$UN"
	un_args=(-runtime-endpoint "$ENDPOINT" -image-endpoint "$ENDPOINT" -runtime-handler="$CRITEST_USERNS_HANDLER"
		-ginkgo.focus="$USERNS_SPECS" -ginkgo.no-color -ginkgo.timeout=10m -ginkgo.json-report="$UN/report.json")
	# shellcheck disable=SC2206
	[[ -n $CRITEST_ARGS ]] && un_args+=($CRITEST_ARGS)
	log "user namespace pass: critest ${un_args[*]}  (log: $UN/critest.log)"
	env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY TMPDIR="$BASE/tmp" \
		critest "${un_args[@]}" >"$UN/critest.log" 2>&1 || true
	grep -E '^\s*\[FAIL\]' "$UN/critest.log" | sort -u | sed 's/^ */  userns: /' || true
	[[ -s $UN/report.json ]] || { tail -n 20 "$UN/critest.log" >&2; die "the user namespace pass wrote no report"; }
	jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It")
		| [.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")),
		   ((.Failure.Message // "") | gsub("[\t\n]"; " "))] | @tsv' \
		"$UN/report.json" | awk -F'\t' -v s="$USERNS_SPECS" 'index($2, s)' >"$UN/specs.tsv"
	awk -F'\t' 'FILENAME == ARGV[1] { row[$2] = $0; next } ($2 in row) { print row[$2]; next } { print }' \
		"$UN/specs.tsv" "$CRITEST_OUT/specs.tsv" >"$CRITEST_OUT/specs.tsv.new"
	mv "$CRITEST_OUT/specs.tsv.new" "$CRITEST_OUT/specs.tsv"
fi

rrc=0
bash "$KIT_DIR/ratchet.sh" "$CRITEST_OUT/specs.tsv" "$EXPECTED" "$FOCUS" || rrc=$?

# The Streaming specs again over client-go's websocket transports (exec and
# attach on v5.channel.k8s.io, port-forward as SPDY tunnelled in a
# websocket). The spec names are the same, so this pass is a run of its own
# (reports in $CRITEST_OUT/websocket) judged by the same list.
ws_focus=""
if [[ $CRITEST_WEBSOCKET == 1 ]]; then
	if [[ -z $FOCUS ]]; then ws_focus=Streaming; elif [[ $FOCUS == *Streaming* ]]; then ws_focus=$FOCUS; fi
fi
if [[ -n $ws_focus ]]; then
	WS=$CRITEST_OUT/websocket
	mkdir -p "$WS"
	ws_args=(-runtime-endpoint "$ENDPOINT" -image-endpoint "$ENDPOINT"
		-ginkgo.focus="$ws_focus" -ginkgo.skip="$DIGEST_SPEC" -ginkgo.no-color -ginkgo.timeout=10m
		-ginkgo.json-report="$WS/report.json" -websocket-exec -websocket-attach -websocket-portforward)
	# shellcheck disable=SC2206
	[[ -n $CRITEST_ARGS ]] && ws_args+=($CRITEST_ARGS)
	log "websocket pass: critest ${ws_args[*]}  (log: $WS/critest.log)"
	env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY TMPDIR="$BASE/tmp" \
		critest "${ws_args[@]}" >"$WS/critest.log" 2>&1 || true
	grep -E '^\s*\[FAIL\]' "$WS/critest.log" | sort -u | sed 's/^ */  websocket: /' || true
	if [[ -s $WS/report.json ]]; then
		jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It")
			| [.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")),
			   ((.Failure.Message // "") | gsub("[\t\n]"; " "))] | @tsv' \
			"$WS/report.json" >"$WS/specs.tsv"
		bash "$KIT_DIR/ratchet.sh" "$WS/specs.tsv" "$EXPECTED" "$ws_focus" | sed 's/^ratchet:/ratchet (websocket):/' || rrc=1
		awk -F'\t' '$1 == "passed" {p++} $1 ~ /^(failed|panicked|interrupted|aborted|timedout)$/ {f++}
			END {printf "critest websocket pass: %d passed, %d failed\n", p, f}' "$WS/specs.tsv"
	else
		tail -n 20 "$WS/critest.log" >&2
		log "ERROR: the websocket pass wrote no report"
		rrc=1
	fi
fi
# the summary must be the last line: tear down first, quietly, into a log
trap - EXIT INT TERM
summary=$(awk -F'\t' '
	$1 == "passed" {p++}
	$1 ~ /^(failed|panicked|interrupted|aborted|timedout)$/ {f++}
	$1 ~ /^(skipped|pending)$/ {s++}
	END {printf "critest: %d passed, %d failed, %d skipped\n", p, f, s}' "$CRITEST_OUT/specs.tsv")
trc=0
( cleanup ) >"$CRITEST_OUT/teardown.log" 2>&1 || trc=$?
if ((trc)); then cat "$CRITEST_OUT/teardown.log" >&2; log "ERROR: teardown failed"; fi
if ((rrc)) && [[ ${CI:-} == true ]]; then   # CI keeps only the console
	log "last 150 lines of podunit's journal ($CRITEST_OUT/podunit.journal):"
	tail -n 150 "$CRITEST_OUT/podunit.journal" >&2 || true
fi
echo "$summary"
if ((rrc || trc)); then exit 1; fi
exit 0
