#!/bin/bash
# run.sh — the node tier: podunit on a real node shape. A Debian 12 VM booted
# with systemd 252 as PID 1 and only the unified cgroup v2 hierarchy, runc,
# crun, catatonit and Debian's CNI plugins from apt in its image, and podunit
# installed into it from the .deb built from the tree (`dpkg -i`, the
# package's own podunit.socket/podunit.service: no harness, no repo paths).
#
# Stages, in one fresh boot (the image is used with snapshot=on):
#   1. the image (cached in $PODUNIT_VM_IMAGE, default /var/tmp/podunit-vm;
#      rebuilt when build-vm.sh changes) and the .deb (test/deb/build.sh from
#      the committed tree, or $PODUNIT_DEB);
#   2. boot, push the .deb, critest, crictl and the kit, `node.sh install`;
#      the guest's 127.0.0.1:5000 is the host's test registry (ssh -R);
#   3. critest v1.37.0 in the guest, judged by test/critest/expected-pass-v2.txt
#      (VM_CRITEST_FOCUS narrows it and VM_CRITEST_MIN_RUN says how many
#      listed specs it must still run; VM_CRITEST=0 skips it);
#   4. the kubelet scenarios of test/kubelet (node-e2e.sh: e2e.sh's checks
#      with the node's own paths) under a real kubelet v1.37 in the guest,
#      failCgroupV1 at its default, the systemd cgroup driver
#      (VM_KUBELET_SCENARIOS narrows them; VM_KUBELET=0 skips them);
#   5. the Go suite tagged `vm` (node_test.go: podunit's CRI over the
#      forwarded socket, limits, OOM, daemon-reload, package remove /
#      reinstall / upgrade with a container running; v2_test.go: systemd
#      over the forwarded bus); VM_GO=0 skips it.
#
# Last lines:  vm-go (cgroup v2 node): ok|FAILED
#              critest (cgroup v2 node): N passed, M failed
#              kubelet-e2e (cgroup v2 node): N passed, M failed
#
# Under CI=true a VM that cannot be built or booted FAILS the tier; elsewhere
# (not root, tools missing) it prints "SKIP: cgroup v2 VM tier: <why>" and
# exits 0. KEEP=1 leaves the VM running and prints how to reach it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
source "$REPO/test/critest/lib.sh"
IMG=${PODUNIT_VM_IMAGE:-/var/tmp/podunit-vm}
GO_TAGS=containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper
OUT=${VM_OUT:-/var/tmp/podunit-vm-run}
: "${VM_CRITEST_FOCUS=}"
: "${VM_CRITEST_MIN_RUN:=0}"
: "${VM_CRITEST:=1}"
: "${VM_GO:=1}"
: "${VM_KUBELET:=1}"
: "${VM_KUBELET_SCENARIOS=}"
: "${KEEP:=0}"
skip() {
	if [[ ${CI:-} == true ]]; then echo "FAIL: cgroup v2 VM tier: $*" >&2; exit 1; fi
	echo "SKIP: cgroup v2 VM tier: $*" >&2; exit 0
}

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, image build)"
for t in qemu-system-x86_64 debootstrap busybox mkfs.ext4 ssh ssh-keygen apt-get dpkg-deb go critest crictl jq; do
	command -v "$t" >/dev/null || skip "missing $t (apt-get install qemu-system-x86 debootstrap busybox-static e2fsprogs openssh-client jq; test/critest/install-tools.sh)"
done
want=$(sha256sum "$HERE/build-vm.sh" | cut -d' ' -f1)
if [ ! -f "$IMG/root.img" ] || [ "$(cat "$IMG/build.sha256" 2>/dev/null)" != "$want" ]; then
	echo "building the cgroup v2 VM image in $IMG (about two minutes)" >&2
	bash "$HERE/build-vm.sh" "$IMG" >&2 || skip "image build failed (Debian mirror reachable? see above)"
	echo "$want" >"$IMG/build.sha256"
fi

rm -rf "$OUT"; mkdir -p "$OUT"
if [[ -n ${PODUNIT_DEB:-} ]]; then
	DEB=$(realpath -e "$PODUNIT_DEB")
else
	DEB=$(bash "$REPO/test/deb/build.sh" "$OUT/deb" 2>"$OUT/deb-build.log" | tail -n 1) ||
		{ tail -n 30 "$OUT/deb-build.log" >&2; echo "FAIL: the .deb did not build" >&2; exit 1; }
fi
[[ -f $DEB ]] || { echo "FAIL: no .deb ($DEB)" >&2; exit 1; }

# the guest pulls from the host's registry through the ssh tunnel
registry_hold
ensure_test_registry "$OUT/images.log"

RUNBASE=$(mktemp -d /tmp/puvm-XXXXXX) # short: the bus socket path must stay < 108 bytes
RUN=$RUNBASE/run
cleanup() {
	if [[ $KEEP == 1 && -e $RUN ]]; then
		echo "KEEP=1: VM left running: bash $HERE/vm.sh ssh $RUN CMD; stop: bash $HERE/vm.sh stop $RUN" >&2
		return
	fi
	bash "$HERE/vm.sh" stop "$RUN" || true
	rm -rf "$RUNBASE"
	registry_release >/dev/null 2>&1 || true
}
trap cleanup EXIT
env=$(bash "$HERE/vm.sh" start "$IMG" "$RUN") || skip "the VM did not boot (see above)"
DBUS_SYSTEM_BUS_ADDRESS=$(sed -n 's/^DBUS_SYSTEM_BUS_ADDRESS=//p' <<<"$env")
PODUNIT_VM_SSH=$(sed -n 's/^PODUNIT_VM_SSH="\(.*\)"$/\1/p' <<<"$env")
PODUNIT_VM_CRI=$(sed -n 's/^PODUNIT_VM_CRI=//p' <<<"$env")
export DBUS_SYSTEM_BUS_ADDRESS PODUNIT_VM_SSH PODUNIT_VM_CRI
vssh() { bash "$HERE/vm.sh" ssh "$RUN" "$@"; }

stage=$RUNBASE/stage
mkdir -p "$stage/kit"
(cd "$REPO" && CGO_ENABLED=0 go build -o "$stage/probe" ./test/vm/probe)
cp "$HERE/runc-leaf.sh" "$HERE/node.sh" "$REPO/test/harness/make-busybox-bundle.sh" "$DEB" "$stage/"
cp "$(command -v critest)" "$(command -v crictl)" "$stage/"
if [[ $VM_KUBELET == 1 ]]; then
	KUBELET=${KUBELET:-$(bash "$REPO/test/kubelet/build-kubelet.sh")}
	mkdir -p "$stage/tree/test/critest"
	cp "$KUBELET" "$stage/kubelet"
	(cd "$REPO" && CGO_ENABLED=0 go build -o "$stage/kubelet-attach" ./test/kubelet/attach)
	cp -r "$REPO/test/kubelet" "$stage/tree/test/"
	cp "$REPO/test/critest/lib.sh" "$stage/tree/test/critest/"
fi
cp "$KIT_DIR/registries.conf" "$KIT_DIR/policy.json" "$REPO"/test/cni/*.conflist "$stage/kit/"
bash "$HERE/vm.sh" push "$RUN" "$stage" /opt/podunit-vm
vssh 'install -m 0755 /opt/podunit-vm/crictl /usr/local/bin/crictl'
echo "installing $(basename "$DEB") in the VM" >&2
if ! vssh 'bash /opt/podunit-vm/node.sh install' >"$OUT/install.log" 2>&1; then
	cat "$OUT/install.log" >&2
	vssh 'journalctl --no-pager -u podunit.service | tail -n 40' >&2 || true
	echo "FAIL: podunit did not install and serve in the VM" >&2
	exit 1
fi

rc=0
summary=""
if [[ $VM_CRITEST == 1 ]]; then
	echo "critest in the VM (focus: ${VM_CRITEST_FOCUS:-everything})" >&2
	t0=$(date +%s)
	if vssh "bash /opt/podunit-vm/node.sh critest '$VM_CRITEST_FOCUS'"; then
		vssh 'cat /var/tmp/critest/report.json' >"$OUT/critest-report.json"
		vssh 'cat /var/tmp/critest/critest.log' >"$OUT/critest.log" || true
		jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It")
			| [.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")),
			   ((.Failure.Message // "") | gsub("[\t\n]"; " "))] | @tsv' \
			"$OUT/critest-report.json" >"$OUT/critest-specs.tsv"
		grep -E '^\s*\[FAIL\]' "$OUT/critest.log" | sort -u | sed 's/^ */  /' || true
		bash "$KIT_DIR/ratchet.sh" "$OUT/critest-specs.tsv" "$KIT_DIR/expected-pass-v2.txt" "$VM_CRITEST_FOCUS" "$VM_CRITEST_MIN_RUN" | sed 's/^ratchet:/ratchet (v2 node):/' || rc=1
		summary=$(awk -F'\t' '$1 == "passed" {p++} $1 ~ /^(failed|panicked|interrupted|aborted|timedout)$/ {f++}
			END {printf "critest (cgroup v2 node): %d passed, %d failed\n", p, f}' "$OUT/critest-specs.tsv")
		echo "critest in the VM took $(($(date +%s) - t0)) s" >&2
	else
		summary="critest (cgroup v2 node): no report"
		rc=1
	fi
fi
ksummary=""
if [[ $VM_KUBELET == 1 ]]; then
	echo "kubelet scenarios in the VM (${VM_KUBELET_SCENARIOS:-all})" >&2
	t0=$(date +%s)
	krc=0
	# shellcheck disable=SC2086 # scenario names are words
	vssh "bash /opt/podunit-vm/tree/test/kubelet/node-e2e.sh /opt/podunit-vm/kubelet $VM_KUBELET_SCENARIOS" \
		2>&1 | tee "$OUT/kubelet-e2e.log" || krc=1
	vssh 'tar -C /var/tmp/kubelet-e2e -cf - .' 2>/dev/null | (mkdir -p "$OUT/kubelet-e2e" && tar -C "$OUT/kubelet-e2e" -xf -) || true
	ksummary=$(grep -E '^kubelet-e2e: [0-9]+ passed, [0-9]+ failed$' "$OUT/kubelet-e2e.log" | tail -n 1 |
		sed 's/^kubelet-e2e:/kubelet-e2e (cgroup v2 node):/')
	[[ -n $ksummary ]] || { ksummary="kubelet-e2e (cgroup v2 node): no summary"; krc=1; }
	((krc)) && rc=1
	echo "the kubelet scenarios in the VM took $(($(date +%s) - t0)) s" >&2
fi
# after critest and the kubelet: the Go suite ends by removing, reinstalling
# and upgrading the package
gorc=0
if [[ $VM_GO == 1 ]]; then
	(cd "$REPO" && go test -tags "$GO_TAGS,vm" -count=1 -timeout 30m -v ./test/vm/ "$@") || gorc=1
fi
((gorc)) && rc=1
vssh 'journalctl --no-pager -o short-precise -u podunit.service -u podunit-logrelay.service' >"$OUT/podunit.journal" 2>&1 || true
if ((rc)) && [[ ${CI:-} == true ]]; then
	echo "last 100 lines of podunit's journal in the VM ($OUT/podunit.journal):" >&2
	tail -n 100 "$OUT/podunit.journal" >&2 || true
fi
# the summary lines must be the last ones: tear down first, into a log
trap - EXIT
cleanup >"$OUT/teardown.log" 2>&1 || true
if [[ $VM_GO == 1 ]]; then
	if ((gorc)); then echo "vm-go (cgroup v2 node): FAILED"; else echo "vm-go (cgroup v2 node): ok"; fi
fi
[[ -z $summary ]] || echo "$summary"
[[ -z $ksummary ]] || echo "$ksummary"
exit $rc
