#!/usr/bin/env bash
# Builds containerd 2.x (the daemon and the runc shim) from the module the Go
# proxy serves and caches both binaries, so `make bench` can run it beside
# Debian's containerd 1.6.20 with no other download.
#
# The module is built inside a copy of its own tree: its go.mod and go.sum pin
# every dependency, as in containerd's release build (a scratch module that
# required it would let MVS move them). Flags follow containerd's Makefile:
# containerd with cgo (-buildmode=pie, as Makefile.linux) and tag no_btrfs (no
# btrfs headers needed; the bench uses overlayfs); the shim static with
# CGO_ENABLED=0 and tag no_grpc (SHIM_CGO_ENABLED=0, SHIM_GO_BUILDTAGS).
#
# Usage: build-containerd2.sh [VERSION]   (default v2.4.2; prints the directory
#        holding containerd and containerd-shim-runc-v2)
# Env:   CONTAINERD2_CACHE (default /var/cache/podunit-containerd)
set -euo pipefail

version=${1:-${CONTAINERD2_VERSION:-v2.4.2}}
cache=${CONTAINERD2_CACHE:-/var/cache/podunit-containerd}
out="$cache/containerd-$version"
mod=github.com/containerd/containerd/v2

# the cache is good when both binaries are there and say the version
if [[ -x $out/containerd && -x $out/containerd-shim-runc-v2 ]] &&
	"$out/containerd" --version 2>/dev/null | grep -q " $mod $version " &&
	"$out/containerd-shim-runc-v2" -v 2>/dev/null | grep -qE "Version: +$version\$"; then
	echo "$out"
	exit 0
fi

command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
# the project's GOFLAGS (build tags) mean nothing to containerd
export GOFLAGS= GOWORK=off

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

info=$(go mod download -json "$mod@$version")
dir=$(jq -r '.Dir // empty' <<<"$info")
[[ -d $dir ]] || { echo "build-containerd2: no module directory for $mod@$version: $info" >&2; exit 1; }
# the commit the proxy recorded (containerd --version prints it; the release
# build takes it from git)
revision=$(jq -r '.Origin.Hash // empty' <<<"$info")
: "${revision:=$version}"

# the module cache is read-only; the build writes nothing into the tree, but
# a copy keeps the cache pristine whatever go decides to do
cp -a "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
x="-X $mod/version.Version=$version -X $mod/version.Revision=$revision -X $mod/version.Package=$mod"
echo "build-containerd2: go build $mod@$version ./cmd/containerd (cgo) and ./cmd/containerd-shim-runc-v2 (static); a few minutes on 2 cores" >&2
CGO_ENABLED=1 go build -trimpath -buildmode=pie -tags "urfave_cli_no_docs no_btrfs" \
	-ldflags "$x -s -w" -o "$work/bin/containerd" ./cmd/containerd >&2
CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_grpc" \
	-ldflags "$x -extldflags -static -s -w" -o "$work/bin/containerd-shim-runc-v2" ./cmd/containerd-shim-runc-v2 >&2
"$work/bin/containerd" --version >&2
"$work/bin/containerd-shim-runc-v2" -v >&2
rm -rf "$out"
mv "$work/bin" "$out"
echo "$out"
