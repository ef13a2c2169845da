#!/usr/bin/env bash
# Runs p2p_acceptance as 4 ranks through hcomm_run and checks that the job
# exits 0 and that every rank printed its final "ok: all".
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/acceptance/p2p_acceptance)" || fail "p2p_acceptance not in the runfiles"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/p2p_acceptance.XXXXXX")"
trap 'rm -f "$out"' EXIT

start="$(now)"
# hcomm_run has its own --timeout; `timeout` is a backstop for the launcher.
timeout -k 5 180 "$launcher" -n 4 --timeout 120 -- "$prog" >"$out" 2>&1
rc=$?
cat "$out"
echo "--- hcomm_run exited $rc after $(elapsed "$start") s"

[[ $rc -eq 0 ]] || fail "hcomm_run -n 4 -- p2p_acceptance exited $rc"
for r in 0 1 2 3; do
  grep -qxF "[rank $r] ok: all" "$out" || fail "rank $r did not print 'ok: all'"
done
if grep -q 'FAIL' "$out"; then fail "a rank reported a failure"; fi
echo "PASS: all 4 ranks passed every check"
