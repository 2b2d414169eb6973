#!/usr/bin/env bash
# bench.sh — `make bench`: podunit beside two reference runtimes, Debian's
# containerd 1.6.20 and containerd 2.4.2 (built from the Go module proxy by
# test/bench/build-containerd2.sh, cached), in one systemd harness, same
# images, same CNI network, same machine, alternating; writes
# docs/benchmarks.md from what this run measured. Every ratio is against the
# better of the two containerds in the run.
#
#   bash test/bench/bench.sh            (make bench)
# Environment:
#   PODUNIT_BINARY  podunit binary inside the repo (default bin/podunit; make bench builds it)
#   BENCH_OUT       raw results, logs, profiles (default /var/tmp/podunit-bench; replaced)
#   BENCH_DOC       the table (default <repo>/docs/benchmarks.md)
#   ROUNDS          alternating rounds of every figure but density and scale, which
#                   run once (default 3: at least 3 rounds, issue 20)
#   ONLY            space-separated subset of: runp pull startlat critest logs density scale pleg profile
#                   (default all but scale and pleg: at its default size scale takes
#                   about half an hour per runtime on the 2-core machine; it
#                   took 6.5 min for podunit with SCALE_CHURN=1000; pleg
#                   runs a kubelet on podunit, about 2 + ROUNDS x 4 min)
#   SCALE_PODS, SCALE_PER_POD  the scale figure's pods and containers per pod (500, 2)
#   SCALE_CHURN     its create/start/stop/remove cycles after the removal (10000)
#   SCALE_HOLD      its hold with a daemon-reload every second (60s)
#   SCALE_PARALLEL  its pod starts, removals and cycles in flight (4)
#   BENCH_METRICS   podunit's metrics address (127.0.0.1:39217): the scale figure reads
#                   its D-Bus call latency histogram there
#   PLEG_PODS, PLEG_HOLD, PLEG_SETTLE  the pleg figure's static pods (100), the
#                   hold over which the kubelet's CPU is read (60 s) and the
#                   wait before it once all pods run (30 s)
#   KEEP=1          leave the harness running at the end (debugging)
#   PROFILE_PARALLEL  the profiled startlat's bursts (default 1: sequential)
#   RUNTIMES        space-separated subset of: podunit containerd containerd2
#                   (default all three; podunit alone for a before/after of a
#                   podunit change; the table then has no ratios)
#   CONTAINERD2_VERSION, CONTAINERD2_CACHE  see test/bench/build-containerd2.sh
#
# Layout: one harness (test/harness/podunit-harness.sh, --host-net --net-rw
# --run-tmpfs: its /run a tmpfs as on a node, where podunit keeps storage's
# run root and the containerds their state) runs podunit.service, bench-containerd.service (containerd 1.6.20 with the
# CRI plugin, runc, SystemdCgroup = true) and bench-containerd2.service
# (containerd 2.4.2, config version 3, its CRI plugins, the same runc binary
# and options; its own root, state and socket, and its own shim binary). All
# three use one CNI conflist: the
# project's test network (test/cni/10-podunit-test.conflist) with only bridge
# name and subnet changed (pu-bench0, 10.215.0.0/16) so that a critest run of
# test/critest on the same host cannot collide with it; its host-local
# addresses live in the harness, shared by the runtimes. All pull from the
# local registry (127.0.0.1:5000): podunit with test/critest/registries.conf,
# both containerds with the same certs.d files written here. Within a round
# each figure runs for one runtime after the other; the order reverses every
# round. The density figure runs once, in two pod shapes: 1 container per pod
# at 1, 50 and 100 pods, and 3 per pod at 1, 17 and 34 pods (about as many
# containers; fair to containerd's shim, one per pod); before each of them the
# runtime's daemon is restarted, so that its baseline is a freshly started
# daemon's and not one grown by the figures before.
# A figure that fails for a runtime is recorded in failures.txt and shows up
# in the table as "not measured: <reason>"; the run goes on.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/../.." && pwd)
source "$REPO/test/critest/lib.sh"
HARNESS=$REPO/test/harness/podunit-harness.sh
: "${PODUNIT_BINARY:=$REPO/bin/podunit}"
: "${BENCH_OUT:=/var/tmp/podunit-bench}"
: "${BENCH_DOC:=$REPO/docs/benchmarks.md}"
: "${ROUNDS:=3}"
: "${ONLY:=runp pull startlat critest logs density profile}"
: "${KEEP:=0}"
: "${PROFILE_PARALLEL:=1}"
: "${BENCH_METRICS:=127.0.0.1:39217}"
: "${SCALE_PODS:=500}" "${SCALE_PER_POD:=2}" "${SCALE_CHURN:=10000}" "${SCALE_HOLD:=60s}" "${SCALE_PARALLEL:=4}"
: "${PLEG_PODS:=100}" "${PLEG_HOLD:=60}" "${PLEG_SETTLE:=30}"
read -r -a RUNTIMES <<<"${RUNTIMES:-podunit containerd containerd2}"
SUBNET=10.215.0.0/16
BRIDGE=pu-bench0
PPROF_ADDR=127.0.0.1:19098
export PODUNIT_BENCH_TIMEOUT=${PODUNIT_BENCH_TIMEOUT:-300}

require_root
# every endpoint here is local; a proxy would only get in the way
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY
# never beside a critest run (test/critest/run.sh takes the same lock): timings
# taken while critest loads the machine mean nothing
# (braces: a bare `exec 9>F 2>/dev/null` would send the script's stderr to /dev/null for good)
{ exec 9>"/run/lock/podunit-critest.lock"; } 2>/dev/null || exec 9>"/tmp/podunit-critest.lock"
if ! flock -n 9; then
	log "a critest run holds the lock; waiting for it"
	flock 9
fi
PODUNIT_BINARY=$(realpath -e "$PODUNIT_BINARY") || die "no podunit binary (make build)"
case $PODUNIT_BINARY in "$REPO"/*) ;; *) die "PODUNIT_BINARY must lie inside $REPO (bound into the harness)" ;; esac
for c in crictl critest containerd containerd-shim-runc-v2 runc skopeo jq bc curl iptables; do
	command -v "$c" >/dev/null || die "$c missing (make deps-test; apt-get install containerd)"
done
want() { [[ " $ONLY " == *" $1 "* ]]; }
measured() { [[ " ${RUNTIMES[*]} " == *" $1 "* ]]; }

# the second reference: containerd 2.x from the Go module proxy, cached
log "containerd 2: test/bench/build-containerd2.sh (cached after the first build)"
CTRD2_DIR=$(bash "$BENCH_DIR/build-containerd2.sh") || die "test/bench/build-containerd2.sh failed"

# the pleg figure's kubelet (test/kubelet/build-kubelet.sh, cached)
KUBELET=""
if want pleg; then
	measured podunit || die "the pleg figure runs a kubelet against podunit: RUNTIMES must include podunit"
	KUBELET=$(bash "$REPO/test/kubelet/build-kubelet.sh") || die "test/kubelet/build-kubelet.sh failed"
	for p in 11248 11250 11255; do
		! ss -Htln "sport = :$p" | grep -q . || die "port $p is in use (the pleg figure's kubelet listens on 11248/11250/11255)"
	done
fi

registry_hold
BASE="" D=""
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	((rc == 0)) || log "bench.sh: exiting with status $rc, tearing down"
	if [[ -n $D && -e $D ]]; then
		if [[ $KEEP == 1 ]]; then
			log "KEEP=1: harness left at $D; stop: bash $HARNESS stop $D; ip link del $BRIDGE"
			exit "$rc"
		fi
		[[ -z $KUBELET ]] || bash "$HARNESS" exec "$D" systemctl stop kubelet.service >/dev/null 2>&1 || true
		for ep in "$PU" "$CD" "$CD2"; do
			crictl --runtime-endpoint "$ep" --image-endpoint "$ep" rmp -a -f >/dev/null 2>&1 || true
		done
		journalctl -D "$D/run/log/journal" --no-pager -o short-precise -u podunit.service >"$BENCH_OUT/podunit.journal" 2>&1 || true
		journalctl -D "$D/run/log/journal" --no-pager -o short-precise -u bench-containerd2.service >"$BENCH_OUT/containerd2.journal" 2>&1 || true
		bash "$HARNESS" exec "$D" systemctl stop podunit.service bench-containerd.service bench-containerd2.service >/dev/null 2>&1 || true
		bash "$HARNESS" stop "$D" || rc=1
	fi
	if [[ -n $BASE ]]; then
		ip link del "$BRIDGE" 2>/dev/null || true
		while iptables -D FORWARD -s "$SUBNET" ! -d "$SUBNET" -m comment --comment podunit-bench -j DROP 2>/dev/null; do :; done
		while iptables -D FORWARD -d "$SUBNET" ! -s "$SUBNET" -m comment --comment podunit-bench -j DROP 2>/dev/null; do :; done
		[[ ! -f $BASE/ip_forward.orig ]] || cat "$BASE/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
		if grep -qF " $BASE/" /proc/self/mountinfo; then
			log "ERROR: mounts left under $BASE"
			rc=1
		else
			rm -rf "$BASE"
		fi
	fi
	registry_release || true
	exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted by SIGINT"; exit 130' INT
trap 'log "terminated by SIGTERM"; exit 143' TERM
trap 'log "hung up (SIGHUP)"; exit 129' HUP

# ------------------------------------------------------------------ setup ----
rm -rf "$BENCH_OUT"
mkdir -p "$BENCH_OUT"
RES=$BENCH_OUT/results.jsonl
: >"$BENCH_OUT/failures.txt"
log "building cribench"
go build -o "$BENCH_OUT/cribench" "$BENCH_DIR/cribench"
CRIBENCH=$BENCH_OUT/cribench

if [[ ${SKIP_IMAGES:-0} != 1 ]]; then
	bash "$REPO/test/critest/images.sh" >"$BENCH_OUT/images.log" 2>&1 ||
		{ tail -n 30 "$BENCH_OUT/images.log" >&2; die "test/critest/images.sh failed"; }
fi
bash "$REPO/test/critest/registry.sh" start
registry_up || die "no registry at $PODUNIT_TEST_REGISTRY"

BASE=$(mktemp -d /tmp/pub-XXXXXX) # short: sockets live in $BASE/sd/run
D=$BASE/sd
PU=unix://$D/run/podunit/podunit.sock
CD=unix://$D/run/bench-containerd/containerd.sock
CD2=unix://$D/run/bench-containerd2/containerd.sock
LOGROOT=$BASE/logbench
mkdir -p "$BASE"/{pulib,ctrd,ctrd2,pods,etc,cni,certs.d,kubelet,manifests,kcfg} "$LOGROOT"
cat /proc/sys/net/ipv4/ip_forward >"$BASE/ip_forward.orig"
iptables -I FORWARD -s "$SUBNET" ! -d "$SUBNET" -m comment --comment podunit-bench -j DROP
iptables -I FORWARD -d "$SUBNET" ! -s "$SUBNET" -m comment --comment podunit-bench -j DROP

jq --arg b "$BRIDGE" --arg s "$SUBNET" '.name = "podunit-bench"
	| .plugins[0].bridge = $b | .plugins[0].ipam.ranges = [[{subnet: $s}]]' \
	"$REPO/test/cni/10-podunit-test.conflist" >"$BASE/cni/10-podunit-bench.conflist"
cp "$BASE/cni/10-podunit-bench.conflist" "$BENCH_OUT/"

# containerd: the registries of test/critest/registries.conf, as hosts.toml
for host in $(awk -F'"' '/^prefix/ {print $2}' "$REPO/test/critest/registries.conf"); do
	mkdir -p "$BASE/certs.d/$host"
	printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n  skip_verify = true\n' \
		"$PODUNIT_TEST_REGISTRY" "$PODUNIT_TEST_REGISTRY" >"$BASE/certs.d/$host/hosts.toml"
done

cat >"$BASE/etc/podunit.toml" <<EOF
# written by test/bench/bench.sh
[image]
registries_conf = "$REPO/test/critest/registries.conf"
policy_path = "$REPO/test/critest/policy.json"

[cni]
conf_dir = "$BASE/cni"
bin_dirs = ["/usr/lib/cni"]

[streaming]
address = "127.0.0.1:0"

# the scale figure reads podunit's D-Bus call latencies from it (the harness
# shares the host's network); nothing scrapes it during the other figures
[metrics]
address = "$BENCH_METRICS"
EOF
cp "$BASE/etc/podunit.toml" "$BENCH_OUT/"

cat >"$BASE/ctrd/config.toml" <<EOF
# written by test/bench/bench.sh: Debian containerd 1.6.20, CRI plugin, runc,
# systemd cgroup driver, the same CNI conflist and registry as podunit
version = 2
root = "/var/lib/bench-containerd/root"
state = "/run/bench-containerd/state"
[grpc]
  address = "/run/bench-containerd/containerd.sock"
[ttrpc]
  address = "/run/bench-containerd/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.6"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    # no CAP_SYS_RESOURCE in this machine's bounding set (see test/critest/README.md)
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$BASE/cni"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$BASE/certs.d"
EOF
cp "$BASE/ctrd/config.toml" "$BENCH_OUT/containerd.toml"

# containerd 2.x: the same settings in config version 3, where the CRI plugin
# is split into io.containerd.cri.v1.images (pull, pause image, registry) and
# io.containerd.cri.v1.runtime (runtimes, CNI); the grpc.v1.cri plugin keeps
# the streaming server. runtime_path: its own shim, not Debian's 1.6 shim
# that PATH would find first. use_local_image_pull: the client-side pull that
# 2.0 used, not the transfer service that 2.1+ defaults to: with the transfer
# service, critest -benchmark's image lifecycle (the same image pulled and
# removed by two workers at once) fails now and then, because PullImage looks the
# image up again after the transfer and the other worker's RemoveImage can
# come in between ("failed to get image ... from containerd image store: not
# found", 2.4.2 internal/cri/server/images/image_pull.go); 1.6 and the local
# pull return the image the pull made.
cat >"$BASE/ctrd2/config.toml" <<EOF
# written by test/bench/bench.sh: containerd $("$CTRD2_DIR/containerd" --version | awk '{print $3}') (test/bench/build-containerd2.sh),
# CRI plugin, runc, systemd cgroup driver, the same CNI conflist and registry
version = 3
root = "/var/lib/bench-containerd2/root"
state = "/run/bench-containerd2/state"
[grpc]
  address = "/run/bench-containerd2/containerd.sock"
[ttrpc]
  address = "/run/bench-containerd2/containerd.sock.ttrpc"
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    use_local_image_pull = true
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "registry.k8s.io/pause:3.6"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "$BASE/certs.d"
  [plugins.'io.containerd.cri.v1.runtime']
    # no CAP_SYS_RESOURCE in this machine's bounding set (see test/critest/README.md)
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$CTRD2_DIR/containerd-shim-runc-v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = true
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$BASE/cni"
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
cp "$BASE/ctrd2/config.toml" "$BENCH_OUT/containerd2.toml"

log "booting the harness in $D"
# the pleg figure's kubelet: its binary, state, static pod directory, configs
kubelet_binds=()
[[ -z $KUBELET ]] || kubelet_binds=(--bind "${KUBELET%/*}" --bind "$BASE/kubelet:/var/lib/kubelet"
	--bind "$BASE/manifests:/etc/kubernetes/manifests" --bind "$BASE/kcfg:/etc/kubelet-bench")
# 9>&-: a harness kept with KEEP=1 must not hold the critest lock
bash "$HARNESS" start "$D" --host-net --net-rw --run-tmpfs --bind "$REPO" --bind "$BASE/cni" --bind "$BASE/certs.d" \
	--bind "$BASE/pulib:/var/lib/podunit" --bind "$BASE/ctrd:/var/lib/bench-containerd" \
	--bind "$BASE/ctrd2:/var/lib/bench-containerd2" --bind "$CTRD2_DIR" \
	--bind "$BASE/pods:/var/log/pods" --bind "$BASE/etc:/etc/podunit" --bind "$LOGROOT" "${kubelet_binds[@]}" >"$BASE/env" 9>&-
HNAME=$(bash "$HARNESS" name "$D")
HPID=$(awk -F= '$1 == "PODUNIT_HARNESS_PID" {print $2}' "$BASE/env")
hx() { bash "$HARNESS" exec "$D" "$@"; }
endpoint() {
	case $1 in
	podunit) echo "$PU" ;;
	containerd) echo "$CD" ;;
	containerd2) echo "$CD2" ;;
	esac
}
# unit_of RT: the runtime's service in the harness
unit_of() {
	case $1 in
	podunit) echo podunit.service ;;
	*) echo "bench-$1.service" ;;
	esac
}
# wait_runtime RT: until its CRI answers, at most 30 s; fails if it does not
wait_runtime() {
	local ep i
	ep=$(endpoint "$1")
	for ((i = 0; i < 150; i++)); do
		crictl --runtime-endpoint "$ep" --image-endpoint "$ep" version >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	return 1
}
# restart_runtime RT: restart the runtime's daemon and wait for its CRI. The
# services are transient (systemd-run below): systemctl restart keeps the
# loaded unit and starts it again with the same properties, as it does for
# podunit.service in podunit_journald. Containers stay: podunit's are units
# of their own, containerd's shims outlive their daemon (KillMode=process).
restart_runtime() {
	hx systemctl restart "$(unit_of "$1")" && wait_runtime "$1"
}

log "starting ${RUNTIMES[*]} in the harness"
measured podunit && hx systemd-run --unit=podunit.service --collect -p Type=notify -p NotifyAccess=main \
	-p TimeoutStartSec=60 -p TimeoutStopSec=30 "$PODUNIT_BINARY" serve --config /etc/podunit/podunit.toml
# what Debian's containerd.service sets that matters here
measured containerd && hx systemd-run --unit=bench-containerd.service --collect -p Delegate=yes -p KillMode=process \
	-p LimitNOFILE=infinity -p TasksMax=infinity /usr/bin/containerd --config /var/lib/bench-containerd/config.toml
# containerd 2 the same way (containerd's own containerd.service sets the same)
measured containerd2 && hx systemd-run --unit=bench-containerd2.service --collect -p Delegate=yes -p KillMode=process \
	-p LimitNOFILE=infinity -p TasksMax=infinity "$CTRD2_DIR/containerd" --config /var/lib/bench-containerd2/config.toml
for rt in "${RUNTIMES[@]}"; do
	wait_runtime "$rt" || die "no CRI at $(endpoint "$rt")"
done

# ---------------------------------------------------------------- machine ----
{
	echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "cpu=$(nproc) x $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
	echo "memory=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "kernel=$(uname -r)"
	if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then echo "cgroup=v2 (unified)"
	elif [[ -d /sys/fs/cgroup/unified ]]; then echo "cgroup=v1 hybrid (v1 controllers, cgroup2 at /sys/fs/cgroup/unified, no controllers on it)"
	else echo "cgroup=v1 (legacy)"; fi
	echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
	echo "harness_systemd=$(hx systemctl --version | head -1)"
	# what the binary was built from (the tree may have moved on since)
	built=$(go version -m "$PODUNIT_BINARY" | awk '$1 == "build" {split($2, kv, "=")}
		kv[1] == "vcs.revision" {r = substr(kv[2], 1, 7)} kv[1] == "vcs.time" {t = kv[2]}
		kv[1] == "vcs.modified" && kv[2] == "true" {m = " + uncommitted changes"}
		END {if (r != "") print r m " (commit time " t ")"}')
	if [[ -z $built ]]; then
		# go build stamps no VCS data in a linked worktree: name the tree's
		# commit, which make bench built the binary from
		built="$(git -C "$REPO" rev-parse --short=7 HEAD)$(git -C "$REPO" diff --quiet HEAD -- || echo " + uncommitted changes") (commit time $(git -C "$REPO" log -1 --format=%cI); from the tree, the binary has no VCS stamp)"
	fi
	echo "podunit=$built"
	echo "containerd=$(containerd --version | awk '{print $3}')"
	echo "containerd2=$("$CTRD2_DIR/containerd" --version | awk '{print $3}' | sed 's/^v//')"
	echo "runc=$(runc --version | awk 'NR == 1 {print $3}')"
	echo "critest=$(critest --version 2>/dev/null | awk '{print $3}')"
	echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$BENCH_OUT/machine.env"
cat "$BENCH_OUT/machine.env" >&2

# a figure failing for one runtime is recorded, not fatal
fail() { # FIGURE RUNTIME LOGFILE
	local why
	# the error itself, not a stack line: critest's "Unexpected error occurred",
	# a crictl error, cribench's message; else the last line
	why=$({ grep -hoE 'Unexpected error occurred: .*|level=(error|fatal) .*|^cribench: .*|ERROR: .*|^E[0-9]{4} [0-9:.]+ +[0-9]+ [a-z_]+\.go:[0-9]+\] .*' "$3" 2>/dev/null || true; } | head -n 1 | cut -c1-200)
	[[ -n $why ]] || why=$({ grep -v '^\s*$' "$3" 2>/dev/null || true; } | tail -n 1 | cut -c1-200)
	log "FAILED: $1 on $2: $why (log $3)"
	printf '%s\t%s\t%s\n' "$1" "$2" "${why:-no output}" >>"$BENCH_OUT/failures.txt"
}

# a runtime's daemon process in the harness, for cribench: COMM[@ARG], the
# process named COMM with ARG among its arguments (two processes are named
# containerd; each has its own config file)
daemon_of() {
	case $1 in
	podunit) echo podunit ;;
	containerd) echo containerd@/var/lib/bench-containerd/config.toml ;;
	containerd2) echo containerd@/var/lib/bench-containerd2/config.toml ;;
	esac
}

sleep 5
"$CRIBENCH" idle -harness "$HNAME" -pid1 "$HPID" -out "$RES" \
	$(for rt in "${RUNTIMES[@]}"; do printf -- '-daemon %s=%s ' "$rt" "$(daemon_of "$rt")"; done)


# podunit_journald true|false: restart podunit with [logs] journald so
# ([logs] journald applies to containers started after podunit read it;
# running containers stay across the restart)
podunit_journald() {
	local dropin=$BASE/etc/podunit.toml.d/50-bench-journald.toml
	mkdir -p "${dropin%/*}"
	if [[ $1 == false ]]; then printf '[logs]\njournald = false\n' >"$dropin"; else rm -f "$dropin"; fi
	restart_runtime podunit || die "podunit did not come back after a restart with journald=$1"
}

# logs_run LABEL ENDPOINT LOGFILE: one log throughput run under cpuwatch
logs_run() {
	"$CRIBENCH" cpuwatch -harness "$HNAME" -label "$1" -- \
		bash "$BENCH_DIR/logs.sh" -n 1000000 -r 1 -d "$LOGROOT" "$1=$2" >"$3" 2>&1 || fail logs "$1" "$3"
}

run_figure() { # FIGURE RUNTIME ROUND
	local fig=$1 rt=$2 round=$3 ep lg
	ep=$(endpoint "$rt")
	lg=$BENCH_OUT/$fig-$rt-$round.log
	log "round $round: $fig on $rt"
	case $fig in
	runp)
		"$CRIBENCH" runp -endpoint "$ep" -name "$rt" -n 50 -out "$RES" >"$lg" 2>&1 || fail runp "$rt" "$lg" ;;
	pull)
		bash "$BENCH_DIR/pull.sh" -n 3 "$rt=$ep" >"$lg" 2>&1 || fail pull "$rt" "$lg" ;;
	startlat)
		"$CRIBENCH" startlat -endpoint "$ep" -name "$rt" -n 50 -parallel 1 -out "$RES" >"$lg" 2>&1 ||
			fail startlat-seq "$rt" "$lg"
		"$CRIBENCH" startlat -endpoint "$ep" -name "$rt" -n 40 -parallel 20 -out "$RES" >>"$lg" 2>&1 ||
			fail startlat-conc "$rt" "$lg"
		"$CRIBENCH" startlat -endpoint "$ep" -name "$rt" -n 40 -parallel 20 -phased -out "$RES" >>"$lg" 2>&1 ||
			fail startlat-phased "$rt" "$lg" ;;
	critest)
		local out=$BENCH_OUT/critest-$rt-$round
		mkdir -p "$out/data"
		# two invocations: a failing container spec panics critest's whole
		# process, which must not cost the pod and image figures
		# (critest -benchmark focuses on "benchmark" itself, and ginkgo ORs
		# focuses, so the split is made with skips, which it ANDs)
		local part skip
		for part in pods containers; do
			skip='operations on Container|start a container from scratch'
			[[ $part == pods ]] || skip='operations on (PodSandbox|Image)'
			critest -runtime-endpoint "$ep" -image-endpoint "$ep" -benchmark -ginkgo.skip="$skip" \
				-benchmarking-params-file "$REPO/test/critest/benchmark.yaml" \
				-benchmarking-output-dir "$out/data" -ginkgo.no-color -ginkgo.timeout=30m \
				-ginkgo.json-report="$out/report-$part.json" >"${lg%.log}-$part.log" 2>&1 ||
				fail "critest-$part" "$rt" "${lg%.log}-$part.log"
		done
		[[ ! -d $out/data ]] || bash "$REPO/test/critest/bench-summary.sh" "$out/data" >"$out/summary.txt" 2>&1 || true ;;
	logs)
		logs_run "$rt" "$ep" "$lg"
		# podunit once more with the CRI file as its only sink, as containerd
		# writes it
		if [[ $rt == podunit ]]; then
			log "round $round: $fig on podunit-nojournal"
			podunit_journald false
			logs_run podunit-nojournal "$ep" "$BENCH_OUT/$fig-podunit-nojournal-$round.log"
			podunit_journald true
		fi ;;
	scale)
		# the runtime's unit, whose journal is searched for D-Bus timeouts
		local unit metrics=http://$BENCH_METRICS/metrics
		unit=$(unit_of "$rt")
		[[ $rt == podunit ]] || metrics=
		"$CRIBENCH" scale -endpoint "$ep" -name "$rt" -pods "$SCALE_PODS" -per-pod "$SCALE_PER_POD" -metrics "$metrics" \
			-churn "$SCALE_CHURN" -hold "$SCALE_HOLD" -parallel "$SCALE_PARALLEL" -harness "$HNAME" -pid1 "$HPID" \
			-daemon "$(daemon_of "$rt")" -unit "$unit" -out "$RES" >"$lg" 2>&1 || fail scale "$rt" "$lg" ;;
	density)
		# two pod shapes, PER:COUNTS (counts of pods): 1 container per pod,
		# and 3 per pod at about as many containers; each from a freshly
		# started daemon (its RSS is part of the overhead). Failures are
		# recorded as density and density-3 (cribench report's densityFig).
		local shape per dfig dlg
		for shape in 1:1,50,100 3:1,17,34; do
			per=${shape%%:*} dfig=density dlg=$lg
			((per == 1)) || { dfig=density-$per; dlg=$BENCH_OUT/$dfig-$rt-$round.log; }
			log "round $round: $dfig on $rt ($per per pod), $(unit_of "$rt") restarted first"
			# podunit's log relay and session server are processes of their
			# own, counted with the daemon: restarted too, so none carries
			# the heap of the figures before (the relay's of the log floods)
			# into the baseline. No container runs, and both are built to
			# survive restarts anyway.
			[[ $rt != podunit ]] || hx systemctl try-restart podunit-logrelay.service podunit-stream.service >"$dlg" 2>&1 || true
			if restart_runtime "$rt" >>"$dlg" 2>&1; then
				"$CRIBENCH" density -endpoint "$ep" -name "$rt" -per-pod "$per" -counts "${shape#*:}" -harness "$HNAME" \
					-pid1 "$HPID" -daemon "$(daemon_of "$rt")" -out "$RES" >>"$dlg" 2>&1 || fail "$dfig" "$rt" "$dlg"
			else
				echo "ERROR: systemctl restart $(unit_of "$rt") failed, or its CRI did not answer within 30 s" >>"$dlg"
				fail "$dfig" "$rt" "$dlg"
			fi
		done ;;
	esac
}

for round in $(seq 1 "$ROUNDS"); do
	if ((round % 2)); then order="${RUNTIMES[*]}"; else order=$(printf '%s\n' "${RUNTIMES[@]}" | tac | tr '\n' ' '); fi
	for fig in runp pull startlat critest logs density scale; do
		want "$fig" || continue
		[[ $fig != density && $fig != scale || $round == 1 ]] || continue # steady state: once is enough
		for rt in $order; do run_figure "$fig" "$rt" "$round"; done
	done
done

echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$BENCH_OUT/machine.env"

# ------------------------------------------------------------------ pleg ----
# The kubelet's own CPU with PLEG_PODS static pods (one busybox `sleep`
# each) on podunit, generic PLEG against featureGates EventedPLEG. The pods
# start once; the kubelet is then restarted in each mode (it adopts the
# running pods), and after PLEG_SETTLE its cgroup's CPU usage
# (CPUUsageNSec: cpuacct.usage on v1) is read across PLEG_HOLD seconds, as is
# podunit's. ROUNDS alternating rounds, the order reversed each round.
pleg_kubelet() { # MODE: (re)start the kubelet in that PLEG mode
	hx systemctl stop kubelet.service >/dev/null 2>&1 || true
	hx systemctl reset-failed kubelet.service >/dev/null 2>&1 || true
	hx systemd-run --unit=kubelet.service -p CPUAccounting=yes -p Restart=always -p RestartSec=2 \
		"$KUBELET" --config="/etc/kubelet-bench/kubelet-$1.yaml" --v=2 >/dev/null
}
# pleg_running: pods the kubelet reports with every container running
pleg_running() {
	curl -fsS --max-time 5 http://127.0.0.1:11255/pods | jq '[.items[] | select(.metadata.name | startswith("pleg-"))
		| select(.status.containerStatuses != null and all(.status.containerStatuses[]; .state.running != null))] | length'
}
pleg_wait() { # SECONDS: until every pod runs in the kubelet's view
	local i
	for ((i = 0; i < $1; i++)); do
		[[ $(pleg_running 2>/dev/null) == "$PLEG_PODS" ]] && return 0
		sleep 1
	done
	return 1
}
# unit_cpu UNIT: "NS SOURCE", the CPU time of the unit: its cgroup's
# (systemd's CPUUsageNSec), else cpuacct.usage of its v1 cgroup, else (no
# CPU accounting) utime + stime of its main process and its threads
unit_cpu() {
	local v cg pid
	v=$(hx systemctl show -P CPUUsageNSec "$1")
	if [[ $v =~ ^[0-9]+$ ]]; then echo "$v cgroup"; return; fi
	cg=$(hx systemctl show -P ControlGroup "$1")
	v=$(hx cat "/sys/fs/cgroup/cpuacct$cg/cpuacct.usage" 2>/dev/null) || v=""
	if [[ $v =~ ^[0-9]+$ ]]; then echo "$v cgroup"; return; fi
	pid=$(hx systemctl show -P MainPID "$1")
	v=$(hx cat "/proc/$pid/stat" | awk -v t="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.0f\n", ($12 + $13) * 1e9 / t}')
	[[ $v =~ ^[0-9]+$ ]] && echo "$v process"
}
kmetric() { # NAME: the sum of the kubelet's samples NAME
	local m
	m=$(curl -fsSk --max-time 5 https://127.0.0.1:11250/metrics) || return 1
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $NF} END {printf "%d\n", s}' <<<"$m"
}
pleg_figure() {
	local i mode round order k0 k1 p0 p1 r0 r1 q0 q1 e0 e1 t0 t1 ksrc psrc
	bash "$REPO/test/kubelet/harness-prep.sh" "$D" || return 1
	# the kubelet e2e's configuration with the kubelet's own sync and
	# manifest check periods (1 min, 20 s) instead of the test's short ones
	sed '/^syncFrequency:/d; /^fileCheckFrequency:/d' "$REPO/test/kubelet/kubelet-config.yaml" >"$BASE/kcfg/kubelet-generic.yaml"
	{ cat "$BASE/kcfg/kubelet-generic.yaml" && printf 'featureGates:\n  EventedPLEG: true\n'; } >"$BASE/kcfg/kubelet-evented.yaml"
	hx systemctl set-property --runtime podunit.service CPUAccounting=yes
	pleg_kubelet generic
	for ((i = 1; i <= PLEG_PODS; i++)); do
		cat >"$BASE/manifests/pleg-$i.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: pleg-$i
  namespace: default
spec:
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: registry.k8s.io/e2e-test-images/busybox:1.29-2
    imagePullPolicy: IfNotPresent
    command: ["sleep", "86399"]
EOF
	done
	log "pleg: $PLEG_PODS static pods"
	pleg_wait 900 || { log "pleg: only $(pleg_running) of $PLEG_PODS pods running after 900 s"; return 1; }
	for round in $(seq 1 "$ROUNDS"); do
		order="generic evented"
		((round % 2)) || order="evented generic"
		for mode in $order; do
			log "pleg round $round: $mode PLEG, kubelet restarted"
			pleg_kubelet "$mode"
			pleg_wait 300 || { log "pleg: $mode: only $(pleg_running) pods running after 300 s"; return 1; }
			if [[ $mode == evented && $(kmetric kubelet_evented_pleg_connection_success_count) -lt 1 ]]; then
				log "pleg: the evented kubelet has no event stream"
				return 1
			fi
			sleep "$PLEG_SETTLE"
			r0=$(kmetric kubelet_pleg_relist_duration_seconds_count) q0=$(kmetric kubelet_pleg_pod_relist_duration_seconds_count)
			e0=$(kmetric kubelet_evented_pleg_connection_latency_seconds_count)
			read -r k0 ksrc <<<"$(unit_cpu kubelet.service)"
			read -r p0 psrc <<<"$(unit_cpu podunit.service)"
			t0=$(date +%s.%N)
			sleep "$PLEG_HOLD"
			read -r k1 _ <<<"$(unit_cpu kubelet.service)"
			read -r p1 _ <<<"$(unit_cpu podunit.service)"
			t1=$(date +%s.%N)
			r1=$(kmetric kubelet_pleg_relist_duration_seconds_count) q1=$(kmetric kubelet_pleg_pod_relist_duration_seconds_count)
			e1=$(kmetric kubelet_evented_pleg_connection_latency_seconds_count)
			[[ $k0 =~ ^[0-9]+$ && $k1 =~ ^[0-9]+$ && $p0 =~ ^[0-9]+$ && $p1 =~ ^[0-9]+$ ]] ||
				{ log "pleg: no CPU time (kubelet '$k0' '$k1', podunit '$p0' '$p1')"; return 1; }
			jq -cn --arg mode "$mode" --arg pods "$PLEG_PODS" --arg round "$round" --arg time "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
				--argjson k "$(((k1 - k0) / 1000))" --argjson p "$(((p1 - p0) / 1000))" --argjson t0 "$t0" --argjson t1 "$t1" \
				--argjson r "$((r1 - r0))" --argjson q "$((q1 - q0))" --argjson e "$((e1 - e0))" \
				--arg ksrc "$ksrc" --arg psrc "$psrc" \
				'{kind: "pleg", runtime: "podunit", time: $time,
				  params: {mode: $mode, pods: $pods, round: $round, kubelet_cpu_from: $ksrc, podunit_cpu_from: $psrc},
				  samples: {kubelet_cpu_s: [$k / 1e6], podunit_cpu_s: [$p / 1e6], hold_s: [$t1 - $t0],
				  relists: [$r], pod_relists: [$q], events: [$e]}}' | tee -a "$RES"
		done
	done
	echo "pleg_kubelet=$("$KUBELET" --version | awk '{print $2}')" >>"$BENCH_OUT/machine.env"
	rm -f "$BASE"/manifests/*.yaml
	hx systemctl stop kubelet.service
	crictl --runtime-endpoint "$PU" rmp -a -f >/dev/null 2>&1 || true
}
if want pleg; then pleg_figure >"$BENCH_OUT/pleg.log" 2>&1 || fail pleg podunit "$BENCH_OUT/pleg.log"; fi

# --------------------------------------------------------------- profile ----
# After the measured rounds (which ran the plain binary with metrics off, as
# podunit ships), podunit is restarted from a build that adds a pprof listener
# with block and mutex profiling on (test/bench/overlay, go build -overlay;
# podunit's own [metrics] pprof has no block profile). Profiled workload: the
# sequential start benchmark (or RunPodSandbox alone when containers do not start).
profile() {
	local addr=$PPROF_ADDR wl=startlat ov=$BASE/overlay.json bin=$BASE/etc/podunit-pprof
	printf '{"Replace":{"%s/cmd/podunit/zz_bench_pprof.go":"%s/overlay/pprof.go.in"}}' "$REPO" "$BENCH_DIR" >"$ov"
	(cd "$REPO" && go build -overlay "$ov" -o "$bin" ./cmd/podunit) || return 1
	hx systemctl stop podunit.service
	hx systemd-run --unit=podunit.service --collect -p Type=notify -p NotifyAccess=main -p TimeoutStartSec=60 \
		-p TimeoutStopSec=30 -E PODUNIT_BENCH_PPROF="$addr" /etc/podunit/podunit-pprof serve --config /etc/podunit/podunit.toml
	for _ in $(seq 1 50); do curl -fsS -o /dev/null --max-time 1 "http://$addr/debug/pprof/" && break; sleep 0.2; done
	# containers are profiled only when podunit started them in the measured runs
	grep -q '"kind":"startlat","runtime":"podunit"' "$RES" 2>/dev/null || wl=runp
	local wlargs=(-n 50)
	[[ $wl != startlat ]] || wlargs=(-n 50 -parallel "$PROFILE_PARALLEL")
	log "profiling podunit ($wl ${wlargs[*]})"
	curl -fsS -o "$BENCH_OUT/podunit.cpu.pprof" "http://$addr/debug/pprof/profile?seconds=40" &
	local prof=$!
	# goroutine dumps during the run: where requests wait (a lock, a D-Bus
	# reply, a child process) shows as many goroutines on one line
	(for i in $(seq -w 1 20); do
		sleep 1.5
		curl -fsS -o "$BENCH_OUT/goroutines-$i.txt" "http://$addr/debug/pprof/goroutine?debug=1" || true
	done) &
	local dumps=$!
	sleep 1
	"$CRIBENCH" "$wl" -endpoint "$PU" -name podunit-profiled "${wlargs[@]}" -out "$BENCH_OUT/profile-run.jsonl" >"$BENCH_OUT/profile-run.log" 2>&1 || true
	wait "$prof" || return 1
	wait "$dumps" || true
	curl -fsS -o "$BENCH_OUT/podunit.block.pprof" "http://$addr/debug/pprof/block" || true
	curl -fsS -o "$BENCH_OUT/podunit.mutex.pprof" "http://$addr/debug/pprof/mutex" || true
	log "profiling podunit (pull.sh, 6 pulls)"
	curl -fsS -o "$BENCH_OUT/podunit.pull.cpu.pprof" "http://$addr/debug/pprof/profile?seconds=15" &
	prof=$!
	sleep 1
	bash "$BENCH_DIR/pull.sh" -n 6 "podunit=$PU" >"$BENCH_OUT/profile-pull.log" 2>&1 || true
	wait "$prof" || return 1
	go tool pprof -top -cum -nodecount=60 "$bin" "$BENCH_OUT/podunit.pull.cpu.pprof" >"$BENCH_OUT/pprof-pull-cum.txt" 2>&1
	# The heap behind the density figure: live data (after a forced GC) at
	# 0 and at 100 running pods, so the growth per container splits into
	# what podunit keeps and what is GC headroom in the RSS.
	log "profiling podunit's heap (density, 0 and 100 pods of 1 container)"
	"$CRIBENCH" density -endpoint "$PU" -name podunit-profiled -per-pod 1 -counts 100 -harness "$HNAME" -pid1 "$HPID" \
		-daemon podunit-pprof -heap "$BENCH_OUT/podunit.heap" -heap-url "http://$addr/debug/pprof/heap" \
		-out "$BENCH_OUT/profile-density.jsonl" >"$BENCH_OUT/profile-density.log" 2>&1 || true
	[[ ! -s $BENCH_OUT/podunit.heap-100.pprof ]] ||
		go tool pprof -top -nodecount=40 -sample_index=inuse_space -base "$BENCH_OUT/podunit.heap-0.pprof" "$bin" \
			"$BENCH_OUT/podunit.heap-100.pprof" >"$BENCH_OUT/pprof-heap-100.txt" 2>&1
	cp "$bin" "$BENCH_OUT/podunit-profiled.bin"
	go tool pprof -top -nodecount=40 "$bin" "$BENCH_OUT/podunit.cpu.pprof" >"$BENCH_OUT/pprof-top.txt" 2>&1
	go tool pprof -top -cum -nodecount=60 "$bin" "$BENCH_OUT/podunit.cpu.pprof" >"$BENCH_OUT/pprof-cum.txt" 2>&1
	[[ ! -s $BENCH_OUT/podunit.block.pprof ]] ||
		go tool pprof -top -cum -nodecount=60 -focus='podunit/cri\.' "$bin" "$BENCH_OUT/podunit.block.pprof" >"$BENCH_OUT/pprof-block.txt" 2>&1
	[[ ! -s $BENCH_OUT/podunit.mutex.pprof ]] ||
		go tool pprof -top -cum -nodecount=60 "$bin" "$BENCH_OUT/podunit.mutex.pprof" >"$BENCH_OUT/pprof-mutex.txt" 2>&1
	echo "profile_workload=$wl ${wlargs[*]}" >>"$BENCH_OUT/machine.env"
}
if want profile; then profile || log "profiling failed (see $BENCH_OUT)"; fi

cmdline="${BENCH_COMMAND:-bash test/bench/bench.sh} with ROUNDS=$ROUNDS ONLY='$ONLY'"
! want pleg || cmdline+=" PLEG_PODS=$PLEG_PODS PLEG_HOLD=$PLEG_HOLD PLEG_SETTLE=$PLEG_SETTLE"
! want scale || cmdline+=" SCALE_PODS=$SCALE_PODS SCALE_PER_POD=$SCALE_PER_POD SCALE_CHURN=$SCALE_CHURN SCALE_HOLD=$SCALE_HOLD SCALE_PARALLEL=$SCALE_PARALLEL"
[[ ${SKIP_IMAGES:-0} != 1 ]] || cmdline+=" SKIP_IMAGES=1 (registry images already pushed)"
(cd "$REPO" && "$CRIBENCH" report -results "$BENCH_OUT" -out "$BENCH_DOC" -command "$cmdline" \
	-notes test/bench/analysis.md)
log "wrote $BENCH_DOC (raw results in $BENCH_OUT)"
