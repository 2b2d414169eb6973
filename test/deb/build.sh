#!/bin/bash
# build.sh [--worktree] [OUTDIR]
#
# Builds the podunit .deb with `dpkg-buildpackage -us -uc -b` from a copy of
# the source tree, so the build (debian/podunit/, debian/build/, the .deb
# written next to the source) never touches the working tree others edit.
# By default the copy is the committed tree (git archive HEAD); --worktree
# copies the working tree's tracked and untracked-but-not-ignored files as
# they are now. Prints the .deb's path as the last line.
#
# Needs: debhelper (installed here if missing), Go at /usr/local/go/bin and the
# Go module proxy ($GOPROXY as set, or Go's default).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../critest/lib.sh
source "$repo/test/critest/lib.sh"

from=head
if [ "${1:-}" = "--worktree" ]; then
	from=worktree
	shift
fi
out=${1:-/var/tmp/podunit-deb}

require_root
ensure_packages debhelper dpkg-dev build-essential fakeroot

commit=$(git -C "$repo" rev-parse --short=12 HEAD)
if [ "$from" = worktree ] && [ -n "$(git -C "$repo" status --porcelain)" ]; then
	commit=$commit-dirty
fi

rm -rf "$out"
mkdir -p "$out/src"
if [ "$from" = head ]; then
	git -C "$repo" archive --format=tar HEAD | tar -x -C "$out/src"
else
	(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
		xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf -) | tar -x -C "$out/src"
fi

cd "$out/src"
PATH=/usr/local/go/bin:$PATH PODUNIT_GIT_COMMIT=$commit dpkg-buildpackage -us -uc -b >"$out/build.log" 2>&1 || {
	tail -n 60 "$out/build.log" >&2
	die "dpkg-buildpackage failed (full log: $out/build.log)"
}
deb=$(ls "$out"/podunit_*.deb)
[ -f "$deb" ] || die "no .deb in $out"
echo "$deb"
