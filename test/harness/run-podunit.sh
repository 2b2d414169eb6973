#!/usr/bin/env bash
# run-podunit.sh start|stop — what `make run` / `make stop` do after building.
#
# start: installs bin/podunit as /usr/local/bin/podunit and starts it
#   * under the host's systemd when PID 1 is systemd: as podunit.service from
#     contrib/systemd/ when the project ships that unit, otherwise as a
#     transient podunit.service (systemd-run); socket /run/podunit/podunit.sock;
#   * otherwise inside a long-lived test harness (podunit-harness.sh) booted
#     with --host-net --net-rw, so pods are reachable from the host and pulls
#     use the host's network; /var/lib/podunit, /var/log/pods, /etc/podunit and
#     /etc/cni/net.d are the host's own directories bound in; socket
#     $RUN_HARNESS/sd/run/podunit/podunit.sock.
#   When /etc/cni/net.d holds no network, the test network of test/cni (a
#   private bridge with no route off the machine) is installed there.
#   Ends by printing the socket and a crictl command line that works.
# stop: stops podunit and, in the harness case, the harness, then removes the
#   test network's bridge/iptables chains and restores ip_forward.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HARNESS=$REPO/test/harness/podunit-harness.sh
RUN_HARNESS=${RUN_HARNESS:-/var/lib/podunit-harness}
D=$RUN_HARNESS/sd
BIN=/usr/bin/podunit   # where contrib/systemd/podunit.service expects it

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

systemd_host() { [[ -d /run/systemd/system ]] && [[ $(readlink /proc/1/exe 2>/dev/null) == */systemd ]]; }
harness_running() { [[ -f $D/systemd.pid ]] && bash "$HARNESS" exec "$D" true 2>/dev/null; }

ensure_cni() {
	mkdir -p /etc/cni/net.d
	if ! compgen -G '/etc/cni/net.d/*.conf*' >/dev/null; then
		log "no CNI network in /etc/cni/net.d: installing podunit's test network (test/cni)"
		install -m 0644 "$REPO/test/cni/10-podunit-test.conflist" /etc/cni/net.d/10-podunit-test.conflist
	fi
}

wait_ready() {  # SOCKET
	local sock=$1 ep=unix://$1
	for _ in $(seq 1 150); do [[ -S $sock ]] && break; sleep 0.2; done
	[[ -S $sock ]] || die "no CRI socket at $sock"
	# crictl warns on stderr about a missing /etc/crictl.yaml; the flags make it moot
	crictl --runtime-endpoint "$ep" --image-endpoint "$ep" version 2>/dev/null || die "crictl version failed"
	crictl --runtime-endpoint "$ep" --image-endpoint "$ep" info 2>/dev/null |
		jq -r '.status.conditions[] | "\(.type)=\(.status) \(.reason // "")"' || die "crictl info failed"
	echo
	echo "podunit is running. CRI socket: $sock"
	echo "  crictl --runtime-endpoint $ep --image-endpoint $ep info"
}

start() {
	[[ $(id -u) == 0 ]] || die "run as root"
	install -m 0755 "$REPO/bin/podunit" "$BIN"
	mkdir -p /etc/podunit /var/lib/podunit /var/log/pods
	[[ -e /etc/podunit/podunit.toml ]] || printf '# podunit configuration; `podunit config` prints every key with its value\n' >/etc/podunit/podunit.toml
	ensure_cni
	if systemd_host; then
		if [[ -f $REPO/contrib/systemd/podunit.service ]]; then
			install -m 0644 "$REPO"/contrib/systemd/podunit.* /etc/systemd/system/
			systemctl daemon-reload
			systemctl stop podunit.service 2>/dev/null || true
			systemctl enable podunit.service
			[[ ! -f /etc/systemd/system/podunit.socket ]] || systemctl start podunit.socket
			systemctl start podunit.service
		else
			systemctl stop podunit.service 2>/dev/null || true
			systemctl reset-failed podunit.service 2>/dev/null || true
			systemd-run --unit=podunit.service --collect -p Type=notify -p NotifyAccess=main "$BIN" serve
		fi
		wait_ready /run/podunit/podunit.sock
		return
	fi
	if harness_running; then
		log "restarting podunit in the running harness $D"
		bash "$HARNESS" exec "$D" systemctl stop podunit.service 2>/dev/null || true
	else
		mkdir -p "$RUN_HARNESS"
		[[ -f $RUN_HARNESS/ip_forward.orig ]] || cat /proc/sys/net/ipv4/ip_forward >"$RUN_HARNESS/ip_forward.orig"
		log "PID 1 is not systemd: booting podunit's systemd harness in $D"
		bash "$HARNESS" start "$D" --host-net --net-rw --bind "$REPO" \
			--bind /var/lib/podunit --bind /var/log/pods --bind /etc/podunit --bind /etc/cni/net.d >/dev/null
	fi
	bash "$HARNESS" exec "$D" systemctl reset-failed podunit.service 2>/dev/null || true
	# the host's /usr/local/bin as of boot is the harness' lower layer: run the
	# binary from the bound repo so a rebuilt podunit is picked up on restart
	bash "$HARNESS" exec "$D" systemd-run --unit=podunit.service -p Type=notify -p NotifyAccess=main \
		-p TimeoutStopSec=30 "$REPO/bin/podunit" serve
	wait_ready "$D/run/podunit/podunit.sock"
	echo "  (podunit runs inside a systemd harness; its journal: journalctl -D $D/run/log/journal -u podunit)"
	echo "  stop it with: make stop"
}

stop() {
	if systemd_host; then
		# the socket first: a connection must not activate the service again
		systemctl stop podunit.socket 2>/dev/null || true
		systemctl stop podunit.service 2>/dev/null || true
		log "podunit.service stopped"
		return
	fi
	if [[ -e $D ]]; then
		bash "$HARNESS" exec "$D" systemctl stop podunit.service 2>/dev/null || true
		bash "$HARNESS" stop "$D"
	fi
	bash "$REPO/test/cni/net-cleanup.sh" "$RUN_HARNESS"
	rm -f "$RUN_HARNESS/ip_forward.orig"
	rmdir "$RUN_HARNESS" 2>/dev/null || true
	log "podunit and its harness stopped"
}

case ${1:-} in
start) start ;;
stop) stop ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
