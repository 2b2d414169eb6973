#!/bin/bash
# run.sh — the cgroup v2 test tier. Builds the VM image once (cached in
# $PODUNIT_VM_IMAGE, default /var/tmp/podunit-vm; rebuilt when build-vm.sh
# changes), boots it fresh (snapshot), pushes the probe and helper scripts,
# runs the Go suite tagged `vm` against it and powers it off.
#
# Where the VM cannot be built (not root, tools or the Debian mirror
# missing) it prints "SKIP: cgroup v2 VM tier: <why>" and exits 0, so
# `make test` stays usable on such machines; a VM that was built but does
# not boot, or a failing test, exits non-zero.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMG=${PODUNIT_VM_IMAGE:-/var/tmp/podunit-vm}
skip() { echo "SKIP: cgroup v2 VM tier: $*" >&2; exit 0; }

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, image build)"
for t in qemu-system-x86_64 debootstrap busybox mkfs.ext4 ssh ssh-keygen apt-get dpkg-deb go; do
  command -v "$t" >/dev/null || skip "missing $t (apt-get install qemu-system-x86 debootstrap busybox-static e2fsprogs openssh-client)"
done
want=$(sha256sum "$HERE/build-vm.sh" | cut -d' ' -f1)
if [ ! -f "$IMG/root.img" ] || [ "$(cat "$IMG/build.sha256" 2>/dev/null)" != "$want" ]; then
  echo "building the cgroup v2 VM image in $IMG (about a minute)" >&2
  bash "$HERE/build-vm.sh" "$IMG" >&2 || skip "image build failed (Debian mirror reachable? see above)"
  echo "$want" > "$IMG/build.sha256"
fi

RUNBASE=$(mktemp -d /tmp/puvm-XXXXXX)   # short: the bus socket path must stay < 108 bytes
RUN=$RUNBASE/run
cleanup() { bash "$HERE/vm.sh" stop "$RUN" || true; rm -rf "$RUNBASE"; }
trap cleanup EXIT
env=$(bash "$HERE/vm.sh" start "$IMG" "$RUN")
DBUS_SYSTEM_BUS_ADDRESS=$(sed -n 's/^DBUS_SYSTEM_BUS_ADDRESS=//p' <<<"$env")
PODUNIT_VM_SSH=$(sed -n 's/^PODUNIT_VM_SSH="\(.*\)"$/\1/p' <<<"$env")
export DBUS_SYSTEM_BUS_ADDRESS PODUNIT_VM_SSH

stage=$RUNBASE/stage; mkdir -p "$stage"
(cd "$REPO" && CGO_ENABLED=0 go build -o "$stage/probe" ./test/vm/probe)
cp "$HERE/runc-leaf.sh" "$REPO/test/harness/make-busybox-bundle.sh" "$stage/"
bash "$HERE/vm.sh" push "$RUN" "$stage" /opt/podunit-vm

cd "$REPO"
go test -tags vm -count=1 -timeout 20m -v ./test/vm/ "$@"
