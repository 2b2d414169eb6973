#!/usr/bin/env bash
# integration.sh — run every package's `integration`-tagged Go tests, one
# package at a time (2 cores), with the local test registry up: the image
# store, the Debian package and the fault tests pull from it.
#
# Usage: integration.sh PKG...   (PODUNIT_BINARY must name the built daemon)
# The registry is stopped again at the end when this run was its last user
# and a run started it (registry_hold in critest/lib.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/critest/lib.sh"
require_root
[[ $# -gt 0 ]] || die "no integration packages given"
: "${PODUNIT_BINARY:?set PODUNIT_BINARY to the podunit binary}"
: "${TAGS:?set TAGS to the build tags}"

registry_hold
trap registry_release EXIT
ensure_test_registry /var/tmp/podunit-integration-images.log

echo "PODUNIT_BINARY=$PODUNIT_BINARY go test -tags=$TAGS,integration -count=1 -p 1 -timeout 30m $*"
go test -tags="$TAGS,integration" -count=1 -p 1 -timeout 30m "$@"
