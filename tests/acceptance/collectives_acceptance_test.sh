#!/usr/bin/env bash
# Runs collectives_acceptance through hcomm_run as 4, 3 and 1 ranks and checks
# that each job exits 0 and that every rank printed its final "ok: all".
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/acceptance/collectives_acceptance)" ||
  fail "collectives_acceptance not in the runfiles"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/collectives_acceptance.XXXXXX")"
trap 'rm -f "$out"' EXIT

for n in 4 3 1; do
  start="$(now)"
  # hcomm_run has its own --timeout; `timeout` is a backstop for the launcher.
  timeout -k 5 180 "$launcher" -n "$n" --timeout 120 -- "$prog" >"$out" 2>&1
  rc=$?
  cat "$out"
  echo "--- hcomm_run -n $n exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "hcomm_run -n $n -- collectives_acceptance exited $rc"
  for ((r = 0; r < n; r++)); do
    grep -qxF "[rank $r] ok: all" "$out" || fail "$n ranks: rank $r did not print 'ok: all'"
  done
  if grep -q 'FAIL' "$out"; then fail "$n ranks: a rank reported a failure"; fi
done
echo "PASS: collectives_acceptance on 4, 3 and 1 ranks"
