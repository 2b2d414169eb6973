#!/usr/bin/env bash
# ratchet.sh SPECS_TSV EXPECTED [FOCUS [MIN_RUN]] — hold critest results to expected-pass.txt.
#
# SPECS_TSV: "state<TAB>full spec name<TAB>message" per spec (run.sh makes it from
# ginkgo's JSON report). EXPECTED: one full spec name per line, '#' comments.
# Fails when a listed spec did not pass, or is no longer in the suite (renamed
# upstream: fix the list). With FOCUS set, listed specs the focus left out
# (skipped with no reason) are not judged; MIN_RUN then says how many listed
# specs the focus must run, so a spec renamed out of the focus regex fails
# the run instead of quietly shrinking it. Passing specs that are not listed
# are printed so the list can grow; they never fail the run.
set -euo pipefail
specs=${1:?usage: ratchet.sh SPECS_TSV EXPECTED [FOCUS]}
expected=${2:?usage: ratchet.sh SPECS_TSV EXPECTED [FOCUS]}
focus=${3:-}
min_run=${4:-0}

awk -F'\t' -v focus="$focus" -v min_run="$min_run" '
	FILENAME == ARGV[1] {                         # expected-pass.txt (may be empty)
		sub(/[ \t]+$/, ""); sub(/^[ \t]+/, "")
		if ($0 == "" || $0 ~ /^#/) next
		listed[$0] = 1; order[++n] = $0; next
	}
	{ state[$2] = $1; msg[$2] = $3 }
	END {
		bad = 0; ok = 0; notrun = 0
		for (i = 1; i <= n; i++) {
			s = order[i]
			if (!(s in state)) { printf "ratchet: FAIL listed spec is not in the suite (renamed?): %s\n", s; bad++; continue }
			if (state[s] == "passed") { ok++; continue }
			if (focus != "" && state[s] == "skipped" && msg[s] == "") { notrun++; continue }
			printf "ratchet: FAIL listed spec %s: %s%s\n", state[s], s, (msg[s] != "" ? "  (" substr(msg[s], 1, 200) ")" : "")
			bad++
		}
		if (focus != "" && ok + bad < min_run) {
			printf "ratchet: FAIL the focus ran %d listed specs, fewer than the %d expected (a spec renamed out of the focus?)\n", ok + bad, min_run
			bad++
		}
		new = 0
		for (s in state) if (state[s] == "passed" && !(s in listed)) {
			printf "ratchet: passes but not listed in expected-pass.txt: %s\n", s; new++
		}
		printf "ratchet: %d listed, %d passed, %d not run (focus), %d broken, %d newly passing\n", n, ok, notrun, bad, new
		exit bad > 0
	}' "$expected" "$specs"
