#!/usr/bin/env bash
# make-shard.sh SPECS_TSV MAX_SECONDS — print the ratchet lists a run gives:
# with --all, every spec that passed (for expected-pass.txt); otherwise the
# passing specs that took at most MAX_SECONDS each (for shard.txt, the fast
# subset CI runs with SHARD=1). SPECS_TSV is run.sh's specs.tsv
# ("state<TAB>spec<TAB>message<TAB>seconds"). Sorted, one full name a line.
set -euo pipefail
all=0
if [[ ${1:-} == --all ]]; then all=1; shift; fi
specs=${1:?usage: make-shard.sh [--all] SPECS_TSV [MAX_SECONDS]}
max=${2:-30}
awk -F'\t' -v all="$all" -v max="$max" '$1 == "passed" && (all || $4 <= max) {print $2}' "$specs" | LC_ALL=C sort -u
