# lib.sh — helpers shared by the scripts of test/critest (podunit's offline critest kit).
# Sourced, not run. Everything here is idempotent and safe to call twice.
#
# Environment knobs read here (all optional):
#   PODUNIT_TEST_REGISTRY   host:port of the local registry   (default 127.0.0.1:5000)

: "${PODUNIT_TEST_REGISTRY:=127.0.0.1:5000}"

KIT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log()  { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die()  { log "ERROR: $*"; exit 1; }

require_root() {
	[[ $(id -u) -eq 0 ]] || die "run as root (needs apt-get, chown and setuid bits)"
}

# run_no_service_start CMD...: run CMD with a temporary /usr/sbin/policy-rc.d
# that forbids maintainer scripts from starting daemons. Without it, installing
# docker-registry (or containerd) on a non-systemd host can start the distro's
# own daemon through /etc/init.d, which would grab port 5000 or a socket.
run_no_service_start() {
	local created=0 rc=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\n# temporary, written by the podunit critest kit\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		created=1
	fi
	"$@" || rc=$?
	if ((created)); then rm -f /usr/sbin/policy-rc.d; fi
	return "$rc"
}

_APT_UPDATED=0
apt_update_once() {
	((_APT_UPDATED)) && return 0
	log "apt-get update"
	apt-get update -qq || die "apt-get update failed"
	_APT_UPDATED=1
}

# ensure_packages PKG...: install the Debian packages that are not installed yet.
ensure_packages() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	log "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! run_no_service_start apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
		apt_update_once
		run_no_service_start apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
			die "apt-get install ${missing[*]} failed"
	fi
}

# registry_up: true when something answers the registry API on PODUNIT_TEST_REGISTRY.
registry_up() {
	curl -fsS -o /dev/null --max-time 3 "http://${PODUNIT_TEST_REGISTRY}/v2/" 2>/dev/null
}

# registry_hold: take this run's lease on the test registry (registry.sh);
# registry_release at the run's end stops the registry when this was the last
# run holding it and a run started it. The lease is the PID of the shell that
# sourced this file, so a run killed outright leaves no live lease.
registry_hold() {
	export PODUNIT_REGISTRY_LEASE=$$
	bash "$KIT_DIR/registry.sh" hold "$PODUNIT_REGISTRY_LEASE"
}
registry_release() {
	[[ -n ${PODUNIT_REGISTRY_LEASE:-} ]] || return 0
	bash "$KIT_DIR/registry.sh" release "$PODUNIT_REGISTRY_LEASE"
}

# A set of test images carries a stamp: a hash of what it is built from. Its
# images.sh pushes the tag STAMP_REPO:<stamp> last, so a registry that has the
# tag has the whole current set (a stopped registry's storage, an earlier
# run's), and a changed source makes the next run build the set again.
# sources_stamp FILE...: the stamp of these sources.
sources_stamp() { cat "$@" | sha256sum | cut -c1-16; }
# registry_has_tag REPO TAG
registry_has_tag() {
	curl -fsS -o /dev/null -H 'Accept: application/vnd.oci.image.index.v1+json' \
		"http://$PODUNIT_TEST_REGISTRY/v2/$1/manifests/$2" 2>/dev/null
}
CRITEST_STAMP_REPO=podunit/critest-images

# ensure_test_registry LOGFILE: have the registry up with the critest images in
# it, building and pushing them (images.sh) when the registry lacks the
# stamp of the current image sources (images.sh --stamp). The caller holds a
# lease (registry_hold) and releases it at its end.
ensure_test_registry() {
	local logfile=$1 stamp
	stamp=$(bash "$KIT_DIR/images.sh" --stamp)
	registry_up || bash "$KIT_DIR/registry.sh" start >/dev/null 2>&1 || true
	if ! registry_up || ! registry_has_tag "$CRITEST_STAMP_REPO" "$stamp"; then
		log "building and pushing the test images (test/critest/images.sh, log $logfile)"
		bash "$KIT_DIR/images.sh" >"$logfile" 2>&1 ||
			{ tail -n 30 "$logfile" >&2; die "images.sh failed (log: $logfile)"; }
	fi
	bash "$KIT_DIR/registry.sh" start
	registry_up || die "no registry at $PODUNIT_TEST_REGISTRY"
}
