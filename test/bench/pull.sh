#!/usr/bin/env bash
# pull.sh — time pulling and unpacking a ~50 MB, 5-layer image from the local
# test registry through the CRI, for each endpoint given, in the same run.
#
#   bash test/bench/pull.sh [-n RUNS] NAME=ENDPOINT [NAME=ENDPOINT ...]
#   e.g. bash test/bench/pull.sh podunit=unix:///run/podunit/podunit.sock \
#          containerd=unix:///tmp/baseline/containerd.sock
#
# This is a benchmark, not a test: it prints per-run seconds, the mean and
# median per endpoint, and each endpoint's mean relative to the first one.
# The image is built here from random data (incompressible, so download and
# unpack both cost ~50 MB) and pushed once to the registry of
# shared/critest (127.0.0.1:5000) as podunit-bench/multilayer:50m; it is
# pulled as docker.io/podunit-bench/multilayer:50m, which the kit's
# registries.conf (podunit) and certs.d (containerd) send to that registry.
# Every run starts with the image removed, so each pull downloads everything.
set -euo pipefail

RUNS=5
if [[ ${1:-} == -n ]]; then RUNS=$2; shift 2; fi
(($# >= 1)) || { sed -n '2,8p' "$0" >&2; exit 2; }

REGISTRY=${PODUNIT_TEST_REGISTRY:-127.0.0.1:5000}
REPO=podunit-bench/multilayer
TAG=50m
IMAGE=docker.io/$REPO:$TAG
LAYERS=5
LAYER_MB=10

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

build_and_push() {
	if curl -fsS -o /dev/null "http://$REGISTRY/v2/$REPO/manifests/$TAG" \
		-H 'Accept: application/vnd.oci.image.manifest.v1+json'; then
		return
	fi
	log "building $REPO:$TAG ($LAYERS layers x ${LAYER_MB} MB random data)"
	local dir layout diffs="" layers="" i
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' RETURN
	layout=$dir/oci
	mkdir -p "$layout/blobs/sha256" "$dir/rootfs"
	for ((i = 1; i <= LAYERS; i++)); do
		rm -rf "$dir/rootfs" && mkdir -p "$dir/rootfs/data"
		head -c $((LAYER_MB * 1024 * 1024)) /dev/urandom >"$dir/rootfs/data/layer$i.bin"
		tar -C "$dir/rootfs" --numeric-owner --owner=0 --group=0 -cf "$dir/layer.tar" data
		gzip -1 -c "$dir/layer.tar" >"$dir/layer.tar.gz"
		local diff blob size
		diff=$(sha "$dir/layer.tar")
		blob=$(sha "$dir/layer.tar.gz")
		size=$(stat -c %s "$dir/layer.tar.gz")
		mv "$dir/layer.tar.gz" "$layout/blobs/sha256/$blob"
		diffs+="${diffs:+,}\"sha256:$diff\""
		layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$blob\",\"size\":$size}"
	done
	printf '{"architecture":"%s","os":"linux","config":{"Cmd":["/data"]},"rootfs":{"type":"layers","diff_ids":[%s]}}' \
		"$(dpkg --print-architecture)" "$diffs" >"$dir/config.json"
	local cfg cfgsize man mansize
	cfg=$(sha "$dir/config.json")
	cfgsize=$(stat -c %s "$dir/config.json")
	mv "$dir/config.json" "$layout/blobs/sha256/$cfg"
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[%s]}' \
		"$cfg" "$cfgsize" "$layers" >"$dir/manifest.json"
	man=$(sha "$dir/manifest.json")
	mansize=$(stat -c %s "$dir/manifest.json")
	mv "$dir/manifest.json" "$layout/blobs/sha256/$man"
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s"}}]}' \
		"$man" "$mansize" "$TAG" >"$layout/index.json"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
	skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$layout:$TAG" "docker://$REGISTRY/$REPO:$TAG"
}

crictl_() { crictl --runtime-endpoint "$1" --image-endpoint "$1" "${@:2}" 2>/dev/null; }

# by reference: `crictl images -q REF` is no filter on containerd 1.6 (it
# lists every image once another one, e.g. the pause image, is present)
remove_image() {
	if crictl_ "$1" inspecti "$IMAGE" >/dev/null; then
		crictl_ "$1" rmi "$IMAGE" >/dev/null
	fi
}

build_and_push

declare -a names means
for spec in "$@"; do
	name=${spec%%=*} endpoint=${spec#*=}
	crictl_ "$endpoint" version >/dev/null || { log "$name: no CRI at $endpoint"; exit 1; }
	times=()
	for ((r = 1; r <= RUNS; r++)); do
		remove_image "$endpoint"
		start=$(date +%s.%N)
		crictl_ "$endpoint" pull "$IMAGE" >/dev/null
		end=$(date +%s.%N)
		times+=("$(echo "$end - $start" | bc -l)")
	done
	remove_image "$endpoint"
	mean=$(printf '%s\n' "${times[@]}" | awk '{s += $1} END {printf "%.3f", s / NR}')
	median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%.3f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
	printf '%-12s runs: %s\n' "$name" "$(printf '%.3f ' "${times[@]}")"
	printf '%-12s mean %ss median %ss\n' "$name" "$mean" "$median"
	names+=("$name")
	means+=("$mean")
done
for ((i = 1; i < ${#names[@]}; i++)); do
	printf '%s/%s mean ratio: %s\n' "${names[i]}" "${names[0]}" "$(echo "scale=3; ${means[i]} / ${means[0]}" | bc -l)"
done
