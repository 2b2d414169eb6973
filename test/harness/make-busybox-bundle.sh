#!/bin/bash
# make-busybox-bundle.sh — build an OCI bundle whose rootfs is just
# busybox-static (+ applet symlinks), config from `runc spec`. For tests that
# need a container without an image store (Go: harness.BusyboxBundleScript()).
#
#   make-busybox-bundle.sh BUNDLE_DIR [--cgroups-path PATH] [--memory-limit BYTES] -- ARG...
#
# * terminal is switched off (the bundle runs under a systemd service: stdout
#   goes to journald);
# * --cgroups-path sets linux.cgroupsPath. Under a systemd service with the
#   cgroupfs driver use "/<slice path>/<unit>/<sub>" (e.g.
#   /podunit.slice/podunit-test.slice/ctr1.service/container) so the container
#   lives INSIDE the unit's cgroup (Delegate=yes on the unit); for runc
#   --systemd-cgroup use "slice:prefix:name" (runc creates prefix-name.scope).
#   Without it runc puts the container in "<own cgroup>/<id>" per v1 hierarchy
#   but in "/<id>" on the v2/unified one, i.e. OUTSIDE the unit in hybrid mode:
#   systemctl stop then times out and the container is left running.
# * needs no jq: edits the (fixed-format) output of runc 1.1's `runc spec`.
set -euo pipefail
B=${1:?usage: make-busybox-bundle.sh BUNDLE_DIR [--cgroups-path P] [--memory-limit BYTES] -- ARG...}; shift
CGPATH=""; MEMLIMIT=""
while [ $# -gt 0 ]; do
  case $1 in
    --cgroups-path) CGPATH=$2; shift 2 ;;
    --memory-limit) MEMLIMIT=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || set -- sh -c 'echo hello-from-busybox; sleep 3600'
BUSYBOX=$(command -v busybox) || { echo "busybox (busybox-static) not installed" >&2; exit 1; }
# (ldd exits 1 on a static binary: keep pipefail from reading that as failure;
# the VM has no `file`)
file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || { ldd "$BUSYBOX" 2>&1 || true; } | grep -q 'not a dynamic' \
  || { echo "$BUSYBOX is not static (install busybox-static)" >&2; exit 1; }

json_str() {  # JSON-quote one string
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\n'/\\n}
  printf '"%s"' "$s"
}

rm -rf "$B"; mkdir -p "$B/rootfs/bin" "$B/rootfs/proc" "$B/rootfs/sys" "$B/rootfs/dev" "$B/rootfs/tmp" "$B/rootfs/etc"
cp "$BUSYBOX" "$B/rootfs/bin/busybox"
for a in $("$B/rootfs/bin/busybox" --list); do [ -e "$B/rootfs/bin/$a" ] || ln -s busybox "$B/rootfs/bin/$a"; done
echo 'root:x:0:0:root:/:/bin/sh' > "$B/rootfs/etc/passwd"; echo 'root:x:0:' > "$B/rootfs/etc/group"
(cd "$B" && runc spec)

args=""; for a in "$@"; do args="$args${args:+, }$(json_str "$a")"; done
# runc 1.1 writes:  "terminal": true, ... "args": [ \n "sh" \n ], ... "linux": {
sed -i 's/"terminal": true/"terminal": false/' "$B/config.json"
ARGS_JSON=$args CGPATH=$CGPATH MEMLIMIT=$MEMLIMIT awk '
  BEGIN { args = ENVIRON["ARGS_JSON"]; cg = ENVIRON["CGPATH"]; mem = ENVIRON["MEMLIMIT"] }
  inargs && /^[ \t]*"sh"[ \t]*$/ { i = index($0, "\"sh\""); print substr($0, 1, i - 1) args; next }
  /"args": \[/ { inargs = 1 }
  /\]/ { inargs = 0 }
  /^\t"linux": [{]/ { print; if (cg != "") printf "\t\t\"cgroupsPath\": \"%s\",\n", cg; next }
  /^\t\t"resources": [{]/ { print; if (mem != "") printf "\t\t\t\"memory\": {\"limit\": %s, \"swap\": %s},\n", mem, mem; next }
  { print }' "$B/config.json" > "$B/config.json.new" && mv "$B/config.json.new" "$B/config.json"
grep -q "$(json_str "$1")" "$B/config.json" || { echo "failed to set args in $B/config.json" >&2; exit 1; }
if [ -n "$CGPATH" ]; then grep -q '"cgroupsPath"' "$B/config.json" || { echo "failed to set cgroupsPath" >&2; exit 1; }; fi
echo "$B"
