#!/usr/bin/env bash
# images.sh — build, offline, every image that critest v1.37.0 (validation and
# benchmark suites) pulls, and push them to the local registry (registry.sh).
#
# Usage: images.sh [--no-push] [--list] [--stamp]
#   (no option)  build all images, start the registry if it is not running,
#                push, verify the pushed digests, print the image table
#   --no-push    build the OCI layout only (no registry needed)
#   --list       print "original-reference -> local-reference" and exit
#   --stamp      print the stamp of what the images are built from and exit
#
# How the images are made (no docker, no buildah, no network but Debian's apt):
#   * Debian .debs (busybox, busybox-static, nginx, procps, util-linux and the
#     libraries they link) are fetched with `apt-get download` into a cache and
#     unpacked with `dpkg-deb -x` into a scratch sysroot; nothing is installed
#     on the host except the build tools (gcc, libc6-dev, jq, curl).
#   * Each layer is a directory tree written as a tar with sorted names, mtime 0,
#     numeric owners (GNU format), gzip -n: the same .debs give the same digests.
#   * pause and the nonewprivs helper are tiny static C programs (src/).
#   * Config, manifest and a single-platform OCI image index (the upstream images
#     are multi-arch indexes too) are written with jq; blobs go into an OCI
#     layout at $PODUNIT_IMAGES_WORKDIR/oci, then are pushed with curl through
#     the registry HTTP API, so digests are exactly what was built.
#
# Every original image is stored in the registry under its original repository
# path without the registry host (what `reference.Path` gives), e.g.
#   registry.k8s.io/e2e-test-images/busybox:1.29-2 -> 127.0.0.1:5000/e2e-test-images/busybox:1.29-2
#   gcr.io/k8s-staging-cri-tools/test-image-tag:all -> 127.0.0.1:5000/k8s-staging-cri-tools/test-image-tag:all
#   public.ecr.aws/docker/library/busybox:1         -> 127.0.0.1:5000/docker/library/busybox:1
# and the runtime under test maps the original hosts to the local registry
# (registries.conf next to this script).
#
# Environment:
#   PODUNIT_TEST_REGISTRY     registry host:port           (default 127.0.0.1:5000)
#   PODUNIT_IMAGES_WORKDIR    scratch + OCI layout         (default /var/tmp/podunit-critest-images)
#   PODUNIT_DEB_CACHE         downloaded .debs (kept)      (default /var/cache/podunit-critest-debs)
#   PODUNIT_IMAGES_SELFTEST   0 to skip the chroot smoke test of the built trees (default 1)
set -euo pipefail
shopt -s inherit_errexit
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${PODUNIT_IMAGES_WORKDIR:=/var/tmp/podunit-critest-images}"
: "${PODUNIT_DEB_CACHE:=/var/cache/podunit-critest-debs}"
: "${PODUNIT_IMAGES_SELFTEST:=1}"

WORK=$PODUNIT_IMAGES_WORKDIR
REG=$PODUNIT_TEST_REGISTRY
SYSROOT=$WORK/sysroot            # unpacked .debs (glibc userland)
SYSROOT_STATIC=$WORK/sysroot-static # unpacked busybox-static (conflicts with busybox)
LAYERS=$WORK/layers
OCI=$WORK/oci
BLOBS=$OCI/blobs/sha256

# Debian packages unpacked into the sysroot. Binaries are copied out of it with
# exactly the shared libraries the sysroot's own ld.so resolves; a library that
# is missing here makes the build stop (it is never taken from the host).
DEBS=(
	busybox libc6                                   # busybox (dynamic build: no SH_STANDALONE)
	procps libproc2-0 libsystemd0 libcap2 libgcrypt20 # pgrep
	liblzma5 libzstd1 liblz4-1 libgpg-error0
	util-linux                                      # ipcs
	nginx nginx-common libssl3 libpcre2-8-0 zlib1g libcrypt1 # nginx
)
DEBS_STATIC=(busybox-static)

PATH_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# ---------------------------------------------------------------------------
# The image table. One line per image; several references on one line are
# the SAME image (same manifest, same image ID), pushed under each name.
#   kind | references...
# kind selects the recipe in build_image(); each line gets its own config
# (label io.podunit.critest.stand-in-for = its first reference), hence its own image ID.
IMAGE_TABLE=$(cat <<'EOF'
busybox        registry.k8s.io/e2e-test-images/busybox:1.29-2
nginx          registry.k8s.io/e2e-test-images/nginx:1.14-2
httpd          registry.k8s.io/e2e-test-images/httpd:2.4.39-4
nonewprivs     registry.k8s.io/e2e-test-images/nonewprivs:1.3
hostnet-nginx  gcr.io/k8s-staging-cri-tools/hostnet-nginx-ARCH:latest
file:test-image-1       gcr.io/k8s-staging-cri-tools/test-image-1:latest
file:test-image-2       gcr.io/k8s-staging-cri-tools/test-image-2:latest
file:test-image-3       gcr.io/k8s-staging-cri-tools/test-image-3:latest
file:test-image-latest  gcr.io/k8s-staging-cri-tools/test-image-latest:latest
file:test-image-digest  gcr.io/k8s-staging-cri-tools/test-image-digest:latest
file:same-image         gcr.io/k8s-staging-cri-tools/test-image-tags:1 gcr.io/k8s-staging-cri-tools/test-image-tags:2 gcr.io/k8s-staging-cri-tools/test-image-tags:3
file:test               gcr.io/k8s-staging-cri-tools/test-image-tag:test
file:all                gcr.io/k8s-staging-cri-tools/test-image-tag:all
user:1002               gcr.io/k8s-staging-cri-tools/test-image-user-uid:latest
user:www-data           gcr.io/k8s-staging-cri-tools/test-image-user-username:latest
user:1003:1004          gcr.io/k8s-staging-cri-tools/test-image-user-uid-group:latest
user:www-data:1004      gcr.io/k8s-staging-cri-tools/test-image-user-username-group:latest
predefined-group        gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest
pause:3.6               registry.k8s.io/pause:3.6
pause:3.7               registry.k8s.io/pause:3.7
pause:3.8               registry.k8s.io/pause:3.8
pause:3.9               registry.k8s.io/pause:3.9 k8s.gcr.io/pause:3.9
pause:3.10              registry.k8s.io/pause:3.10
pause:3.10.1            registry.k8s.io/pause:3.10.1
busybox                 public.ecr.aws/docker/library/busybox:1.35.0-glibc
busybox                 public.ecr.aws/docker/library/busybox:1-glibc
busybox                 public.ecr.aws/docker/library/busybox:1
busybox-static          public.ecr.aws/docker/library/busybox:1-uclibc
busybox-static          public.ecr.aws/docker/library/busybox:1-musl
busybox                 docker.io/library/busybox:latest docker.io/library/busybox:1.37.0
nginx                   docker.io/library/nginx:latest
EOF
)

# local_path REF: the registry path of an original reference (host stripped).
local_path() {
	local ref=$1 first=${1%%/*}
	if [[ $ref == */* && ( $first == *.* || $first == *:* || $first == localhost ) ]]; then
		ref=${ref#*/}
	fi
	echo "$ref"
}

# ---------------------------------------------------------------------------
# .deb fetching and unpacking

# deb_for PKG: set DEB_PATH to the cached .deb of PKG's candidate version,
# downloading it with apt-get if it is not cached yet. (Sets a variable rather
# than printing, so that apt_update_once runs at most once per script.)
deb_for() {
	local pkg=$1 ver f attempt
	ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/{print $2}')
	if [[ -z $ver || $ver == "(none)" ]]; then
		apt_update_once
		ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/{print $2}')
	fi
	[[ -n $ver && $ver != "(none)" ]] || die "no candidate version for Debian package $pkg"
	for attempt in 1 2; do
		for f in "$PODUNIT_DEB_CACHE/${pkg}_"*.deb; do
			[[ -e $f ]] || continue
			if [[ $(dpkg-deb -f "$f" Package) == "$pkg" && $(dpkg-deb -f "$f" Version) == "$ver" ]]; then
				DEB_PATH=$f
				return 0
			fi
		done
		((attempt == 1)) || break
		if ! (cd "$PODUNIT_DEB_CACHE" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$ver" >/dev/null 2>&1); then
			apt_update_once
			(cd "$PODUNIT_DEB_CACHE" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$ver" >/dev/null) ||
				die "apt-get download $pkg=$ver failed"
		fi
	done
	die "downloaded $pkg=$ver but cannot find it in $PODUNIT_DEB_CACHE"
}

unpack_debs() {
	local root=$1 deb pkg
	shift
	rm -rf "$root"
	mkdir -p "$root"
	for pkg in "$@"; do
		deb_for "$pkg"
		deb=$DEB_PATH
		dpkg-deb -x "$deb" "$root"
		printf '%s %s %s\n' "$pkg" "$(dpkg-deb -f "$deb" Version)" "$(sha256sum <"$deb" | cut -d' ' -f1)" >>"$WORK/debs.txt"
	done
}

# ---------------------------------------------------------------------------
# Copying binaries with their shared libraries out of the sysroot

# ldso_list BIN: print sysroot-relative paths of the ELF interpreter and all
# shared libraries BIN needs, resolved by the sysroot's own dynamic loader.
ldso_list() {
	local bin=$1 line path
	"$LDSO" --library-path "$SYSROOT/lib/$MULTIARCH:$SYSROOT/usr/lib/$MULTIARCH" --list "$bin" |
		while read -r line; do
			case $line in
			*"not found"*) die "$bin: $line (add the Debian package that has it to DEBS)" ;;
			/*"=>"*) # the ELF interpreter: "/lib64/ld-linux-x86-64.so.2 => <sysroot path>"
				path=${line%% *}; echo "${path#/}"; path=$(awk '{print $3}' <<<"$line") ;;
			*"=>"*) path=$(awk '{print $3}' <<<"$line") ;;
			/*) path=${line%% *}; echo "${path#/}"; continue ;;
			*) continue ;; # linux-vdso
			esac
			[[ $path == "$SYSROOT"/* ]] || die "$bin: $line resolved outside the sysroot (add its package to DEBS)"
			echo "${path#"$SYSROOT"/}"
		done
}

# copy_rel SRCROOT DSTROOT REL: copy REL (file or symlink, following the
# symlink chain so that every link target is copied too), keeping modes.
copy_rel() {
	local src=$1 dst=$2 rel=${3#/} target
	while :; do
		[[ -e $src/$rel || -L $src/$rel ]] || die "missing in $src: /$rel"
		if [[ ! -e $dst/$rel && ! -L $dst/$rel ]]; then
			mkdir -p "$dst/$(dirname "$rel")"
			cp -a "$src/$rel" "$dst/$rel"
		fi
		[[ -L $src/$rel ]] || return 0
		target=$(readlink "$src/$rel")
		if [[ $target == /* ]]; then rel=${target#/}; else rel=$(dirname "$rel")/$target; fi
		rel=$(realpath -m -s --relative-to=/ "/$rel")
	done
}

# install_elf DST REL [BASE]: copy sysroot binary REL and the libraries it
# needs into layer tree DST; libraries that layer tree BASE already has are
# skipped (they come from the lower layer).
install_elf() {
	local dst=$1 rel=${2#/} base=${3:-} lib libs
	copy_rel "$SYSROOT" "$dst" "$rel"
	libs=$(ldso_list "$SYSROOT/$rel") || die "cannot resolve the libraries of /$rel"
	for lib in $libs; do
		if [[ -n $base && ( -e $base/$lib || -L $base/$lib ) ]]; then continue; fi
		copy_rel "$SYSROOT" "$dst" "$lib"
	done
}

# ---------------------------------------------------------------------------
# Layer trees

new_tree() { # new_tree NAME: print the path of a fresh, empty layer tree
	rm -rf "${LAYERS:?}/$1"
	mkdir -p "$LAYERS/$1"
	echo "$LAYERS/$1"
}

write_etc_files() { # write_etc_files TREE: busybox-image style passwd/group
	local t=$1
	mkdir -p "$t/etc"
	cat >"$t/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
	cat >"$t/etc/group" <<'EOF'
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nobody:x:65534:
EOF
	cat >"$t/etc/shadow" <<'EOF'
root:*::0:::::
daemon:*::0:::::
bin:*::0:::::
sys:*::0:::::
sync:*::0:::::
mail:*::0:::::
www-data:*::0:::::
operator:*::0:::::
nobody:*::0:::::
EOF
	printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n' >"$t/etc/nsswitch.conf"
	chmod 0644 "$t/etc/passwd" "$t/etc/group" "$t/etc/nsswitch.conf"
	chmod 0640 "$t/etc/shadow"
}

skeleton() { # skeleton TREE: the directories of the busybox image
	local t=$1
	mkdir -p "$t"/{bin,dev,etc,home,proc,root,sys,tmp,usr/bin,usr/sbin,var/spool/mail,var/www}
	chmod 0700 "$t/root"
	chmod 1777 "$t/tmp"
}

# link_applets TREE BUSYBOX_RUNNER...: hard-link every applet into /bin (as the
# official busybox image does; hard links, not symlinks, so that masking
# /bin/ls with a bind mount masks only ls).
link_applets() {
	local t=$1 a
	shift
	for a in $("$@" --list); do
		[[ $a == busybox ]] && continue
		[[ -e $t/bin/$a ]] || ln "$t/bin/busybox" "$t/bin/$a"
	done
}

build_trees() {
	local t

	# busybox: Debian's dynamic busybox (its static build has SH_STANDALONE, so
	# `sh -c ls` would run the ls applet even with /bin/ls masked and critest's
	# MaskedPaths spec could never pass), glibc, real pgrep (procps) and ipcs
	# (util-linux), which busybox lacks.
	t=$(new_tree busybox)
	skeleton "$t"
	write_etc_files "$t"
	install_elf "$t" bin/busybox
	link_applets "$t" "$LDSO" --library-path "$SYSROOT/lib/$MULTIARCH" "$SYSROOT/bin/busybox"
	install_elf "$t" usr/bin/pgrep
	install_elf "$t" usr/bin/ipcs
	echo "busybox $(deb_version busybox) (Debian, glibc, hard-linked applets), pgrep from procps $(deb_version procps), ipcs from util-linux $(deb_version util-linux)" >"$t.desc"

	# busybox-static: the static Debian build, for the benchmark's -uclibc/-musl tags.
	t=$(new_tree busybox-static)
	skeleton "$t"
	write_etc_files "$t"
	cp -a "$SYSROOT_STATIC/bin/busybox" "$t/bin/busybox"
	link_applets "$t" "$t/bin/busybox"
	echo "busybox-static $(deb_version busybox-static) (Debian, static, hard-linked applets)" >"$t.desc"

	# nginx: Debian nginx on top of the busybox layer, laid out like the official
	# image (nginx -g 'daemon off;' as PID 1, logs to stdout/stderr, pid file at
	# /var/run/nginx.pid, user nginx uid 101).
	t=$(new_tree nginx)
	install_elf "$t" usr/sbin/nginx "$LAYERS/busybox"
	mkdir -p "$t"/etc/nginx/conf.d "$t"/usr/share/nginx/html "$t"/var/log/nginx "$t"/var/lib/nginx "$t"/var/cache/nginx "$t"/var/run
	cp "$SYSROOT/etc/nginx/mime.types" "$t/etc/nginx/mime.types"
	ln -s /dev/stdout "$t/var/log/nginx/access.log"
	ln -s /dev/stderr "$t/var/log/nginx/error.log"
	cat >"$t/etc/nginx/nginx.conf" <<'EOF'
# podunit critest kit: nginx.conf modelled on the official nginx image
user  nginx;
worker_processes  1;
error_log  /var/log/nginx/error.log notice;
pid        /var/run/nginx.pid;
events {
    worker_connections  1024;
}
http {
    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;
    log_format  main  '$remote_addr - $remote_user [$time_local] "$request" '
                      '$status $body_bytes_sent "$http_referer" '
                      '"$http_user_agent" "$http_x_forwarded_for"';
    access_log  /var/log/nginx/access.log  main;
    client_body_temp_path /var/cache/nginx/client_temp;
    proxy_temp_path       /var/cache/nginx/proxy_temp;
    fastcgi_temp_path     /var/cache/nginx/fastcgi_temp;
    uwsgi_temp_path       /var/cache/nginx/uwsgi_temp;
    scgi_temp_path        /var/cache/nginx/scgi_temp;
    sendfile        on;
    keepalive_timeout  65;
    include /etc/nginx/conf.d/*.conf;
}
EOF
	write_nginx_site "$t/etc/nginx/conf.d/default.conf" 80
	cat >"$t/usr/share/nginx/html/index.html" <<'EOF'
<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body>
<h1>Welcome to nginx!</h1>
<p>podunit critest kit stand-in for the e2e nginx image.</p>
</body>
</html>
EOF
	printf '<!DOCTYPE html>\n<html><head><title>Error</title></head><body><h1>An error occurred.</h1></body></html>\n' >"$t/usr/share/nginx/html/50x.html"
	# users: the busybox ones plus nginx (uid/gid 101, as in the official image)
	cp "$LAYERS/busybox/etc/passwd" "$LAYERS/busybox/etc/group" "$t/etc/"
	echo 'nginx:x:101:101:nginx:/nonexistent:/bin/false' >>"$t/etc/passwd"
	echo 'nginx:x:101:' >>"$t/etc/group"
	echo "nginx $(deb_version nginx) (Debian) with official-image layout" >"$t.desc"

	# hostnet-nginx: as images/hostnet-nginx in cri-tools: nginx listening on 12003.
	t=$(new_tree hostnet-nginx)
	mkdir -p "$t/etc/nginx/conf.d"
	write_nginx_site "$t/etc/nginx/conf.d/default.conf" 12003
	echo "conf.d/default.conf listening on 12003 (cri-tools images/hostnet-nginx)" >"$t.desc"

	# httpd: busybox httpd standing in for Apache httpd 2.4. The start script
	# logs a line with "httpd" in it (critest greps the container log for it).
	t=$(new_tree httpd)
	mkdir -p "$t/usr/local/apache2/htdocs" "$t/usr/local/apache2/logs" "$t/usr/local/bin"
	printf '<html><body><h1>It works!</h1></body></html>\n' >"$t/usr/local/apache2/htdocs/index.html"
	cat >"$t/usr/local/bin/httpd-foreground" <<'EOF'
#!/bin/sh
# podunit critest kit: busybox httpd standing in for Apache httpd 2.4 (httpd-foreground).
set -e
echo "httpd-foreground: starting httpd (busybox) on port 80, document root /usr/local/apache2/htdocs" >&2
exec httpd -f -v -p 80 -h /usr/local/apache2/htdocs
EOF
	chmod 0755 "$t/usr/local/bin/httpd-foreground"
	echo "busybox httpd on :80 serving /usr/local/apache2/htdocs (httpd-foreground)" >"$t.desc"

	# nonewprivs: static setuid-root helper printing its effective uid.
	t=$(new_tree nonewprivs)
	mkdir -p "$t/usr/local/bin"
	cc_static "$t/usr/local/bin/nnp" "$KIT_DIR/src/nnp.c"
	chown 0:0 "$t/usr/local/bin/nnp"
	chmod 4755 "$t/usr/local/bin/nnp"
	echo "setuid-root /usr/local/bin/nnp (src/nnp.c, static)" >"$t.desc"

	# test-image-predefined-group: as images/image-predefined-group in cri-tools
	# (adduser -u 1000 default-user; addgroup -g 50000 group-defined-in-image;
	# addgroup default-user group-defined-in-image).
	t=$(new_tree predefined-group)
	mkdir -p "$t/etc" "$t/home/default-user"
	cp "$LAYERS/busybox/etc/passwd" "$LAYERS/busybox/etc/group" "$LAYERS/busybox/etc/shadow" "$t/etc/"
	echo 'default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh' >>"$t/etc/passwd"
	echo 'default-user:!::0:99999:7:::' >>"$t/etc/shadow"
	echo 'default-user:x:1000:' >>"$t/etc/group"
	echo 'group-defined-in-image:x:50000:default-user' >>"$t/etc/group"
	chown 1000:1000 "$t/home/default-user"
	chmod 0755 "$t/home/default-user"
	echo "user default-user (1000) in group group-defined-in-image (50000)" >"$t.desc"
}

write_nginx_site() { # write_nginx_site FILE PORT
	cat >"$1" <<EOF
server {
    listen       $2;
    server_name  localhost;
    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }
    error_page   500 502 503 504  /50x.html;
    location = /50x.html {
        root   /usr/share/nginx/html;
    }
}
EOF
}

deb_version() { awk -v p="$1" '$1==p{print $2; exit}' "$WORK/debs.txt"; }

cc_static() { # cc_static OUT SRC [CFLAGS...]
	local out=$1 src=$2
	shift 2
	gcc -static -Os -s -ffile-prefix-map="$KIT_DIR"=. "$@" -o "$out" "$src"
}

file_tree() { # file_tree NAME: layer with one empty file /NAME (cri-tools images/image-test)
	local t
	t=$(new_tree "file-$1")
	: >"$t/$1"
	chmod 0644 "$t/$1"
	echo "ADD $1 /$1" >"$t.desc"
}

pause_tree() { # pause_tree VERSION
	local t
	t=$(new_tree "pause-$1")
	cc_static "$t/pause" "$KIT_DIR/src/pause.c" -DVERSION="\"$1\""
	chmod 0755 "$t/pause"
	[[ $("$t/pause" -v) == "pause.c $1 "* ]] || die "pause $1 does not run"
	echo "/pause $1 (src/pause.c, static)" >"$t.desc"
}

# ---------------------------------------------------------------------------
# Blobs, layers, configs, manifests, indexes

# put_blob FILE: move FILE into the OCI layout, print its digest
put_blob() {
	local f=$1 hex
	hex=$(sha256sum <"$f" | cut -d' ' -f1)
	mv -f "$f" "$BLOBS/$hex"
	echo "sha256:$hex"
}

# pack_layer NAME: tar (sorted, mtime 0, numeric owners) + gzip -n the tree;
# record digest, diff_id, size and description in $LAYERS/NAME.json
pack_layer() {
	local name=$1 dir=$LAYERS/$1 tar=$WORK/tmp-layer.tar diffid digest
	[[ -f $LAYERS/$name.json ]] && return 0
	(cd "$dir" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"$WORK/tmp-filelist"
	tar --create --file="$tar" --directory="$dir" --no-recursion --verbatim-files-from \
		--files-from="$WORK/tmp-filelist" --format=gnu --numeric-owner --mtime=@0
	diffid=sha256:$(sha256sum <"$tar" | cut -d' ' -f1)
	gzip -n -9 <"$tar" >"$tar.gz"
	rm -f "$tar"
	digest=$(put_blob "$tar.gz")
	jq -n --arg digest "$digest" --arg diffid "$diffid" --argjson size "$(stat -c %s "$BLOBS/${digest#sha256:}")" \
		--arg desc "$(cat "$dir.desc")" '{digest:$digest,diff_id:$diffid,size:$size,desc:$desc}' >"$LAYERS/$name.json"
}

# make_image STANDIN_FOR CONFIG_JSON LAYER...: write config, manifest and a
# one-platform index; print the index digest.
make_image() {
	local standin=$1 cfg=$2 layers_json cfgfile=$WORK/tmp-config.json man=$WORK/tmp-manifest.json idx=$WORK/tmp-index.json
	shift 2
	local l
	for l in "$@"; do pack_layer "$l"; done
	layers_json=$(for l in "$@"; do cat "$LAYERS/$l.json"; done | jq -cs .)
	jq -cnS --arg arch "$ARCH" --argjson cfg "$cfg" --argjson layers "$layers_json" --arg standin "$standin" '{
		architecture: $arch, os: "linux", created: "1970-01-01T00:00:00Z",
		config: ($cfg | .Labels = ((.Labels // {}) + {
			"io.podunit.critest.stand-in-for": $standin,
			"org.opencontainers.image.source": "podunit test/critest/images.sh"})),
		rootfs: {type: "layers", diff_ids: [$layers[].diff_id]},
		history: [$layers[] | {created: "1970-01-01T00:00:00Z", created_by: ("podunit critest kit: " + .desc)}]
	}' >"$cfgfile"
	local cfgsize cfgdigest mansize mandigest
	cfgsize=$(stat -c %s "$cfgfile")
	cfgdigest=$(put_blob "$cfgfile")
	jq -cn --arg cd "$cfgdigest" --argjson cs "$cfgsize" --argjson layers "$layers_json" '{
		schemaVersion: 2,
		mediaType: "application/vnd.oci.image.manifest.v1+json",
		config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs},
		layers: [$layers[] | {mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: .digest, size: .size}]
	}' >"$man"
	mansize=$(stat -c %s "$man")
	mandigest=$(put_blob "$man")
	jq -cn --arg md "$mandigest" --argjson ms "$mansize" --arg arch "$ARCH" '{
		schemaVersion: 2,
		mediaType: "application/vnd.oci.image.index.v1+json",
		manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $md, size: $ms,
			platform: {architecture: $arch, os: "linux"}}]
	}' >"$idx"
	put_blob "$idx"
}

# config objects ("config" member of the image configuration)
cfg_sh()         { jq -cn --arg p "$PATH_ENV" '{Env: [$p], Cmd: ["sh"]}'; }
cfg_sh_user()    { jq -cn --arg p "$PATH_ENV" --arg u "$1" '{Env: [$p], Cmd: ["sh"], User: $u}'; }
cfg_nginx()      { jq -cn --arg p "$PATH_ENV" --arg port "$1/tcp" '{Env: [$p], Cmd: ["nginx", "-g", "daemon off;"], ExposedPorts: {($port): {}}, StopSignal: "SIGTERM"}'; }
cfg_httpd()      { jq -cn '{Env: ["PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HTTPD_PREFIX=/usr/local/apache2"], Cmd: ["httpd-foreground"], WorkingDir: "/usr/local/apache2", ExposedPorts: {"80/tcp": {}}}'; }
cfg_nonewprivs() { jq -cn --arg p "$PATH_ENV" '{Env: [$p], Entrypoint: ["/usr/local/bin/nnp"], User: "1000"}'; }
cfg_pause()      { jq -cn '{Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], Entrypoint: ["/pause"], User: "65535:65535"}'; }

# build_image KIND FIRST_REF: print the index digest for one table line
build_image() {
	local kind=$1 ref=$2
	case $kind in
	busybox)          make_image "$ref" "$(cfg_sh)" busybox ;;
	busybox-static)   make_image "$ref" "$(cfg_sh)" busybox-static ;;
	nginx)            make_image "$ref" "$(cfg_nginx 80)" busybox nginx ;;
	hostnet-nginx)    make_image "$ref" "$(cfg_nginx 12003)" busybox nginx hostnet-nginx ;;
	httpd)            make_image "$ref" "$(cfg_httpd)" busybox httpd ;;
	nonewprivs)       make_image "$ref" "$(cfg_nonewprivs)" busybox nonewprivs ;;
	predefined-group) make_image "$ref" "$(cfg_sh_user 1000)" busybox predefined-group ;;
	file:*)           file_tree "${kind#file:}"; make_image "$ref" "$(cfg_sh)" busybox "file-${kind#file:}" ;;
	user:*)           make_image "$ref" "$(cfg_sh_user "${kind#user:}")" busybox ;;
	pause:*)          pause_tree "${kind#pause:}"; make_image "$ref" "$(cfg_pause)" "pause-${kind#pause:}" ;;
	*) die "unknown image kind $kind" ;;
	esac
}

# ---------------------------------------------------------------------------
# Smoke test of the layer trees (chroot, no namespaces): catches a missing
# library or applet before anything is pushed.
selftest() {
	local root=$WORK/selftest out t
	rm -rf "$root"
	mkdir -p "$root"
	cp -a "$LAYERS/busybox/." "$root/"
	cp -a "$LAYERS/nginx/." "$LAYERS/httpd/." "$LAYERS/nonewprivs/." "$root/"
	# in_root SCRIPT: run SCRIPT with the image's /bin/sh in a private mount
	# and PID namespace (fresh /proc, host /dev bind-mounted; all gone on exit)
	in_root() {
		unshare --mount --pid --fork --mount-proc="$root/proc" /bin/sh -c \
			'mount --rbind /dev "$1/dev" && exec chroot "$1" /bin/sh -c "$2"' _ "$root" "$1"
	}
	out=$(in_root 'ls / >/dev/null && id -u www-data && id -u nobody && seq 1 3 | tr -d "\n"; echo') ||
		die "selftest: busybox sh/ls/id/seq failed"
	[[ $out == $'33\n65534\n123' ]] || die "selftest: unexpected busybox output: $out"
	out=$(in_root 'PATH=/nonexistent; ls' 2>&1 || true)
	[[ $out == *"not found"* ]] || die "selftest: busybox sh runs applets without PATH (SH_STANDALONE): $out"
	out=$(in_root 'pgrep sleep || true' 2>&1) || die "selftest: pgrep failed"
	[[ -z $out ]] || die "selftest: 'pgrep sleep || true' printed: $out"
	# until the child has exec'd, its name is still sh: a loaded machine
	# runs pgrep first
	out=$(in_root 'sleep 30 & for i in 1 2 3 4 5 6 7 8 9 10; do pgrep sleep && break; sleep 0.2; done; kill $!' 2>&1) ||
		die "selftest: pgrep failed"
	[[ $out =~ ^[0-9]+$ ]] || die "selftest: pgrep did not find sleep: $out"
	out=$(in_root 'ipcs -m' 2>&1) || die "selftest: ipcs -m failed: $out"
	[[ $out == *"Shared Memory Segments"* ]] || die "selftest: ipcs -m printed: $out"
	in_root 'nginx -t -q' || die "selftest: nginx -t failed"
	out=$(chroot --userspec=1000:1000 "$root" /usr/local/bin/nnp) || die "selftest: nnp failed"
	[[ $out == "Effective uid: 0" ]] || die "selftest: nnp printed '$out' (setuid bit lost?)"
	"$LAYERS/busybox-static/bin/sh" -c 'true' || die "selftest: static busybox failed"
	rm -rf "$root"
	log "selftest of the layer trees passed"
}

# ---------------------------------------------------------------------------
# Pushing

# push_blob REPO DIGEST: upload a blob unless the repository already has it
push_blob() {
	local repo=$1 digest=$2 loc sep
	if curl -fsS -o /dev/null -I "http://$REG/v2/$repo/blobs/$digest" 2>/dev/null; then return 0; fi
	loc=$(curl -fsS -X POST -D - -o /dev/null "http://$REG/v2/$repo/blobs/uploads/" |
		awk 'tolower($1)=="location:"{print $2}' | tr -d '\r')
	[[ -n $loc ]] || die "registry gave no upload location for $repo"
	[[ $loc == /* ]] && loc="http://$REG$loc"
	sep='?'
	[[ $loc == *\?* ]] && sep='&'
	curl -fsS -X PUT -H 'Content-Type: application/octet-stream' \
		--data-binary @"$BLOBS/${digest#sha256:}" -o /dev/null "$loc${sep}digest=$digest" ||
		die "upload of $digest to $repo failed"
}

# put_manifest REPO REFERENCE DIGEST: PUT a manifest/index blob, check the digest
put_manifest() {
	local repo=$1 ref=$2 digest=$3 file mt got
	file=$BLOBS/${digest#sha256:}
	mt=$(jq -r .mediaType "$file")
	got=$(curl -fsS -X PUT -H "Content-Type: $mt" --data-binary @"$file" -D - -o /dev/null \
		"http://$REG/v2/$repo/manifests/$ref" | awk 'tolower($1)=="docker-content-digest:"{print $2}' | tr -d '\r') ||
		die "PUT manifest $repo:$ref failed"
	[[ $got == "$digest" ]] || die "registry stored $repo:$ref as $got, expected $digest"
}

# push_index REPO TAG INDEX_DIGEST
push_index() {
	local repo=$1 tag=$2 idx=$3 m l
	for m in $(jq -r '.manifests[].digest' "$BLOBS/${idx#sha256:}"); do
		for l in $(jq -r '.config.digest, .layers[].digest' "$BLOBS/${m#sha256:}"); do
			push_blob "$repo" "$l"
		done
		put_manifest "$repo" "$m" "$m"
	done
	put_manifest "$repo" "$tag" "$idx"
}

verify_ref() { # verify_ref REPO TAG DIGEST: the registry serves TAG as DIGEST
	local got
	got=$(curl -fsS -I -H 'Accept: application/vnd.oci.image.index.v1+json' \
		"http://$REG/v2/$1/manifests/$2" | awk 'tolower($1)=="docker-content-digest:"{print $2}' | tr -d '\r')
	[[ $got == "$3" ]] || die "verify: $1:$2 is '$got', expected $3"
}

# ---------------------------------------------------------------------------

init_arch() { # set ARCH (Debian's name) and MULTIARCH (the library directory)
	ARCH=$(dpkg --print-architecture)
	case $ARCH in
	amd64) MULTIARCH=x86_64-linux-gnu ;;
	arm64) MULTIARCH=aarch64-linux-gnu ;;
	*) die "unsupported architecture $ARCH" ;;
	esac
}

# lock_images: one build at a time on a machine. Every run (critest, the
# kubelet e2e, node conformance, bench, a VM run) writes the same layout
# and sysroot under /var/tmp and pushes to the same registry: two builds at
# once delete each other's files. The lock goes with the process; the
# registry started under it must not inherit it (start_registry).
lock_images() {
	exec {IMAGES_LOCK}>/run/lock/podunit-test-images.lock
	flock "$IMAGES_LOCK"
}

# critest_stamp: what the pushed images are built from (this script and its
# C sources); main pushes CRITEST_STAMP_REPO:<stamp> last (lib.sh).
critest_stamp() {
	sources_stamp "$KIT_DIR/images.sh" "$KIT_DIR"/src/*.c
}

start_registry() {
	registry_up || bash "$KIT_DIR/registry.sh" start {IMAGES_LOCK}>&-
}

table_refs() { # print "kind ref" for every reference in the table
	local kind refs r
	while read -r kind refs; do
		[[ -n $kind ]] || continue
		for r in $refs; do echo "$kind ${r//-ARCH:/-$ARCH:}"; done
	done <<<"$IMAGE_TABLE"
}

main() {
	local push=1 list=0
	while (($#)); do
		case $1 in
		--no-push) push=0 ;;
		--list) list=1 ;;
		--stamp) critest_stamp; exit 0 ;;
		-h | --help) sed -n '2,40p' "$0"; exit 0 ;;
		*) die "unknown option $1" ;;
		esac
		shift
	done

	init_arch

	if ((list)); then
		local kind ref
		table_refs | while read -r kind ref; do
			printf '%-70s -> %s/%s\n' "$ref" "$REG" "$(local_path "$ref")"
		done
		exit 0
	fi

	require_root
	lock_images
	ensure_packages gcc libc6-dev jq curl tar gzip coreutils findutils
	umask 022
	mkdir -p "$WORK" "$PODUNIT_DEB_CACHE"
	rm -rf "$SYSROOT" "$SYSROOT_STATIC" "$LAYERS" "$OCI"
	mkdir -p "$LAYERS" "$BLOBS"
	: >"$WORK/debs.txt"

	log "fetching and unpacking .debs (cache: $PODUNIT_DEB_CACHE)"
	unpack_debs "$SYSROOT" "${DEBS[@]}"
	unpack_debs "$SYSROOT_STATIC" "${DEBS_STATIC[@]}"
	LDSO=$(echo "$SYSROOT/lib/$MULTIARCH"/ld-linux*.so.*)
	[[ -x $LDSO ]] || die "no dynamic loader in the sysroot ($LDSO)"

	log "building layer trees"
	build_trees
	if [[ $PODUNIT_IMAGES_SELFTEST == 1 ]]; then selftest; fi

	log "writing images into the OCI layout $OCI"
	printf '{"imageLayoutVersion":"1.0.0"}' >"$OCI/oci-layout"
	local kind refs first digest r ref path
	: >"$WORK/images.txt"
	while read -r kind refs; do
		[[ -n $kind ]] || continue
		refs=${refs//-ARCH:/-$ARCH:}
		first=${refs%% *}
		digest=$(build_image "$kind" "$first")
		for r in $refs; do
			printf '%s %s %s\n' "$r" "$(local_path "$r")" "$digest" >>"$WORK/images.txt"
		done
	done <<<"$IMAGE_TABLE"
	# index.json of the layout: every original reference (containerd's
	# `ctr images import` reads io.containerd.image.name)
	while read -r ref path digest; do
		jq -cn --arg ref "$ref" --arg d "$digest" --argjson s "$(stat -c %s "$BLOBS/${digest#sha256:}")" '{
			mediaType: "application/vnd.oci.image.index.v1+json", digest: $d, size: $s,
			annotations: {"org.opencontainers.image.ref.name": $ref, "io.containerd.image.name": $ref}}'
	done <"$WORK/images.txt" | jq -s '{schemaVersion: 2, manifests: .}' >"$OCI/index.json"
	rm -f "$WORK"/tmp-*

	if ((push)); then
		start_registry
		log "pushing to $REG"
		local ref path repo tag
		while read -r ref path digest; do
			repo=${path%:*}
			tag=${path##*:}
			push_index "$repo" "$tag" "$digest"
			verify_ref "$repo" "$tag" "$digest"
		done <"$WORK/images.txt"
		# last, so the stamp exists only once every image is pushed
		digest=$(awk '$2 ~ /^pause:/ {print $3; exit}' "$WORK/images.txt")
		[[ -n $digest ]] || die "no pause image to carry the stamp"
		push_index "$CRITEST_STAMP_REPO" "$(critest_stamp)" "$digest"
		log "pushed and verified $(wc -l <"$WORK/images.txt") references, stamp $CRITEST_STAMP_REPO:$(critest_stamp)"
	fi

	echo "# original reference -> $REG path, index digest   (also in $WORK/images.txt)"
	while read -r ref path digest; do printf '%-72s %-58s %s\n' "$ref" "$path" "$digest"; done <"$WORK/images.txt"
	echo "# Debian packages used (also in $WORK/debs.txt):"
	sed 's/^/#   /' "$WORK/debs.txt"
}

# test/conformance/images.sh sources this file for its functions
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
