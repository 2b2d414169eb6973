#!/usr/bin/env bash
# logs.sh — container log throughput through the CRI: a container prints N
# lines as fast as it can; the clock runs from StartContainer until the CRI log
# file at its log_path holds all N lines. Each endpoint given is measured in
# the same run, alternating, so podunit and containerd see the same machine.
#
#   bash test/bench/logs.sh [-n LINES] [-b BYTES] [-r RUNS] [-d LOGROOT] NAME=ENDPOINT ...
#   e.g. bash test/bench/logs.sh podunit=unix:///tmp/pu/sd/run/podunit/podunit.sock \
#          containerd=unix:///tmp/baseline/containerd.sock
#
# LOGROOT (default /tmp/podunit-logbench) is the pods' log_directory root. It
# must be the same path for the runtime and for this script: a runtime inside
# the systemd harness needs it bound at the same path (--bind LOGROOT).
# Pods use the host network, so no CNI is involved, and cgroup parent
# $PODUNIT_BENCH_CGROUP_PARENT (default /benchmark.slice). The image is busybox from
# the critest kit's registry (registry.k8s.io/e2e-test-images/busybox:1.29-2).
#
# Prints per run: wall seconds, lines/s, MB/s of text, CPU seconds of the whole
# host and of journald (every systemd-journald process; idle ones add ~0)
# during the run; then the per-endpoint medians and each endpoint's lines/s
# relative to the first. A run whose file does not hold exactly N full lines
# fails the script: throughput with lost or repeated lines is not a result.
set -euo pipefail

LINES=200000
BYTES=100
RUNS=3
LOGROOT=/tmp/podunit-logbench
while getopts n:b:r:d: o; do
	case $o in
	n) LINES=$OPTARG ;;
	b) BYTES=$OPTARG ;;
	r) RUNS=$OPTARG ;;
	d) LOGROOT=$OPTARG ;;
	*) sed -n '2,10p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
(($# >= 1)) || { sed -n '2,10p' "$0" >&2; exit 2; }
IMAGE=${PODUNIT_BENCH_IMAGE:-registry.k8s.io/e2e-test-images/busybox:1.29-2}
# a kubelet always sends one; containerd with the systemd cgroup driver needs it
CGROUP_PARENT=${PODUNIT_BENCH_CGROUP_PARENT:-/benchmark.slice}
TIMEOUT=${PODUNIT_BENCH_TIMEOUT:-300}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
now() { date +%s.%N; }

# host CPU seconds used so far (all cpus, user+nice+system+irq+softirq+steal)
host_cpu() {
	awk -v hz="$(getconf CLK_TCK)" '$1=="cpu" {print ($2+$3+$4+$7+$8+$9)/hz; exit}' /proc/stat
}

# CPU seconds used so far by every process whose comm is systemd-journal
journald_cpu() {
	local hz total=0 f
	hz=$(getconf CLK_TCK)
	for f in /proc/[0-9]*/stat; do
		# comm is field 2 in parentheses; utime/stime are fields 14/15
		read -r line <"$f" 2>/dev/null || continue
		[[ $line == *"(systemd-journal)"* ]] || continue
		set -- ${line##*) }
		total=$((total + ${12} + ${13}))
	done
	awk -v t="$total" -v hz="$hz" 'BEGIN {print t/hz}'
}

crictl_() { local ep=$1; shift; crictl --runtime-endpoint "$ep" --image-endpoint "$ep" --timeout 60s "$@"; }

# the container writes its LINES numbered lines (BYTES each with the
# newline) to a file first, prints START, then cats the file: generation
# (busybox seq|sed is slow) stays out of the measurement, and the numbers let
# the check see order and repeats.
gen_cmd() {
	local pad
	pad=$(printf '%*s' $((BYTES - 10)) '' | tr ' ' x)
	echo "seq $FIRST $((FIRST + LINES - 1)) | sed 's/\$/ $pad/' >/tmp/lines && echo START && cat /tmp/lines"
}

FIRST=10000000

# wait_for head|tail FILE TEXT: until the file's first or last 4 KiB hold TEXT
wait_for() {
	local t0=$SECONDS
	until "$1" -c 4096 "$2" 2>/dev/null | grep -q "$3"; do
		if ((SECONDS - t0 > TIMEOUT)); then
			log "timeout waiting for '$3' in $2"
			return 1
		fi
		sleep 0.01
	done
}

run_one() {
	local name=$1 ep=$2 run=$3 dir pod ctr start cpu0 jcpu0 t1 path
	dir=$LOGROOT/$name-$run-$$
	mkdir -p "$dir"
	cat >"$dir/pod.json" <<EOF_POD
{"metadata": {"name": "logbench-$run", "namespace": "bench", "uid": "logbench-$name-$run-$$", "attempt": 0},
 "log_directory": "$dir",
 "linux": {"cgroup_parent": "$CGROUP_PARENT", "security_context": {"namespace_options": {"network": 2}}}}
EOF_POD
	cat >"$dir/ctr.json" <<EOF_CTR
{"metadata": {"name": "gen"}, "image": {"image": "$IMAGE"},
 "command": ["sh", "-c", $(printf '%s' "$(gen_cmd)" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')],
 "log_path": "gen.log", "linux": {}}
EOF_CTR
	pod=$(crictl_ "$ep" runp "$dir/pod.json")
	ctr=$(crictl_ "$ep" create "$pod" "$dir/ctr.json" "$dir/pod.json")
	path=$dir/gen.log
	crictl_ "$ep" start "$ctr" >/dev/null
	wait_for head "$path" ' F START$'
	cpu0=$(host_cpu)
	jcpu0=$(journald_cpu)
	start=$(now)
	wait_for tail "$path" " F $((FIRST + LINES - 1)) "
	t1=$(now)
	local cpu1 jcpu1
	cpu1=$(host_cpu)
	jcpu1=$(journald_cpu)
	# exactly LINES full lines, in order, none repeated
	local bad
	bad=$(awk -v n="$LINES" -v first="$FIRST" '$3 == "F" && $4 != "START" { i++; if ($4 != first + i - 1) { print "line " i ": " $4; exit } }
		END { if (i != n) print i " full lines, want " n }' "$path")
	crictl_ "$ep" stopp "$pod" >/dev/null || true
	crictl_ "$ep" rmp "$pod" >/dev/null || true
	if [[ -n $bad ]]; then
		log "$name run $run: log file wrong: $bad"
		return 1
	fi
	rm -rf "$dir"
	awk -v name="$name" -v run="$run" -v t0="$start" -v t1="$t1" -v n="$LINES" -v b="$BYTES" \
		-v c0="$cpu0" -v c1="$cpu1" -v j0="$jcpu0" -v j1="$jcpu1" 'BEGIN {
		d = t1 - t0
		printf "%-12s run %d  %7.2f s  %9.0f lines/s  %7.2f MB/s  host CPU %6.2f s  journald CPU %6.2f s\n",
			name, run, d, n / d, n * b / d / 1e6, c1 - c0, j1 - j0
	}'
}

mkdir -p "$LOGROOT"
for spec in "$@"; do
	name=${spec%%=*} ep=${spec#*=}
	log "$name: pulling $IMAGE"
	crictl_ "$ep" pull "$IMAGE" >/dev/null
done
results=$(mktemp)
trap 'rm -f "$results"' EXIT
log "$LINES lines of $BYTES bytes, $RUNS runs per endpoint"
for run in $(seq 1 "$RUNS"); do
	for spec in "$@"; do
		run_one "${spec%%=*}" "${spec#*=}" "$run" | tee -a "$results"
	done
done
echo
echo "median over $RUNS runs ($LINES lines of $BYTES bytes):"
first=""
for spec in "$@"; do
	name=${spec%%=*}
	med=$(awk -v name="$name" '$1 == name {print $6}' "$results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	jc=$(awk -v name="$name" '$1 == name {print $(NF-1)}' "$results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	[[ -n $first ]] || first=$med
	awk -v name="$name" -v m="$med" -v f="$first" -v jc="$jc" -v b="$BYTES" 'BEGIN {
		printf "%-12s %9.0f lines/s  %7.2f MB/s  journald CPU %6.2f s  ratio to first %.2f\n", name, m, m * b / 1e6, jc, m / f
	}'
done
