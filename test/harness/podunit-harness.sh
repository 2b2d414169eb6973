#!/bin/bash
# podunit-harness.sh — a disposable real systemd for podunit's tests.
#
# The dev and CI machines run a minimal init, not systemd, yet podunit is a
# systemd client through and through (transient units, slices, journald). This
# script boots the distribution's own systemd as PID 1 of fresh namespaces on a
# copy-on-write view of the host root, so tests get a real manager in ~0.5 s and
# throw it away in ~0.2 s. Go tests drive it through test/harness (harness.go).
#
#   start DIR [--bind SRC[:DST]]... [--shared-bind DIR]... [--host-net] [--host-ipc] [--net-rw] [--run-tmpfs]
#             [--unified] [--timeout SEC]
#       boot; prints `KEY=value` lines (see `env`) once SystemState is
#       running/degraded. DIR must not exist (a dir left by a crashed run is
#       cleaned first). Keep DIR short: sockets end up in DIR/run (<108 chars).
#         --bind      rbind a host path into the harness (same path by default);
#                     the only way to make writes survive or be seen by the host
#                     apart from /run. Storage for overlay mounts MUST be bound:
#                     overlayfs cannot use the harness' own overlay as upper.
#         --shared-bind  like --bind (same path), but mounts propagate both
#                     ways between host and harness below it: the host path
#                     becomes a shared mount point (removed by stop), every
#                     other mount in the harness is made private before boot.
#                     For critest, which mounts on the host in its temp dir and
#                     expects containers to see it (and the reverse).
#         --host-net  share the host's network namespace (pods reachable from
#                     the host, 127.0.0.1:5000 registry reachable from inside).
#                     /proc/sys/net stays read-only unless --net-rw.
#         --net-rw    with --host-net: leave /proc/sys/net writable, because CNI
#                     plugins must set ip_forward/route_localnet; those are then
#                     HOST settings, so the caller restores them.
#         --host-ipc  share the host's IPC namespace (critest's HostIpc specs
#                     create SysV segments on the host and look for them in pods).
#         --unified   cgroup2 only (no usable controllers on a v1-hybrid host:
#                     limits are accepted but not enforced).
#         --run-tmpfs DIR/run (the harness' /run) is a tmpfs, as /run is on a
#                     node, instead of a directory on DIR's disk: what runtimes
#                     keep there (state, storage's run root) costs no syncs.
#                     Mounted on the host, unmounted by stop (its contents go).
#   stop DIR      poweroff (SIGRTMIN+4), SIGKILL after $STOP_TIMEOUT s (15),
#                 remove the harness cgroups, then DIR; non-zero if anything stays.
#   exec DIR CMD...  run CMD in the harness' namespaces (systemctl, systemd-run,
#                 journalctl, runc work there as on a systemd host).
#   env DIR       PODUNIT_HARNESS_DIR, PODUNIT_HARNESS_PID (host PID of the inner
#                 systemd), PODUNIT_HARNESS_RUN, PODUNIT_HARNESS_JOURNAL,
#                 PODUNIT_HARNESS_NAME, DBUS_SYSTEM_BUS_ADDRESS.
#   name DIR      the harness' cgroup name (podunit-harness-<hash of DIR>).
#   gc            remove podunit-harness-* cgroups that hold no process (left by
#                 SIGKILLed runs); a cgroup still in use is kept.
#
# Why it is built this way (each point was a failure before it was a rule):
#  * cgroups: one "podunit-harness-<hash>" child of the caller's cgroup in every
#    mounted hierarchy; the launcher moves in, then unshares a cgroup namespace
#    rooted there. The host's cgroup mounts are never remounted or written.
#  * root = overlayfs(lower=/, upper=tmpfs): systemd's tmpfiles would otherwise
#    act on the host (Debian's tmp.conf has "D /tmp": it would wipe /tmp).
#  * /etc edits happen in the overlay only: generators masked, every unit pulled
#    in by a *.target.wants/ masked except journald and dbus (the host image
#    enables containerd, postgresql, a registry, apt timers ...), the host's
#    /etc/systemd/system/*.wants removed; the boot target is our own
#    podunit-harness.target. Journal volatile, no rate limit.
#  * hybrid cgroups: the host's v1 hierarchies are mounted again inside the new
#    cgroupns plus cgroup2 at unified/. systemd mounts every enabled controller
#    of /proc/cgroups that it finds unmounted — a NEW host-global hierarchy —
#    so read-only placeholder tmpfs sit on the unbound ones (net_cls, perf_event,
#    hugetlb ...). systemd insists on cpu,cpuacct being one hierarchy: a symlink
#    to cpu satisfies it. MemoryMax, CPUQuota, CPUWeight, TasksMax are enforced
#    through v1.
#  * /proc/sys read-only (except net in a private netns), /sys read-only, a
#    private /dev with a handful of nodes, tmpfs /tmp.
#  * DIR/run is bound as /run: every socket inside (dbus, journal, podunit's
#    CRI socket) is reachable from the host at DIR/run/... .
#  * mount -n everywhere: libmount would create /run/mount on the host's disk.
#  * liveness checks treat zombies as dead (the host init reaps lazily) and PIDs
#    from pid files are trusted only after their cmdline/cgroup is checked.
#
# From the host: DBUS_SYSTEM_BUS_ADDRESS=unix:path=DIR/run/dbus/system_bus_socket
# works for busctl/godbus/go-systemd (NewSystemConnectionContext). systemd's
# private socket refuses host clients (their PID is outside its pid namespace),
# host systemctl/systemd-run refuse (no /run/systemd/system on the host: never
# create it) — use `exec`. Journals: journalctl -D DIR/run/log/journal.
# PIDs in D-Bus replies are harness-namespace PIDs: run podunit INSIDE.
set -euo pipefail

SELF=$(realpath "$0")
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
STOP_TIMEOUT=${STOP_TIMEOUT:-15}

die() { echo "podunit-harness: $*" >&2; exit 1; }
now() { date +%s%N; }
ms_since() { echo $(( ($(now) - $1) / 1000000 )); }

harness_name() { echo "podunit-harness-$(printf %s "$1" | md5sum | cut -c1-10)"; }

# "<mountpoint> <superoptions>" for each cgroup v1 mount under /sys/fs/cgroup
v1_mounts() {
  awk '{for(i=7;i<=NF;i++) if($i=="-") break;
        if($(i+1)=="cgroup" && $5 ~ "^/sys/fs/cgroup/") print $5, $(i+3)}' /proc/self/mountinfo
}
# mount point of the cgroup2 hierarchy (/sys/fs/cgroup/unified here, /sys/fs/cgroup on pure-v2 hosts)
v2_mount() {
  awk '{for(i=7;i<=NF;i++) if($i=="-") break; if($(i+1)=="cgroup2") {print $5; exit}}' /proc/self/mountinfo
}
# one line per hierarchy: "<mountpoint> <harness cgroup dir>", below the caller's own cgroup
harness_cgroups() {
  local name=$1 line ctrls path mp
  local self; self=$(cat /proc/self/cgroup)     # read once: it changes once we move
  while IFS= read -r line; do
    ctrls=$(echo "$line" | cut -d: -f2); path=$(echo "$line" | cut -d: -f3-)
    if [ -z "$ctrls" ]; then mp=$(v2_mount)
    else mp=$(v1_mounts | awk -v c="$ctrls" '(","$2",") ~ (","c",") {print $1; exit}'); fi
    [ -n "$mp" ] && [ -d "$mp" ] || continue
    echo "$mp $(realpath -m "$mp$path/$name")"
  done <<< "$self"
}

# PIDs are only trusted after checking they still belong to this harness
# (a stale pid file must never make us signal an unrelated, reused PID).
alive() {  # running and not a zombie (reparented zombies may linger until reaped)
  local st; [ -n "${1:-}" ] && st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
unshare_pid() {  # the launcher: "unshare ... __inner DIR"
  local D=$1 up; up=$(cat "$D/unshare.pid" 2>/dev/null) || return 0
  { tr '\0' ' ' < "/proc/$up/cmdline"; } 2>/dev/null | grep -qF -- "__inner $D " && echo "$up" || true
}
inner_pid() {  # host PID of the harness' systemd (PID 1 inside)
  local D=$1 p; p=$(cat "$D/systemd.pid" 2>/dev/null) || true
  if [ -z "$p" ]; then local up; up=$(unshare_pid "$D"); [ -n "$up" ] && p=$(awk '{print $1}' "/proc/$up/task/$up/children" 2>/dev/null); fi
  [ -n "$p" ] && grep -qF "/$(harness_name "$D")" "/proc/$p/cgroup" 2>/dev/null && echo "$p" || true
}

print_env() {
  local D=$1
  echo "PODUNIT_HARNESS_DIR=$D"
  echo "PODUNIT_HARNESS_PID=$(inner_pid "$D")"
  echo "PODUNIT_HARNESS_RUN=$D/run"
  echo "PODUNIT_HARNESS_JOURNAL=$D/run/log/journal"
  echo "PODUNIT_HARNESS_NAME=$(harness_name "$D")"
  echo "DBUS_SYSTEM_BUS_ADDRESS=unix:path=$D/run/dbus/system_bus_socket"
}

# mount points of this mount namespace, octal escapes (\040 ...) decoded
mountpoints() {
  local mp
  awk '{print $5}' /proc/self/mountinfo | while read -r mp; do
    printf '%b\n' "$(printf '%s' "$mp" | sed 's/\\\([0-7][0-7][0-7]\)/\\0\1/g')"
  done
}
under_shared() {  # MOUNTPOINT: is it one of $SHARED or below one?
  local sp; for sp in $SHARED; do case $1/ in "$sp"/*) return 0 ;; esac; done; return 1
}

# ---------------------------------------------------------------- inside ----
# Runs as PID 1 of the new pid/mount/cgroup/uts/ipc(/net) namespaces.
inner() {
  local D=$1 R=$1/root
  if [ -n "$SHARED" ]; then
    # unshare kept the host's propagation so that the --shared-bind mounts stay
    # peers of the host's; everything else is made private before we mount
    # anything, so nothing below can propagate back to the host.
    local mp
    while read -r mp; do
      under_shared "$mp" || mount -n --make-private "$mp" 2>/dev/null || true
    done < <(mountpoints)
    if awk -v s="$SHARED" 'BEGIN { n = split(s, sp, " ") }
        / shared:[0-9]/ { ok = 0; for (i = 1; i <= n; i++) if ($5 == sp[i] || index($5, sp[i] "/") == 1) ok = 1
                          if (!ok) { print "podunit-harness: host mount stayed shared: " $5; bad = 1 } }
        END { exit !bad }' /proc/self/mountinfo >&2; then
      exit 1
    fi
  fi
  # everything below happens in our private mount namespace only
  mount -n -t tmpfs -o mode=755 harness-upper "$D/ovl"
  mkdir "$D/ovl/upper" "$D/ovl/work"
  mount -n -t overlay harness-root -o "lowerdir=/,upperdir=$D/ovl/upper,workdir=$D/ovl/work" "$R"

  mount -n -t proc -o nosuid,nodev,noexec proc "$R/proc"
  mount -n --bind "$R/proc/sys" "$R/proc/sys"
  # net sysctls of a private netns are its own: writable. With the host's netns
  # they are the host's: writable only on request (--net-rw).
  [ "$HOST_NET" = 1 ] && [ "$NET_RW" = 0 ] || mount -n --bind "$R/proc/sys/net" "$R/proc/sys/net"
  mount -n -o remount,bind,ro,nosuid,nodev,noexec "$R/proc/sys"     # no host-wide sysctl writes
  mount -n -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"        # ro: udev & co stay off

  if [ "$MODE" = unified ]; then
    mount -n -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"
  else
    mount -n -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup-root "$R/sys/fs/cgroup"
    v1_mounts | while read -r mp opts; do      # same hierarchies, rooted at our cgroupns
      local n=${mp#/sys/fs/cgroup/} o
      o=$(echo "$opts" | tr , '\n' | grep -vxE 'rw|ro' | paste -sd, -)
      mkdir -p "$R/sys/fs/cgroup/$n"
      mount -n -t cgroup -o "nosuid,nodev,noexec,$o" cgroup "$R/sys/fs/cgroup/$n"
    done
    mkdir -p "$R/sys/fs/cgroup/unified"
    mount -n -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup/unified"
    # systemd wants cpu+cpuacct joined; a symlink to the separate "cpu" mount satisfies its check
    [ -e "$R/sys/fs/cgroup/cpu,cpuacct" ] || ln -s cpu "$R/sys/fs/cgroup/cpu,cpuacct"
    # controllers not bound to a v1 hierarchy on the host: keep systemd from binding them
    local c
    for c in $(awk 'NR>1 && $4==1 {print $1}' /proc/cgroups) net_cls,net_prio; do
      [ -e "$R/sys/fs/cgroup/$c" ] && continue
      mkdir -p "$R/sys/fs/cgroup/$c"
      mount -n -t tmpfs -o ro,size=4k,mode=555 cgroup-placeholder "$R/sys/fs/cgroup/$c"
    done
  fi

  # private /dev (nodes only; no host devices)
  mount -n -t tmpfs -o mode=755,nosuid,size=64m dev "$R/dev"
  mknod -m 666 "$R/dev/null" c 1 3;   mknod -m 666 "$R/dev/zero" c 1 5
  mknod -m 666 "$R/dev/full" c 1 7;   mknod -m 666 "$R/dev/random" c 1 8
  mknod -m 666 "$R/dev/urandom" c 1 9; mknod -m 666 "$R/dev/tty" c 5 0
  [ -c /dev/fuse ] && mknod -m 666 "$R/dev/fuse" c 10 229
  mkdir -p "$R/dev/net" && mknod -m 666 "$R/dev/net/tun" c 10 200
  mkdir "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue"
  mount -n -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5,nosuid,noexec devpts "$R/dev/pts"
  ln -s pts/ptmx "$R/dev/ptmx"
  mount -n -t tmpfs -o mode=1777,nosuid,nodev shm "$R/dev/shm"
  mount -n -t mqueue -o nosuid,nodev,noexec mqueue "$R/dev/mqueue"
  ln -s /proc/self/fd "$R/dev/fd"; ln -s /proc/self/fd/0 "$R/dev/stdin"
  ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"
  touch "$R/dev/console"; mount -n --bind "$D/console.log" "$R/dev/console"  # systemd's console output

  mount -n --bind "$D/run" "$R/run"                # shared with the host side
  mount -n -t tmpfs -o mode=1777,nosuid,nodev tmp "$R/tmp"
  local b src dst
  for b in $BINDS; do                              # "src:dst", dst defaults to src
    src=${b%%:*}; dst=${b#*:}
    mkdir -p "$R$dst"; mount -n --rbind "$src" "$R$dst"
  done

  # ---- ephemeral configuration (lands in the tmpfs upper layer only)
  local E=$R/etc/systemd g u
  tr -d - < /proc/sys/kernel/random/uuid > "$R/etc/machine-id"
  echo "$NAME" > "$R/etc/hostname"; hostname "$NAME"
  rm -rf "$E"/system/*.wants
  mkdir -p "$E/system-generators" "$E/journald.conf.d" "$E/system.conf.d"
  for g in /lib/systemd/system-generators/* /usr/lib/systemd/system-generators/* /etc/systemd/system-generators/*; do
    [ -e "$g" ] && ln -sf /dev/null "$E/system-generators/${g##*/}"
  done
  for u in /lib/systemd/system/*.wants/* /usr/lib/systemd/system/*.wants/*; do
    case ${u##*/} in
      systemd-journald.service|systemd-journald.socket|systemd-journald-dev-log.socket|dbus.socket|dbus.service) ;;
      *) { [ -e "$u" ] || [ -L "$u" ]; } && ln -sf /dev/null "$E/system/${u##*/}" ;;
    esac
  done
  cat > "$E/system/podunit-harness.target" <<'EOF'
[Unit]
Description=podunit test harness
Requires=basic.target dbus.socket systemd-journald.socket
After=basic.target dbus.socket systemd-journald.socket
AllowIsolate=yes
EOF
  printf '[Journal]\nStorage=volatile\nRateLimitIntervalSec=0\nRateLimitBurst=0\nRuntimeMaxUse=256M\n' \
    > "$E/journald.conf.d/podunit-harness.conf"
  printf '[Manager]\nDefaultTimeoutStopSec=10s\nDefaultTimeoutStartSec=30s\n' \
    > "$E/system.conf.d/podunit-harness.conf"

  cd "$R"; mkdir -p .harness-oldroot
  pivot_root . .harness-oldroot
  umount -n -l /.harness-oldroot; rmdir /.harness-oldroot; cd /
  exec env -i container=podunit-harness PATH="$PATH" LANG=C.UTF-8 \
    /lib/systemd/systemd --unit=podunit-harness.target --show-status=no
}

# ---------------------------------------------------------------- host ------
cleanup_cgroups() {  # rmdir the harness trees bottom-up; retries while tasks exit
  local D=$1 mp dir i left=0
  [ -f "$D/cgroups" ] || return 0
  while read -r mp dir; do
    for i in $(seq 100); do
      [ -d "$dir" ] || break
      find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$dir" ] || break
      sleep 0.05
    done
    [ -d "$dir" ] && { echo "podunit-harness: cgroup left behind: $dir" >&2; left=1; }
  done < "$D/cgroups"
  return $left
}

do_stop() {
  local D=$1 up p1 t0 i
  t0=$(now); up=$(unshare_pid "$D"); p1=$(inner_pid "$D")
  if alive "$p1"; then kill -s RTMIN+4 "$p1" 2>/dev/null || true; fi   # systemd: poweroff
  for i in $(seq $((STOP_TIMEOUT * 20))); do alive "$up" || alive "$p1" || break; sleep 0.05; done
  if alive "$p1" || alive "$up"; then
    echo "podunit-harness: graceful stop timed out, SIGKILL" >&2
    alive "$p1" && kill -KILL "$p1" 2>/dev/null || true   # kills the whole pid namespace
    alive "$up" && kill -KILL "$up" 2>/dev/null || true
    for i in $(seq 100); do alive "$up" || alive "$p1" || break; sleep 0.05; done
  fi
  local rc=0 p
  if [ -f "$D/shared" ]; then   # the --shared-bind mount points made on the host
    while read -r p; do
      grep -qF " $p " /proc/self/mountinfo && { umount -n -R "$p" || rc=1; }
    done < "$D/shared"
  fi
  cleanup_cgroups "$D" || rc=1
  # the mounts lived only in the dead namespace; never rm -rf through a live mount
  if grep -qF " $D/" /proc/self/mountinfo; then
    echo "podunit-harness: mounts still present under $D, not removing it" >&2; rc=1
  elif [ $rc = 0 ]; then
    rm -rf "$D"
  fi
  echo "podunit-harness: stopped in $(ms_since "$t0") ms" >&2
  return $rc
}

do_start() {
  local D=$1; shift
  local MODE=hybrid HOST_NET=0 HOST_IPC=0 NET_RW=0 RUN_TMPFS=0 TIMEOUT=30 BINDS="" SHARED=""
  while [ $# -gt 0 ]; do
    case $1 in
      --bind) [ $# -ge 2 ] || die "--bind needs an argument"
              local src=${2%%:*} dst=${2#*:}; src=$(realpath -e "$src") || die "no such path: $2"
              [ "$dst" = "$2" ] && dst=$src
              case "$src$dst" in *' '*) die "bind paths must not contain spaces";; esac
              BINDS="$BINDS $src:$dst"; shift 2 ;;
      --unified) MODE=unified; shift ;;
      --host-net) HOST_NET=1; shift ;;
      --host-ipc) HOST_IPC=1; shift ;;
      --net-rw) NET_RW=1; shift ;;
      --run-tmpfs) RUN_TMPFS=1; shift ;;
      --shared-bind) [ $# -ge 2 ] || die "--shared-bind needs an argument"
              src=$(realpath -e "$2") || die "no such path: $2"; [ -d "$src" ] || die "--shared-bind: not a directory: $2"
              case "$src" in *' '*) die "bind paths must not contain spaces";; esac
              SHARED="$SHARED $src"; BINDS="$BINDS $src:$src"; shift 2 ;;
      --timeout) TIMEOUT=$2; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  [ "$(id -u)" = 0 ] || die "must run as root"
  for t in unshare nsenter busctl pivot_root mknod md5sum; do command -v $t >/dev/null || die "missing $t"; done
  [ -x /lib/systemd/systemd ] || die "missing /lib/systemd/systemd"
  [ ${#D} -le 70 ] || die "DIR too long for unix socket paths (max 70 chars): $D"
  [ "$MODE" = unified ] || [ -n "$(v1_mounts)" ] || MODE=unified   # pure-v2 host (untested)
  if [ -e "$D" ]; then
    alive "$(unshare_pid "$D")" && die "$D: a harness is already running there"
    [ -f "$D/cgroups" ] || die "$D exists and is not a harness dir"
    do_stop "$D" 2>/dev/null || die "$D: stale harness could not be cleaned"
  fi
  local NAME; NAME=$(harness_name "$D")
  local t0; t0=$(now)
  mkdir -p "$D/run" "$D/ovl" "$D/root"; : > "$D/console.log"
  harness_cgroups "$NAME" > "$D/cgroups"
  local mp dir
  while read -r mp dir; do
    mkdir -p "$dir"
    if [ -f "$dir/cpuset.cpus" ] && [ -z "$(cat "$dir/cpuset.cpus")" ]; then   # v1 cpuset starts empty
      cat "${dir%/*}/cpuset.cpus" > "$dir/cpuset.cpus"; cat "${dir%/*}/cpuset.mems" > "$dir/cpuset.mems"
    fi
  done < "$D/cgroups"
  if [ "$MODE" = unified ] && [ -z "$(v1_mounts)" ]; then     # pure-v2 host: delegate what we can (untested here)
    dir=$(awk '{print $2}' "$D/cgroups")
    for c in $(cat "${dir%/*}/cgroup.controllers"); do echo "+$c" > "${dir%/*}/cgroup.subtree_control" 2>/dev/null || true; done
  fi
  [ "$NET_RW" = 0 ] || [ "$HOST_NET" = 1 ] || die "--net-rw only makes sense with --host-net"
  local propagation=private p
  : > "$D/shared"
  if [ "$RUN_TMPFS" = 1 ]; then   # stop unmounts it with the shared-bind points
    mount -n -t tmpfs -o mode=755,nosuid,nodev podunit-harness-run "$D/run" && echo "$D/run" >> "$D/shared" \
      || die "--run-tmpfs: mounting a tmpfs on $D/run failed"
  fi
  for p in $SHARED; do   # a shared mount point on the host, removed again by stop
    mount -n --bind "$p" "$p" && echo "$p" >> "$D/shared" && mount -n --make-shared "$p" || die "--shared-bind $p failed"
    propagation=unchanged
  done
  local nsflags=(--pid --mount --cgroup --uts)
  [ "$HOST_IPC" = 1 ] || nsflags+=(--ipc)
  [ "$HOST_NET" = 1 ] || nsflags+=(--net)
  (
    while read -r mp dir; do echo "$BASHPID" > "$dir/cgroup.procs"; done < "$D/cgroups"
    exec unshare "${nsflags[@]}" --propagation "$propagation" --kill-child -- \
      env MODE="$MODE" HOST_NET="$HOST_NET" NET_RW="$NET_RW" BINDS="$BINDS" SHARED="$SHARED" NAME="$NAME" \
      bash "$SELF" __inner "$D"
  ) < /dev/null >> "$D/console.log" 2>&1 &
  local launcher=$!; echo $launcher > "$D/unshare.pid"

  # ready = the manager answers on the system bus and finished booting
  local bus="unix:path=$D/run/dbus/system_bus_socket" state="" deadline=$(( $(now) + TIMEOUT * 1000000000 ))
  while [ "$(now)" -lt $deadline ]; do
    alive "$launcher" || break
    state=$(DBUS_SYSTEM_BUS_ADDRESS=$bus busctl get-property org.freedesktop.systemd1 /org/freedesktop/systemd1 \
            org.freedesktop.systemd1.Manager SystemState 2>/dev/null | tr -d '"' | awk '{print $2}') || true
    case $state in running|degraded) break ;; esac
    sleep 0.02
  done
  case $state in
    running|degraded)
      inner_pid "$D" > "$D/systemd.pid"
      echo "podunit-harness: systemd ready ($state, $MODE) in $(ms_since "$t0") ms" >&2
      print_env "$D" ;;
    *)
      echo "podunit-harness: systemd did not become ready (state='$state'); console:" >&2
      tail -n 40 "$D/console.log" >&2 || true
      do_stop "$D" >/dev/null 2>&1 || true
      return 1 ;;
  esac
}

do_exec() {
  local D=$1; shift
  local p1; p1=$(inner_pid "$D"); alive "$p1" || die "no harness running in $D"
  local ns=(-m -u -p -C) t
  for t in net:-n ipc:-i; do   # a namespace shared with the host needs no entering
    [ "$(readlink "/proc/$p1/ns/${t%%:*}")" = "$(readlink "/proc/self/ns/${t%%:*}")" ] || ns+=("${t#*:}")
  done
  exec nsenter -t "$p1" "${ns[@]}" -r -w -- env -i PATH="$PATH" TERM="${TERM:-dumb}" LANG=C.UTF-8 SYSTEMD_PAGER= "$@"
}

do_gc() {  # remove harness cgroup trees that contain no process at all (left by SIGKILLed runs)
  local mps dirs d name busy
  mps="$(v1_mounts | awk '{print $1}') $(v2_mount)"
  # shellcheck disable=SC2086
  for name in $(find $mps -type d -name 'podunit-harness-*' -prune 2>/dev/null | xargs -rn1 basename | sort -u); do
    dirs=$(find $mps -type d -name "$name" -prune 2>/dev/null)
    busy=0
    for d in $dirs; do
      find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | grep -q . && busy=1
    done
    if [ $busy = 1 ]; then echo "gc: $name is in use, kept" >&2; continue; fi
    for d in $dirs; do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; done
    echo "gc: removed $name" >&2
  done
}

cmd=${1:-}; [ $# -gt 0 ] && shift
case $cmd in
  start)   [ $# -ge 1 ] || die "usage: start DIR [options]"; D=$(realpath -m "$1"); shift; do_start "$D" "$@" ;;
  stop)    [ $# -eq 1 ] || die "usage: stop DIR"; do_stop "$(realpath -m "$1")" ;;
  exec)    [ $# -ge 2 ] || die "usage: exec DIR CMD..."; D=$(realpath -m "$1"); shift; do_exec "$D" "$@" ;;
  env)     [ $# -eq 1 ] || die "usage: env DIR"; print_env "$(realpath -m "$1")" ;;
  name)    [ $# -eq 1 ] || die "usage: name DIR"; harness_name "$(realpath -m "$1")" ;;
  gc)      do_gc ;;
  __inner) inner "$1" ;;
  *) sed -n '2,/^set -euo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
