#!/usr/bin/env bash
# A rank that stops (SIGSTOP: a debugger, a swapped-out or descheduled
# process) and comes back is no failure: 2 ranks run allreduces with
# timeout_ms 120000, rank 1 is stopped for STOP_S seconds mid-run (3 here;
# 30 with STOP_S=30, docs/reliability.md "A stopped rank"), then continued;
# the job must end well with every result right, over shared memory and
# over TCP (whose keepalive and user timeout are bounded at 10 s: a stopped
# process's kernel still answers for its sockets).
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"
stop_s="${STOP_S:-3}"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/sigstop.XXXXXX")"
trap 'rm -f "$out"' EXIT

# The pid of rank RANK among the descendants of pid P (timeout, then
# hcomm_run, then the ranks).
rank_pid() {
  local c
  for c in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$2"; then
      echo "$c"
      return 0
    fi
    rank_pid "$c" "$2" && return 0
  done
  return 1
}

for transports in shm tcp; do
  start="$(now)"
  HCOMM_TIMEOUT_MS=120000 HCOMM_TRANSPORTS="$transports" \
    timeout -k 5 $((stop_s + 200)) "$launcher" -n 2 --timeout $((stop_s + 180)) -- \
    "$bench" allreduce -b 8 -e 4K -f 8 -n 3000 -w 10 -c 1 --json >"$out" 2>&1 &
  launcher_pid=$!
  victim=""
  for _ in $(seq 100); do
    victim="$(rank_pid "$launcher_pid" 1)" && break
    sleep 0.02
  done
  [[ -n "$victim" ]] || fail "$transports: rank 1 never started"
  # Past init, once rank 0 has printed its first result: the allreduces run.
  for _ in $(seq 500); do
    grep -q '"op":"allreduce"' "$out" && break
    kill -0 "$victim" 2>/dev/null || break
    sleep 0.02
  done
  if ! kill -0 "$victim" 2>/dev/null || ! grep -q '"op":"allreduce"' "$out"; then
    wait "$launcher_pid"
    cat "$out"
    fail "$transports: the job ended (or never ran) before rank 1 could be stopped; raise -n"
  fi
  kill -STOP "$victim"
  echo "$transports: rank 1 (pid $victim) stopped $(elapsed "$start") s in, for $stop_s s"
  sleep "$stop_s"
  kill -CONT "$victim"
  wait "$launcher_pid"
  rc=$?
  cat "$out"
  echo "--- $transports: the job exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "$transports: a rank stopped for $stop_s s failed the job (exit $rc)"
  rows="$(grep -cE '^\[rank 0\] \{"op":"allreduce",.*"wrong":0[,}]' "$out")"
  [[ "$rows" -ge 4 ]] || fail "$transports: expected the 4 allreduce sizes with nothing wrong, got $rows"
  if grep -qE '"wrong":[1-9]' "$out"; then fail "$transports: wrong results"; fi
  if grep -qE 'HCOMM_ERR|FAIL' "$out"; then fail "$transports: an error was printed"; fi
done
echo "PASS: a rank stopped for $stop_s s and continued failed nothing (shm, tcp)"
