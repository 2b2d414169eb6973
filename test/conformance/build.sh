#!/usr/bin/env bash
# Builds the upstream node e2e suite from the k8s.io/kubernetes module the Go
# proxy serves and caches it: e2e_node.test (the [NodeConformance] specs and
# the services they start: embedded etcd, an in-process kube-apiserver), the
# ginkgo CLI of the suite's own ginkgo version, agnhost (the suite's test
# image program) and, next to e2e_node.test where the suite looks for it, the
# kubelet (test/kubelet/build-kubelet.sh builds and caches that one).
#
# The wrapper module is the one build-kubelet.sh uses: require
# k8s.io/kubernetes and replace each staging module by its published
# v0.<minor>.<patch> twin. `go mod tidy` does not follow a dependency's test
# imports, so `go test -c` runs with -mod=mod to fill go.sum for them.
#
# Usage: build.sh [VERSION]   (default v1.37.2; prints the cache directory)
# Env:   NODE_E2E_CACHE (default /var/cache/podunit-node-e2e), KUBELET_CACHE
#        (see build-kubelet.sh)
# Output: DIR/{e2e_node.test,kubelet,ginkgo,agnhost,agnhost.version} where
#         DIR=$NODE_E2E_CACHE/$VERSION
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

version=${1:-${KUBELET_VERSION:-v1.37.2}}
cache=${NODE_E2E_CACHE:-/var/cache/podunit-node-e2e}
out="$cache/$version"
bins=(e2e_node.test kubelet ginkgo agnhost agnhost.version)

complete() {
	local b
	for b in "${bins[@]}"; do [[ -s $out/$b ]] || return 1; done
	"$out/kubelet" --version 2>/dev/null | grep -qx "Kubernetes $version"
}
if complete; then
	echo "$out"
	exit 0
fi
# one build at a time (see build-kubelet.sh): a second caller waits for the
# first and then finds the cache complete
mkdir -p "$cache"
exec {lock}>"$cache/.build.lock"
flock "$lock"
if complete; then
	echo "$out"
	exit 0
fi

command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
kubelet=$(KUBELET_VERSION=$version bash "$HERE/../kubelet/build-kubelet.sh" "$version")

# the project's GOFLAGS (build tags) mean nothing to kubernetes
export GOFLAGS= GOWORK=off CGO_ENABLED=0
staging_version=v0.${version#v1.}
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

json=$(go mod download -json "k8s.io/kubernetes@$version")
gomod=$(sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p' <<<"$json")
srcdir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")
[[ -f $gomod && -d $srcdir ]] || { echo "node-e2e build: no module k8s.io/kubernetes@$version" >&2; exit 1; }
mapfile -t staging < <(sed -n 's#^\t\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$gomod")
((${#staging[@]} > 0)) || { echo "node-e2e build: no staging replaces found in $gomod" >&2; exit 1; }
# agnhost's version is the tag of the agnhost image this kubernetes version's
# specs use (test/utils/image/manifest.go: configs[Agnhost] = Config{..., "agnhost", "2.x"})
agnhost_version=$(sed -n 's/.*configs\[Agnhost\] = Config{[^}]*"agnhost", "\([0-9.]*\)"}.*/\1/p' \
	"$srcdir/test/utils/image/manifest.go")
[[ -n $agnhost_version ]] || { echo "node-e2e build: no agnhost version in test/utils/image/manifest.go" >&2; exit 1; }

cd "$work"
go mod init podunit.test/node-e2e-build >/dev/null 2>&1
go mod edit -go="$(sed -n 's/^go //p' "$gomod")"
go mod edit -require="k8s.io/kubernetes@$version"
for m in "${staging[@]}"; do
	go mod edit -replace="$m=$m@$staging_version"
done
cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e_node"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/system-validators/validators"
)
GO
echo "node-e2e build: resolving k8s.io/kubernetes@$version (${#staging[@]} staging modules at $staging_version)" >&2
go mod tidy >&2
# the release build stamps both version packages (hack/lib/version.sh); an
# unstamped in-process kube-apiserver would report v0.0.0-master
minor=$(cut -d. -f2 <<<"$version")
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
mkdir -p bin
echo "node-e2e build: go build ginkgo, agnhost $agnhost_version" >&2
go build -trimpath -o bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo >&2
go build -trimpath -ldflags="-s -w -X main.Version=$agnhost_version" -o bin/agnhost k8s.io/kubernetes/test/images/agnhost >&2
echo "node-e2e build: go test -c k8s.io/kubernetes/test/e2e_node (long on 2 cores)" >&2
# the tags hack/lib/golang.sh builds test binaries with
go test -c -mod=mod -vet=off -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$ldflags" \
	-o bin/e2e_node.test k8s.io/kubernetes/test/e2e_node >&2
cp "$kubelet" bin/kubelet
echo "$agnhost_version" >bin/agnhost.version
rm -rf "$out"
mv bin "$out"
echo "$out"
