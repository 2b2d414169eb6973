#!/bin/sh
# runc-leaf.sh UNIT_CGROUP_DIR RUNC_ARGS... — ExecStart wrapper for a
# container unit on cgroup v2 (Delegate=yes): move out of the unit's own
# cgroup into a leaf before exec'ing runc. Left in the unit's cgroup, runc
# cannot enable domain controllers below it (no internal processes), falls
# back to a threaded subtree, and systemd then cannot spawn ExecStopPost
# (".control ... threaded mode: Structure needs cleaning").
set -e
dir=$1; shift
mkdir -p "$dir/runc"
echo $$ > "$dir/runc/cgroup.procs"
exec "$@"
