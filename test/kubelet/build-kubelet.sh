#!/usr/bin/env bash
# Builds a real kubelet from the k8s.io/kubernetes module the Go proxy serves
# and caches it, so the kubelet end-to-end test needs no other download.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod points every
# k8s.io/<staging> module at ./staging/src/..., which module consumers ignore,
# and requires them at v0.0.0. A scratch module that requires k8s.io/kubernetes
# and replaces each staging module by its published v0.<minor>.<patch> twin is
# the usual workaround.
#
# Usage: build-kubelet.sh [VERSION]   (default v1.37.2; prints the binary path)
# Env:   KUBELET_CACHE (default /var/cache/podunit-kubelet)
#
# Builds are serialized on $KUBELET_CACHE/.build.lock: `make test` starts one
# in the background (test/prebuild.sh) and the stage that needs the kubelet
# waits for it here instead of building a second copy beside it.
set -euo pipefail

version=${1:-${KUBELET_VERSION:-v1.37.2}}
cache=${KUBELET_CACHE:-/var/cache/podunit-kubelet}
out="$cache/kubelet-$version"

cached() { [[ -x $out ]] && "$out" --version 2>/dev/null | grep -qx "Kubernetes $version"; }
if cached; then
	echo "$out"
	exit 0
fi
mkdir -p "$cache"
exec {lock}>"$cache/.build.lock"
flock "$lock"
if cached; then
	echo "$out"
	exit 0
fi

command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
# the project's GOFLAGS (build tags) mean nothing to kubernetes
export GOFLAGS= GOWORK=off CGO_ENABLED=0

staging_version=v0.${version#v1.}
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

gomod=$(go mod download -json "k8s.io/kubernetes@$version" |
	sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -f $gomod ]] || { echo "build-kubelet: no go.mod for k8s.io/kubernetes@$version" >&2; exit 1; }
mapfile -t staging < <(sed -n 's#^\t\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$gomod")
((${#staging[@]} > 0)) || { echo "build-kubelet: no staging replaces found in $gomod" >&2; exit 1; }

cd "$work"
go mod init podunit.test/kubelet-build >/dev/null 2>&1
go mod edit -go="$(sed -n 's/^go //p' "$gomod")"
go mod edit -require="k8s.io/kubernetes@$version"
for m in "${staging[@]}"; do
	go mod edit -replace="$m=$m@$staging_version"
done
cat >tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
GO
echo "build-kubelet: resolving k8s.io/kubernetes@$version (${#staging[@]} staging modules at $staging_version)" >&2
go mod tidy >&2
# the same version stamp the release build puts in (kubelet --version, and the
# kubelet reports it to the runtime in its Version call)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$version") -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "build-kubelet: go build k8s.io/kubernetes/cmd/kubelet (several minutes on 2 cores)" >&2
# the release build's tags (hack/lib/golang.sh), which are also those of
# e2e_node.test (test/conformance/build.sh): with the same tags the packages
# both binaries share (grpc and all that imports it: most of pkg/kubelet) are
# compiled once, not once per binary
go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$ldflags" -o "$work/kubelet" k8s.io/kubernetes/cmd/kubelet >&2
"$work/kubelet" --version >&2
mv "$work/kubelet" "$out"
echo "$out"
