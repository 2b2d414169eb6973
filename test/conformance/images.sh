#!/usr/bin/env bash
# images.sh AGNHOST — the images the node e2e suite's [NodeConformance] specs
# pull, built offline as stand-ins and pushed to the critest kit's local
# registry under their original paths (registries.conf sends
# registry.k8s.io/* there). It reuses test/critest/images.sh (layers, OCI
# images, pushing); the layer trees are byte-identical to critest's, so the
# busybox and nginx layers are shared blobs in the registry.
#
# AGNHOST is the agnhost binary built from the same k8s.io/kubernetes module as
# the suite (build.sh); its version is in AGNHOST.version. The table, and how
# each stand-in differs from upstream, is in docs/conformance.md.
#
# Usage: images.sh AGNHOST [--list|--no-push|--stamp]
# Environment: as test/critest/images.sh; the scratch directory defaults to
#   /var/tmp/podunit-node-e2e-images (critest's stays untouched).
set -euo pipefail
: "${PODUNIT_IMAGES_WORKDIR:=/var/tmp/podunit-node-e2e-images}"
CONF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$CONF_DIR/../critest/images.sh"

AGNHOST=${1:?usage: images.sh AGNHOST [--list]}
AGNHOST_VERSION=$(cat "$AGNHOST.version" 2>/dev/null) || die "no $AGNHOST.version (build.sh writes it)"

# the versions are those of test/utils/image/manifest.go in k8s.io/kubernetes v1.37.2
NODE_E2E_TABLE=$(cat <<TABLE
busybox-nmeter    registry.k8s.io/e2e-test-images/busybox:1.37.0-2
agnhost           registry.k8s.io/e2e-test-images/agnhost:$AGNHOST_VERSION
agnhost           registry.k8s.io/e2e-test-images/agnhost:2.55
nginx             registry.k8s.io/e2e-test-images/nginx:1.27.0-2
nginx             registry.k8s.io/e2e-test-images/nginx:1.28.0-2
nonewprivs-1.4    registry.k8s.io/e2e-test-images/nonewprivs:1.4
nonroot           registry.k8s.io/e2e-test-images/nonroot:1.5
glibc-dns-testing registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1
pause:3.10.2      registry.k8s.io/pause:3.10.2
TABLE
)

# besides the critest kit's: glibc's hostname (glibc-dns-testing), curl,
# netcat-openbsd and bash (agnhost: the lifecycle hook and networking specs
# run curl and nc, the probe termination specs `/bin/bash -c`)
NODE_E2E_DEBS=(
	hostname
	curl libcurl4 libbrotli1 libgssapi-krb5-2 libidn2-0 libldap-2.5-0 libnghttp2-14 libpsl5
	librtmp1 libssh2-1 libk5crypto3 libkrb5-3 libkrb5support0 libunistring2 libgnutls30
	libsasl2-2 libhogweed6 libnettle8 libp11-kit0 libtasn1-6 libffi8 libgmp10 libkeyutils1 libcom-err2
	netcat-openbsd libbsd0 libmd0
	bash libtinfo6
)

node_e2e_trees() {
	local t
	# agnhost: the real program, laid out as test/images/agnhost/Dockerfile
	# does (/agnhost, /agnhost-2 -> agnhost, porter's TLS pair, /uploads, the
	# user and group the SupplementalGroups specs expect) on the busybox layer
	# (upstream: alpine with bind-tools, curl, netcat, iproute2, socat, bash;
	# here Debian's curl, netcat-openbsd and bash)
	t=$(new_tree agnhost)
	install -m 0755 "$AGNHOST" "$t/agnhost"
	ln -s agnhost "$t/agnhost-2"
	install -m 0644 "$KUBE_SRC/test/images/agnhost/porter/localhost.crt" "$t/localhost.crt"
	install -m 0644 "$KUBE_SRC/test/images/agnhost/porter/localhost.key" "$t/localhost.key"
	mkdir -p "$t/uploads" "$t/etc" "$t/home/user-defined-in-image"
	cp "$LAYERS/busybox/etc/passwd" "$LAYERS/busybox/etc/group" "$LAYERS/busybox/etc/shadow" "$t/etc/"
	echo 'user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh' >>"$t/etc/passwd"
	echo 'user-defined-in-image:!::0:99999:7:::' >>"$t/etc/shadow"
	echo 'user-defined-in-image:x:1000:' >>"$t/etc/group"
	echo 'group-defined-in-image:x:50000:user-defined-in-image' >>"$t/etc/group"
	chown 1000:1000 "$t/home/user-defined-in-image"
	install_elf "$t" usr/bin/curl "$LAYERS/busybox"
	install_elf "$t" bin/nc.openbsd "$LAYERS/busybox"
	install_elf "$t" bin/bash "$LAYERS/busybox"
	ln -s /bin/nc.openbsd "$t/usr/bin/nc" # before busybox's /bin/nc in PATH
	echo "agnhost $AGNHOST_VERSION (k8s.io/kubernetes/test/images/agnhost, static Go), /agnhost-2, porter TLS pair, user-defined-in-image (1000) in group-defined-in-image (50000), curl $(deb_version curl), netcat-openbsd $(deb_version netcat-openbsd), bash $(deb_version bash)" >"$t.desc"

	# nmeter: busybox 1.37's (and alpine's, agnhost's base) applet, which
	# Debian's busybox 1.35 lacks; the Containers Lifecycle specs time-stamp
	# their log lines with it, in busybox and in agnhost containers (the
	# image-update specs switch one to the other) (src/nmeter.c: %t, %Nt and
	# %% only)
	t=$(new_tree nmeter)
	mkdir -p "$t/bin"
	cc_static "$t/bin/nmeter" "$CONF_DIR/src/nmeter.c" -ffile-prefix-map="$CONF_DIR"=.
	echo "/bin/nmeter (src/nmeter.c, static): busybox nmeter's %t, %Nt, %%" >"$t.desc"

	# glibc-dns-testing: upstream is debian:bookworm-slim + dnsutils; the
	# specs run `sh -c 'echo $(hostname);$(hostname -f)'`: Debian's (glibc)
	# hostname over the busybox applet
	t=$(new_tree glibc-dns-testing)
	install_elf "$t" bin/hostname "$LAYERS/busybox"
	echo "hostname $(deb_version hostname) (Debian, glibc) over the busybox applet" >"$t.desc"
}

node_e2e_image() { # node_e2e_image KIND FIRST_REF: print the index digest
	local kind=$1 ref=$2
	case $kind in
	agnhost)           make_image "$ref" "$(jq -cn --arg p "$PATH_ENV" '{Env: [$p], Entrypoint: ["/agnhost"], Cmd: ["pause"],
		ExposedPorts: {"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}}')" busybox agnhost nmeter ;;
	# upstream nonewprivs 1.4: CMD ["nnp"], no USER (the kit's 1.3 has USER 1000)
	nonewprivs-1.4)    make_image "$ref" "$(jq -cn --arg p "$PATH_ENV" '{Env: [$p], Cmd: ["nnp"]}')" busybox nonewprivs ;;
	busybox-nmeter)    make_image "$ref" "$(cfg_sh)" busybox nmeter ;;
	nonroot)           make_image "$ref" "$(cfg_sh_user 1234)" busybox ;;
	glibc-dns-testing) make_image "$ref" "$(cfg_sh)" busybox glibc-dns-testing ;;
	*)                 build_image "$kind" "$ref" ;;
	esac
}

# node_e2e_stamp: what the pushed stand-ins are built from (these scripts, the
# C sources, agnhost's version); node_e2e_main pushes STAMP_REPO:<stamp> last
# and run.sh builds again when the registry lacks it (critest/lib.sh).
STAMP_REPO=podunit/node-e2e-stand-ins
node_e2e_stamp() {
	sources_stamp "$CONF_DIR/images.sh" "$CONF_DIR"/src/*.c "$KIT_DIR/images.sh" "$KIT_DIR"/src/*.c <(echo "$AGNHOST_VERSION")
}

node_e2e_main() {
	local list=0 push=1
	[[ ${2:-} == --stamp ]] && { node_e2e_stamp; return 0; }
	[[ ${2:-} == --list ]] && list=1
	[[ ${2:-} == --no-push ]] && push=0
	init_arch
	if ((list)); then
		local kind refs r
		while read -r kind refs; do
			for r in $refs; do printf '%-60s -> %s/%s\n' "$r" "$REG" "$(local_path "$r")"; done
		done <<<"$NODE_E2E_TABLE"
		return 0
	fi
	require_root
	lock_images
	ensure_packages gcc libc6-dev jq curl tar gzip coreutils findutils
	[[ -x $AGNHOST ]] || die "no agnhost binary at $AGNHOST"
	KUBE_SRC=$(GOFLAGS= GOWORK=off go mod download -json "k8s.io/kubernetes@${KUBE_VERSION:-v1.37.2}" | jq -r .Dir)
	[[ -d $KUBE_SRC/test/images/agnhost/porter ]] || die "no agnhost sources in $KUBE_SRC"
	umask 022
	mkdir -p "$WORK" "$PODUNIT_DEB_CACHE"
	rm -rf "$SYSROOT" "$SYSROOT_STATIC" "$LAYERS" "$OCI"
	mkdir -p "$LAYERS" "$BLOBS"
	: >"$WORK/debs.txt"
	log "fetching and unpacking .debs (cache: $PODUNIT_DEB_CACHE)"
	unpack_debs "$SYSROOT" "${DEBS[@]}" "${NODE_E2E_DEBS[@]}"
	unpack_debs "$SYSROOT_STATIC" "${DEBS_STATIC[@]}"
	LDSO=$(echo "$SYSROOT/lib/$MULTIARCH"/ld-linux*.so.*)
	[[ -x $LDSO ]] || die "no dynamic loader in the sysroot ($LDSO)"
	log "building layer trees"
	build_trees
	node_e2e_trees
	if [[ $PODUNIT_IMAGES_SELFTEST == 1 ]]; then
		selftest
		node_e2e_selftest
	fi

	log "writing images into the OCI layout $OCI"
	printf '{"imageLayoutVersion":"1.0.0"}' >"$OCI/oci-layout"
	local kind refs first digest r ref path
	: >"$WORK/images.txt"
	while read -r kind refs; do
		first=${refs%% *}
		digest=$(node_e2e_image "$kind" "$first")
		for r in $refs; do printf '%s %s %s\n' "$r" "$(local_path "$r")" "$digest" >>"$WORK/images.txt"; done
	done <<<"$NODE_E2E_TABLE"
	rm -f "$WORK"/tmp-*
	# last, so the stamp exists only once every image is pushed
	r=$(awk '$1 ~ /\/pause:/ {print $3; exit}' "$WORK/images.txt") # the smallest
	printf '%s %s %s\n' "$STAMP_REPO:$(node_e2e_stamp)" "$STAMP_REPO:$(node_e2e_stamp)" "$r" >>"$WORK/images.txt"
	((push)) || return 0

	start_registry
	log "pushing to $REG"
	while read -r ref path digest; do
		push_index "${path%:*}" "${path##*:}" "$digest"
		verify_ref "${path%:*}" "${path##*:}" "$digest"
	done <"$WORK/images.txt"
	log "pushed and verified $(wc -l <"$WORK/images.txt") references"
	echo "# original reference -> $REG path, index digest   (also in $WORK/images.txt)"
	while read -r ref path digest; do printf '%-60s %-50s %s\n' "$ref" "$path" "$digest"; done <"$WORK/images.txt"
}

# the agnhost subcommands the specs use, and glibc's hostname, run in the
# image's tree (chroot, private mount and PID namespace)
node_e2e_selftest() {
	local root=$WORK/selftest-node-e2e out
	rm -rf "$root"
	mkdir -p "$root"
	cp -a "$LAYERS/busybox/." "$root/"
	# (a plain cp would write through /bin/hostname, a hard link of busybox)
	cp -a --remove-destination "$LAYERS/agnhost/." "$LAYERS/glibc-dns-testing/." "$LAYERS/nmeter/." "$root/"
	in_root() {
		unshare --mount --pid --fork --mount-proc="$root/proc" /bin/sh -c \
			'mount --rbind /dev "$1/dev" && exec chroot "$1" /bin/sh -c "$2"' _ "$root" "$1"
	}
	out=$(in_root '/agnhost-2 entrypoint-tester a b 2>&1') || die "selftest: agnhost entrypoint-tester failed: $out"
	[[ $out == *"[/agnhost-2 entrypoint-tester a b]"* ]] || die "selftest: agnhost entrypoint-tester printed: $out"
	out=$(in_root 'echo hi >/tmp/f && /agnhost mounttest --file_content=/tmp/f 2>&1') || die "selftest: agnhost mounttest failed: $out"
	[[ $out == *"content of file \"/tmp/f\": hi"* ]] || die "selftest: agnhost mounttest printed: $out"
	out=$(in_root 'curl --version | head -n 1; nc -h 2>&1 | head -n 1') || die "selftest: curl or nc failed: $out"
	[[ $out == "curl "*$'\n'"OpenBSD netcat"* ]] || die "selftest: curl/nc printed: $out"
	out=$(in_root '/bin/bash -c "echo \$BASH_VERSION"') || die "selftest: bash failed: $out"
	[[ $out == [0-9]* ]] || die "selftest: /bin/bash printed '$out'"
	out=$(in_root 'id -G user-defined-in-image') || die "selftest: id failed"
	[[ $out == "1000 50000" ]] || die "selftest: user-defined-in-image has groups '$out'"
	out=$(in_root 'hostname >/dev/null && hostname --version 2>&1 | head -n 1') || die "selftest: hostname failed"
	[[ $out == "hostname "[0-9]* ]] || die "selftest: /bin/hostname is not Debian's hostname: $out"
	# the Containers Lifecycle specs' time stamp (container_lifecycle_pod_construction.go)
	out=$(in_root 'date -u +%FT$(nmeter -d0 '"'%3t'"' | head -n1)Z') || die "selftest: nmeter failed: $out"
	[[ $out =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$ ]] || die "selftest: the nmeter time stamp is '$out'"
	rm -rf "$root"
	log "selftest of the node e2e layer trees passed"
}

node_e2e_main "$@"
