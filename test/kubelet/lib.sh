# lib.sh — helpers for e2e.sh and node-e2e.sh (sourced). Expects D (the
# root the node's /run is under: the harness directory, or empty on a real
# node), SOCK, E2E_OUT, MANIFESTS, PODLOGS, PODUNIT_LIB, HERE, SUBNET (the pods'
# /16), and hx (runs a
# command on the node: in the harness, or directly).

PASSED=0 FAILED=0 FAILED_NAMES="" SCENARIO_SINCE=$(date +%s)
# set by a scenario when nothing after it can work (no container ever runs)
ABORT=""
KUBELET_PODS=http://127.0.0.1:11255/pods
# the userns scenario's drop-in, relative to PODUNIT_ETC (the cleanup of a
# failed run removes it too)
USERNS_DROPIN=podunit.toml.d/70-kubelet-e2e-userns.toml

# the pods' manifests (node-e2e.sh adapts copies of them)
: "${TEMPLATES:=$HERE/manifests}"
ALL_SCENARIOS=(plumbing logs exec liveness readiness crashloop kill killcreate killstart killstop dbus attach evented teardown)
# evented runs only when named until a run of it with the PodSandboxStatus
# fix has passed (docs/kubelet.md): `make kubelet-e2e SCENARIOS='evented teardown'`
# userns runs only when named: in the harness the kernel refuses crun's proc
# mount in the pod's user namespace (mount_too_revealing: the harness's /proc
# has overmounts); on a real node: VM_KUBELET_SCENARIOS='plumbing userns teardown'

cri() { crictl --timeout 30s --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" "$@" 2>/dev/null; }
journal() { journalctl -D "$D/run/log/journal" --no-pager -o short-precise -u "$@" 2>/dev/null; }

save_journals() {
	[[ -d $D/run/log/journal ]] || return 0
	journal podunit.service >"$E2E_OUT/podunit.journal" || true
	journal kubelet.service >"$E2E_OUT/kubelet.journal" || true
	journalctl -D "$D/run/log/journal" --no-pager -o short-precise >"$E2E_OUT/all.journal" 2>&1 || true
}

scenario_start() { SCENARIO_SINCE=$(date +%s); }

pass() {
	PASSED=$((PASSED + 1))
	printf 'PASS  %s\n' "$1"
}

# fail NAME WHY: record, explain, and show what podunit logged that matters
fail() {
	FAILED=$((FAILED + 1))
	FAILED_NAMES="$FAILED_NAMES $1"
	printf 'FAIL  %s: %s\n' "$1" "$2"
	# the same warning repeats with each kubelet retry: show each message once
	echo "  podunit warnings/errors since the scenario began (deduplicated):"
	journal podunit.service --since "@$SCENARIO_SINCE" | grep -E 'level=(WARN|ERROR)|panic|fatal' |
		grep -vE 'method=(ContainerStats|ListContainerStats|ListPodSandboxStats|PodSandboxStats) ' |
		sed -E 's/^.*level=/level=/; s/duration=[^ ]*//; s/[0-9a-f]{64}/<id>/g' | sort | uniq -c | sort -rn | head -n 6 | sed 's/^/    /'
	echo "  podunit's last lines:"
	journal podunit.service --since "@$SCENARIO_SINCE" | tail -n 4 | cut -c1-300 | sed 's/^/    | /'
	echo "  kubelet errors (deduplicated):"
	journal kubelet.service --since "@$SCENARIO_SINCE" | grep -E ' E[0-9]{4} ' |
		sed -E 's/^.* E[0-9]{4} [0-9:.]+ +[0-9]+ //; s/[0-9a-f]{64}/<id>/g' | sort | uniq -c | sort -rn | head -n 5 | cut -c1-500 | sed 's/^/    /'
}

# check NAME WHY CMD...: pass when CMD succeeds; returns its verdict
check() {
	local name=$1 why=$2
	shift 2
	if "$@"; then pass "$name"; else
		fail "$name" "$why"
		return 1
	fi
}

# wait_until SECONDS DESC CMD...: poll CMD every second
wait_until() {
	local t=$1 desc=$2 i
	shift 2
	for ((i = 0; i < t; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 1
	done
	log "timed out after ${t}s waiting for: $desc"
	return 1
}

# --- the kubelet's view (read-only port: pod statuses of static pods) ---
kpods() { curl -fsS --max-time 5 "$KUBELET_PODS"; }
# kpod NAME: the pod object of static pod NAME (its name is NAME-<node>)
kpod() { kpods | jq -c --arg n "$1-$NODE" '.items[] | select(.metadata.name == $n)'; }
# kctr POD CONTAINER: that container's status in the kubelet's pod status
kctr() { kpod "$1" | jq -c --arg c "$2" '.status.containerStatuses[]? | select(.name == $c)'; }
restart_count() { kctr "$1" "$2" | jq -r '.restartCount // empty'; }
is_ready() { [[ $(kctr "$1" "$2" | jq -r '.ready') == true ]]; }
is_running() { [[ $(kctr "$1" "$2" | jq -r '.state.running != null') == true ]]; }
pod_phase() { kpod "$1" | jq -r '.status.phase // empty'; }
pod_uid() { kpod "$1" | jq -r '.metadata.uid'; }

# --- the runtime's view ---
# ctrs POD CONTAINER: "id attempt state" of every CRI container of that
# kubelet container, newest attempt first
ctrs() {
	cri ps -a -o json | jq -r --arg p "$1-$NODE" --arg c "$2" '.containers[]
		| select(.labels["io.kubernetes.pod.name"] == $p and .metadata.name == $c)
		| "\(.id) \(.metadata.attempt // 0) \(.state)"' | sort -k2,2nr
}
# exited_codes POD CTR: the distinct exit codes of the exited attempts as
# ContainerStatus gives them, comma-separated; "gone" for an attempt removed
# between the listing and its status
exited_codes() {
	local id
	for id in $(ctrs "$1" "$2" | awk '$3 == "CONTAINER_EXITED" {print $1}'); do
		cri inspect "$id" | jq -r .status.exitCode | grep . || echo gone
	done | sort -u | paste -sd,
}
running_ctr() { ctrs "$1" "$2" | awk '$3 == "CONTAINER_RUNNING" {print $1; exit}'; }
# sandboxes POD: "id state" of the pod's sandboxes
sandboxes() {
	cri pods -o json | jq -r --arg p "$1-$NODE" '.items[] | select(.metadata.name == $p) | "\(.id) \(.state)"'
}
ready_sandbox() { sandboxes "$1" | awk '$2 == "SANDBOX_READY" {print $1; exit}'; }

add_pod() { cp "$TEMPLATES/$1.yaml" "$MANIFESTS/$1.yaml"; }
remove_pod() { rm -f "$MANIFESTS/$1.yaml"; }
pod_running() { is_running "$1" "$2"; }

# start_kubelet CONFIG: (re)start kubelet.service on the node with the
# KubeletConfiguration CONFIG (a path as the node sees it)
start_kubelet() {
	hx systemctl stop kubelet.service >/dev/null 2>&1 || true
	hx systemctl reset-failed kubelet.service >/dev/null 2>&1 || true
	hx systemd-run --unit=kubelet.service -p Restart=always -p RestartSec=2 \
		"$KUBELET" --config="$1" --v=2 >/dev/null
}

# kubelet_metric NAME: the sum of the kubelet's Prometheus samples NAME
# (0 when it has none yet; nothing, and failure, when the endpoint fails)
kubelet_metric() {
	local m
	m=$(curl -fsSk --max-time 5 https://127.0.0.1:11250/metrics) || return 1
	metric_sum "$1" <<<"$m"
}
metric_sum() { awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $NF} END {printf "%d\n", s}'; }
# podunit_metric NAME: the same from podunit's endpoint (PODUNIT_METRICS_ADDR)
podunit_metric() {
	local m
	m=$(curl -fsS --max-time 5 "http://$PODUNIT_METRICS_ADDR/metrics") || return 1
	metric_sum "$1" <<<"$m"
}

# podunit_pid: podunit's main PID inside the harness
podunit_pid() { hx systemctl show -P MainPID podunit.service; }

# snapshot: one line per running container: id, started-at, unit main PID
# and the unit's start timestamp; anything restarted shows up as a diff
snapshot() {
	local id
	for id in $(cri ps -q --state running | sort); do
		printf '%s %s %s %s\n' "$id" "$(cri inspect "$id" | jq -r '.status.startedAt')" \
			"$(hx systemctl show -P MainPID "podunit-ctr-$id.service")" \
			"$(hx systemctl show -P ExecMainStartTimestampMonotonic "podunit-ctr-$id.service")"
	done
}

# run_scenarios NAME...: run each scenario (scenarios.sh) in order; stop
# early when one sets ABORT
run_scenarios() {
	local s
	for s in "$@"; do
		declare -F "scenario_$s" >/dev/null || die "unknown scenario $s (known: ${ALL_SCENARIOS[*]})"
		log "==== $s"
		"scenario_$s" || true
		if [[ -n $ABORT ]]; then
			fail aborted "$ABORT: the remaining scenarios (after $s) would only time out"
			break
		fi
	done
}

# finish_run: tear down (the caller's cleanup) into a log, then the summary
# as the very last line; fails when a check or the teardown failed
finish_run() {
	local summary="kubelet-e2e: $PASSED passed, $FAILED failed" trc=0
	trap - EXIT INT TERM
	(cleanup) >"$E2E_OUT/teardown.log" 2>&1 || trc=$?
	if ((trc)); then
		cat "$E2E_OUT/teardown.log" >&2
		log "ERROR: teardown failed"
	fi
	if ((FAILED)); then log "failed checks:$FAILED_NAMES"; fi
	echo "$summary"
	((FAILED == 0 && trc == 0))
}
