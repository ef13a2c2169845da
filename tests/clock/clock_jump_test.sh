#!/usr/bin/env bash
# A step of the wall clock changes no wait: every deadline in hcomm is on
# the monotonic clock (core/base/clock.h). Two ranks (tests/clock/
# clock_jump.c) run under libfaketime (Debian's faketime, tools/setup.sh),
# which steps what they read from CLOCK_REALTIME while CLOCK_MONOTONIC runs
# on; the step lands while rank 1 is blocked in a receive:
#   forward 3 h: a message that comes 3 s later, with timeout_ms 8000, is
#     received (a wall-clock deadline would have passed at the step);
#   back 3 h: a message that never comes, with timeout_ms 3000, times out
#     after 3 s (a wall-clock deadline would lie 3 h ahead: a hang).
# Over shared memory and over TCP. The jobs run under `timeout`, so a hang
# fails the test instead of stalling it.
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/clock/clock_jump)" || fail "clock_jump not in the runfiles"
faketime_lib="$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1)"
[[ -n "$faketime_lib" ]] || fail "libfaketime is missing: bash tools/setup.sh installs Debian's faketime"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/clock_jump.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# run_stepped TRANSPORTS STEP TIMEOUT_MS ARGS...: runs clock_jump ARGS on 2
# ranks, steps their wall clock by STEP ("+3h", "-3h") once rank 1 waits,
# and leaves the output in $work/out and the exit status in $rc.
run_stepped() {
  local transports="$1" step="$2" timeout_ms="$3" pid
  shift 3
  echo "+0" >"$work/offset"
  : >"$work/out"
  HCOMM_TIMEOUT_MS="$timeout_ms" HCOMM_TRANSPORTS="$transports" \
    timeout -k 5 40 "$launcher" -n 2 --timeout 35 -- \
    env LD_PRELOAD="$faketime_lib" FAKETIME_TIMESTAMP_FILE="$work/offset" \
    FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \
    "$prog" "$@" >"$work/out" 2>&1 &
  pid=$!
  for _ in $(seq 1000); do
    grep -q "rank 1: waiting" "$work/out" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  grep -q "rank 1: waiting" "$work/out" || { wait "$pid"; cat "$work/out"; fail "$transports: rank 1 never came to its wait"; }
  sleep 0.3  # into the receive
  echo "$step" >"$work/offset"
  wait "$pid"
  rc=$?
  cat "$work/out"
}

for transports in shm tcp; do
  start="$(now)"
  run_stepped "$transports" "+3h" 8000 late 3000
  [[ $rc -eq 0 ]] || fail "$transports: a wall clock stepped 3 h forward failed a receive due in 3 s (exit $rc)"
  took="$(grep -oE 'received 42 after [0-9.]+' "$work/out" | awk '{print $4}')"
  [[ -n "$took" ]] || fail "$transports: rank 1 never said when it received"
  echo "$transports: clock stepped 3 h forward: received after $took s (job $(elapsed "$start") s)"

  start="$(now)"
  run_stepped "$transports" "-3h" 3000 never
  [[ $rc -eq 0 ]] || fail "$transports: with the wall clock stepped 3 h back the job did not end well (exit $rc; 124: it hung)"
  took="$(grep -oE 'receive ended after [0-9.]+ s: HCOMM_ERR_TIMEOUT' "$work/out" | awk '{print $4}')"
  [[ -n "$took" ]] || fail "$transports: rank 1's receive did not end in TIMEOUT"
  awk -v t="$took" 'BEGIN { exit !(t >= 2.9 && t < 10) }' ||
    fail "$transports: a 3 s timeout ended after $took s with the clock stepped back"
  echo "$transports: clock stepped 3 h back: timeout_ms 3000 ended after $took s (job $(elapsed "$start") s)"
done
echo "PASS"
