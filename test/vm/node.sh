#!/bin/bash
# node.sh — runs INSIDE the cgroup v2 VM (pushed to /opt/podunit-vm by run.sh).
#
#   node.sh install           dpkg -i the podunit .deb pushed next to this script,
#                             with a drop-in that points pulls at the test
#                             registry (reached through run.sh's ssh tunnel on
#                             127.0.0.1:5000) and CNI at the test network;
#                             waits until crictl says RuntimeReady
#   node.sh critest [FOCUS]   critest v1.37.0 against the packaged socket;
#                             report in /var/tmp/critest (report.json, log)
#
# Nothing here knows the repository: the node sees only the package, its
# units and the kit files run.sh pushed (registries.conf, policy.json, CNI).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SOCK=/run/podunit/podunit.sock
cmd=${1:-}; shift || true

crictl_() { crictl --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout 60s "$@"; }

case $cmd in
install)
	mkdir -p /etc/podunit/podunit.toml.d /etc/podunit/kit /etc/cni/net.d
	cp "$HERE"/kit/* /etc/podunit/kit/
	cat >/etc/podunit/podunit.toml.d/50-vm-node.toml <<'EOF'
# written by test/vm/node.sh: the test registry and network of the VM tier
[image]
registries_conf = "/etc/podunit/kit/registries.conf"
policy_path = "/etc/podunit/kit/policy.json"

[cni]
conf_dir = "/etc/podunit/kit"
bin_dirs = ["/usr/lib/cni"]

[streaming]
address = "127.0.0.1:0"
EOF
	# the drop-in is there before dpkg -i: postinst enables and starts the units
	deb=$(ls "$HERE"/podunit_*.deb)
	DEBIAN_FRONTEND=noninteractive dpkg -i "$deb"
	for _ in $(seq 120); do
		crictl_ info 2>/dev/null | grep -q '"RuntimeReady"' && break
		sleep 1
	done
	crictl_ version
	systemctl --no-pager status podunit.service podunit.socket | head -20
	;;
critest)
	focus=${1:-}
	out=/var/tmp/critest
	rm -rf "$out"; mkdir -p "$out/tmp"
	# critest loads its AppArmor profiles with `sudo apparmor_parser` and
	# takes any stderr as failure; sudo warns when the hostname the image
	# sets (/etc/hostname) does not resolve
	h=$(hostname); getent hosts "$h" >/dev/null || echo "127.0.1.1 $h" >>/etc/hosts
	args=(-runtime-endpoint "unix://$SOCK" -image-endpoint "unix://$SOCK"
		-ginkgo.skip='public image with digest should be pulled and removed' -ginkgo.no-color
		-ginkgo.timeout=120m -ginkgo.json-report="$out/report.json")
	[[ -n $focus ]] && args+=(-ginkgo.focus="$focus")
	TMPDIR=$out/tmp "$HERE/critest" "${args[@]}" >"$out/critest.log" 2>&1 || true
	[[ -s $out/report.json ]] || { tail -n 40 "$out/critest.log" >&2; echo "critest wrote no report" >&2; exit 1; }
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
