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
#   NODES           ginkgo parallel processes (default 8, as the upstream jobs'
#                   --parallelism=8 on 2-vCPU machines; 4 with SHARD=1, the
#                   setting CI's shard has passed with)
#   SUITE_TIMEOUT   ginkgo suite timeout (default 3h; ginkgo's own 1h aborts a full run)
#   KEEP=1          leave harness and podunit running afterwards (debugging only)
#   KUBELET_FEATURE_GATES  NAME=BOOL[,NAME=BOOL...] for the kubelet's
#                   configuration (default none: the upstream jobs' gates)
#   RUNTIMES        the runtimes to judge, one run each in its own harness, in
#                   order (default podunit): podunit, containerd (Debian's
#                   1.6.20) or containerd2 (2.4.2, test/bench/build-containerd2.sh);
#                   each run's output in CONFORMANCE_OUT/<runtime> when more
#                   than one is given. Only podunit's run is judged by the
#                   ratchet; the containerds are references.
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
# runtime.journal (the runtime's unit); the ratchet's findings
# (expected-pass.txt, or shard.txt with SHARD=1); and as the very last line
#   node-conformance: <runtime> N passed, M failed, K skipped
# and with podunit and a containerd in RUNTIMES, after each run's line, as
# the very last line (issue 15; the containerd that passed more)
#   node-conformance: podunit N passed, M failed; containerd P passed, Q failed
# Exit status: non-zero when a listed spec did not pass in podunit's run, when
# nothing ran, or when a harness could not be set up or left something behind.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
source "$REPO/test/critest/lib.sh"

: "${PODUNIT_BINARY:=$REPO/bin/podunit}"
: "${CONFORMANCE_OUT:=/var/tmp/podunit-conformance}"
: "${FOCUS:=\[NodeConformance\]}"
: "${SKIP:=\[Flaky\]|\[Slow\]|\[Serial\]}"
: "${SHARD:=0}"
: "${NODES:=$(((SHARD == 1) ? 4 : 8))}"
: "${SUITE_TIMEOUT:=3h}"
: "${KEEP:=0}"
: "${RUNTIMES:=podunit}"
: "${KUBELET_FEATURE_GATES:=}"
OUT=$CONFORMANCE_OUT

read -r -a runtimes <<<"$RUNTIMES"
((${#runtimes[@]} > 0)) || die "RUNTIMES is empty"
for rt in "${runtimes[@]}"; do
	case $rt in podunit | containerd | containerd2) ;; *) die "RUNTIMES: unknown runtime $rt (podunit, containerd, containerd2)" ;; esac
done
if ((${#runtimes[@]} > 1)); then
	# one run per runtime, one after the other (one suite per machine: the
	# ports are fixed); each prints its own last line
	rm -rf "$OUT"
	mkdir -p "$OUT"
	drc=0
	declare -A passed failed
	for rt in "${runtimes[@]}"; do
		RUNTIMES=$rt CONFORMANCE_OUT=$OUT/$rt bash "$0" | tee "$OUT/$rt.out" || drc=1
		p="" f=""
		read -r p f < <(sed -n "s/^node-conformance: $rt \([0-9]*\) passed, \([0-9]*\) failed, .*/\1 \2/p" "$OUT/$rt.out" | tail -n 1) || true
		[[ -n $p ]] || { log "ERROR: no result line from the $rt run"; drc=1; continue; }
		passed[$rt]=$p failed[$rt]=$f
	done
	best=""
	for rt in containerd containerd2; do
		[[ -n ${passed[$rt]:-} ]] || continue
		if [[ -z $best ]] || ((passed[$rt] > passed[$best])); then best=$rt; fi
	done
	if [[ -n ${passed[podunit]:-} && -n $best ]]; then
		log "the containerd reference below: $best ($([[ $best == containerd ]] && echo 1.6.20 || echo 2.4.2))"
		echo "node-conformance: podunit ${passed[podunit]} passed, ${failed[podunit]} failed; containerd ${passed[$best]} passed, ${failed[$best]} failed"
	fi
	exit "$drc"
fi
RUNTIME=${runtimes[0]}
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
# the runtime under test: its binary, its unit in the harness, its socket
# there; the containerds as test/bench/bench.sh runs them (one owner of their
# build: test/bench/build-containerd2.sh)
CTRD_DIR=""
case $RUNTIME in
podunit)
	RT_BIN=$PODUNIT_BINARY UNIT=podunit.service ENDPOINT=unix:///run/podunit/podunit.sock
	;;
containerd)
	RT_BIN=$(command -v containerd) || die "containerd missing (apt-get install containerd)"
	"$RT_BIN" --version | grep -q ' 1\.6\.' || log "WARNING: $("$RT_BIN" --version) is not the 1.6.20 the docs name"
	UNIT=pnc-containerd.service ENDPOINT=unix:///run/pnc-containerd/containerd.sock
	;;
containerd2)
	CTRD_DIR=$(bash "$REPO/test/bench/build-containerd2.sh") || die "test/bench/build-containerd2.sh failed"
	RT_BIN=$CTRD_DIR/containerd UNIT=pnc-containerd.service ENDPOINT=unix:///run/pnc-containerd/containerd.sock
	;;
esac
if [[ $RUNTIME == podunit ]]; then RT_VERSION=$("$RT_BIN" version 2>/dev/null) || true; else RT_VERSION=$("$RT_BIN" --version 2>/dev/null) || true; fi
log "runtime: $RUNTIME (${RT_VERSION%%$'\n'*})"
rm -rf "$OUT"
mkdir -p "$OUT/artifacts"

registry_hold
ensure_test_registry "$OUT/images.log"
stamp=$(bash "$HERE/images.sh" "$BIN/agnhost" --stamp)
if ! registry_has_tag podunit/node-e2e-stand-ins "$stamp"; then
	log "building and pushing the node e2e images (images.sh, log $OUT/node-images.log)"
	bash "$HERE/images.sh" "$BIN/agnhost" >"$OUT/node-images.log" 2>&1 ||
		{ tail -n 30 "$OUT/node-images.log" >&2; die "images.sh failed"; }
fi

BASE=$(mktemp -d /tmp/pnc-XXXXXX) # short: sockets live in $BASE/sd/run
D=$BASE/sd
SOCK=$D${ENDPOINT#unix://}
W=$BASE/work # the suite's cwd: kubeconfig, kubelet-config, static pods
mkdir -p "$BASE/lib" "$BASE/pods" "$BASE/etc" "$BASE/kubelet" "$BASE/ctrd" "$BASE/certs.d" "$W"
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
		journal -u "$UNIT" >"$OUT/runtime.journal" || true
		journal >"$OUT/all.journal" || true
	fi
	if [[ $KEEP == 1 ]]; then
		log "KEEP=1: harness left running at $D ($RUNTIME: unix://$SOCK)"
		return
	fi
	if [[ -e $D ]]; then
		# the kubelet first: it would otherwise restart what the runtime stops
		hx sh -c 'systemctl stop "kubelet-*.service"' >/dev/null 2>&1 || true
		# containerd leaves its pods running when it stops (its shims
		# outlive it): remove them through the CRI first
		[[ $RUNTIME == podunit || ! -S $SOCK ]] ||
			timeout 120 crictl --runtime-endpoint "unix://$SOCK" rmp -a -f >/dev/null 2>&1 || true
		hx systemctl stop "$UNIT" >/dev/null 2>&1 || true
		bash "$HARNESS" stop "$D" || left=1
	fi
	net_cleanup || left=1
	registry_release || left=1
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
	--bind "$BASE/kubelet:/var/lib/kubelet" --bind "$BASE/ctrd:/var/lib/pnc-containerd" --bind "$BASE/certs.d" \
	${CTRD_DIR:+--bind "$CTRD_DIR"} >"$BASE/env"

# as test/kubelet/e2e.sh: the kubelet's OOM watcher opens /dev/kmsg, and the
# kubelet refuses to start unless it sees the sysctls it wants (read-only and
# host-wide here: the harness's view is replaced, the host stays untouched)
hx mknod -m 0600 /dev/kmsg c 1 11
# the kubelet mounts pod volumes (secret, configMap, downwardAPI, projected
# and memory emptyDir tmpfs) under /var/lib/kubelet after the runtime has
# started; podunit's private mount namespace (runtime.private_mount_namespace,
# a slave copy made at its start) receives them only from a shared mount, as
# a host's / is (systemd makes it shared). The harness's systemd runs as in a
# container and leaves every mount private, so the 32 volume specs of the
# shard saw empty directories (docs/conformance.md "Triage").
hx mount --make-rshared /var/lib/kubelet
hx sh -c 'set -e; d=/run/node-conformance-sysctl; mkdir -p $d
	for kv in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1; do
		k=${kv%=*}; f=$d/$(echo $k | tr / .); echo ${kv#*=} >$f; mount -n --bind $f /proc/sys/$k
	done'
# the suite stops its kubelet unit with `sudo systemctl stop`; Debian here has
# no sudo and everything runs as root: a shim in the harness's overlay only
hx sh -c 'printf "#!/bin/sh\nexec \"\$@\"\n" >/usr/local/bin/sudo && chmod 0755 /usr/local/bin/sudo'

# on cgroup v1 systemd keeps a unit in the root cpuacct and memory cgroups
# unless its accounting is on, and the kubelet's --runtime-cgroups readings
# (Summary API: the "runtime" system container) are then empty; cgroup v2 has
# both on by default. The same for every runtime. (This host mounts cpu and
# cpuacct as separate v1 hierarchies, and systemd 252 leaves units at the
# cpuacct root even so: the CPU reading stays 0, docs/conformance.md.)
accounting=(-p CPUAccounting=yes -p MemoryAccounting=yes)
case $RUNTIME in
podunit)
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
	hx systemd-run --unit="$UNIT" -p Type=notify -p NotifyAccess=main -p TimeoutStartSec=60 \
		-p TimeoutStopSec=30 "${accounting[@]}" "$PODUNIT_BINARY" serve --config /etc/podunit/podunit.toml >/dev/null ||
		{ journal -u "$UNIT" | tail -n 30 >&2; die "podunit did not start"; }
	;;
containerd | containerd2)
	# the registries of test/critest/registries.conf as hosts.toml (as bench.sh)
	for host in $(awk -F'"' '/^prefix/ {print $2}' "$REPO/test/critest/registries.conf"); do
		mkdir -p "$BASE/certs.d/$host"
		printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n  skip_verify = true\n' \
			"$PODUNIT_TEST_REGISTRY" "$PODUNIT_TEST_REGISTRY" >"$BASE/certs.d/$host/hosts.toml"
	done
	# runc and test-handler (a second runc, as the upstream jobs configure
	# it), systemd cgroups, the suite's pause image, the same CNI conflist;
	# restrict_oom_score_adj: no CAP_SYS_RESOURCE here (test/critest/README.md)
	if [[ $RUNTIME == containerd ]]; then
		cat >"$BASE/ctrd/config.toml" <<EOF
# written by test/conformance/run.sh: $("$RT_BIN" --version)
version = 2
root = "/var/lib/pnc-containerd/root"
state = "/run/pnc-containerd/state"
[grpc]
  address = "/run/pnc-containerd/containerd.sock"
[ttrpc]
  address = "/run/pnc-containerd/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.10.2"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = true
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$CNI_DIR"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$BASE/certs.d"
EOF
	else
		# config version 3 (bench.sh explains the split plugins and
		# use_local_image_pull); runtime_path: its own shim, not Debian's
		cat >"$BASE/ctrd/config.toml" <<EOF
# written by test/conformance/run.sh: $("$RT_BIN" --version)
version = 3
root = "/var/lib/pnc-containerd/root"
state = "/run/pnc-containerd/state"
[grpc]
  address = "/run/pnc-containerd/containerd.sock"
[ttrpc]
  address = "/run/pnc-containerd/containerd.sock.ttrpc"
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    use_local_image_pull = true
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "registry.k8s.io/pause:3.10.2"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "$BASE/certs.d"
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$CTRD_DIR/containerd-shim-runc-v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = true
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$CTRD_DIR/containerd-shim-runc-v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.test-handler.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = true
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$CNI_DIR"
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
	fi
	cp "$BASE/ctrd/config.toml" "$OUT/containerd.toml"
	log "starting $RUNTIME in the harness ($D)"
	# what containerd.service sets that matters here (as bench.sh)
	hx systemd-run --unit="$UNIT" -p Delegate=yes -p KillMode=process -p LimitNOFILE=infinity -p TasksMax=infinity \
		"${accounting[@]}" "$RT_BIN" --config /var/lib/pnc-containerd/config.toml >/dev/null ||
		{ journal -u "$UNIT" | tail -n 30 >&2; die "$RUNTIME did not start"; }
	;;
esac
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
if [[ -n $KUBELET_FEATURE_GATES ]]; then
	echo "featureGates:" >>"$W/kubelet.yaml"
	tr ',' '\n' <<<"$KUBELET_FEATURE_GATES" | sed 's/^\([^=]*\)=\(.*\)$/  \1: \2/' >>"$W/kubelet.yaml"
fi
cp "$W/kubelet.yaml" "$OUT/kubelet.yaml"

NODE=$(hx hostname)
ginkgo_args=(--nodes="$NODES" --timeout="$SUITE_TIMEOUT" --no-color --poll-progress-after=10m
	--focus="$FOCUS" --skip="$SKIP" --output-dir="$OUT" --json-report=report.json --junit-report=junit.xml)
suite_args=(--container-runtime-endpoint="$ENDPOINT" --image-service-endpoint="$ENDPOINT"
	--container-runtime-process-name="$RT_BIN" --container-runtime-pid-file=
	--prepull-images=false --node-name="$NODE" --report-dir="$OUT/artifacts"
	--kubelet-config-file="$W/kubelet.yaml" --dns-domain=cluster.local
	--kubelet-flags="--runtime-cgroups=/system.slice/$UNIT --cluster-domain=cluster.local"
	--extra-log="{\"name\":\"runtime.log\",\"journalctl\":[\"-u\",\"$UNIT\"]}" --v=4)
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
if [[ $RUNTIME == podunit && ($SHARD == 1 || ($FOCUS == '\[NodeConformance\]' && -s $EXPECTED)) ]]; then
	bash "$REPO/test/critest/ratchet.sh" "$OUT/specs.tsv" "$EXPECTED" || rrc=$?
fi
summary=$(awk -F'\t' '$1 == "passed" {p++} $1 == "skipped" || $1 == "pending" {s++}
	$1 != "passed" && $1 != "skipped" && $1 != "pending" {f++}
	END {printf "node-conformance: %s %d passed, %d failed, %d skipped\n", rt, p, f, s}' rt="$RUNTIME" "$OUT/specs.tsv")
trap - EXIT INT TERM
trc=0
(cleanup) >"$OUT/teardown.log" 2>&1 || trc=$?
((trc == 0)) || { cat "$OUT/teardown.log" >&2; log "ERROR: teardown failed"; }
echo "$summary"
((rrc == 0 && trc == 0))
