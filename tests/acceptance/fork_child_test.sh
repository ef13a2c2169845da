#!/usr/bin/env bash
# Runs fork_child as 2 ranks through hcomm_run, over shared memory and over
# TCP: each rank forks a child that is refused its parent's communicator,
# lets go of the parent's handles and exits, and the parent's job must go on
# untouched (see fork_child.c). Every rank must print its final "ok: all".
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/acceptance/fork_child)" || fail "fork_child not in the runfiles"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/fork_child.XXXXXX")"
trap 'rm -f "$out"' EXIT

for transports in shm tcp; do
  start="$(now)"
  HCOMM_TRANSPORTS="$transports" timeout -k 5 120 "$launcher" -n 2 --timeout 60 -- "$prog" \
    >"$out" 2>&1
  rc=$?
  cat "$out"
  echo "--- $transports: hcomm_run exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "$transports: hcomm_run -n 2 -- fork_child exited $rc"
  for r in 0 1; do
    grep -qxF "[rank $r] ok: all" "$out" || fail "$transports: rank $r did not print 'ok: all'"
  done
done
echo "PASS: a fork's child leaves its parent's job alone, over shm and tcp"
