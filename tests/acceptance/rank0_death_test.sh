#!/usr/bin/env bash
# Rank 0's death (docs/reliability.md, "Rank 0's death"). Rank 0 serves the
# rendezvous store; ranks are started by hand, as in peer_failure_test.
#   1. after init, over shared memory and over TCP: 3 ranks; rank 0 is
#      SIGKILLed once a barrier is done. Ranks 1 and 2 must see
#      PEER_FAILURE from it, still exchange messages, fail a barrier and an
#      allreduce with PEER_FAILURE naming rank 0, and get a hang report
#      without the store (peer_failure rank0-dies checks each).
#   2. during init: ranks 0 and 1 of a job of 3 start (rank 2 never does);
#      rank 0 is SIGKILLed once rank 1 has joined its store (read the job
#      there). Rank 1's init must fail within 10 s (timeout_ms is 30 s),
#      naming rank 0 and the store (peer_failure init-only checks it).
# Every wait is bounded; readiness is signalled through files and output.
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

prog="$(runfile tests/acceptance/peer_failure)" || fail "peer_failure not in the runfiles"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/rank0_death.XXXXXX")"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  { wait; } 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS \
  HCOMM_RANK HCOMM_WORLD_SIZE HCOMM_STORE_ADDR HCOMM_JOB_TOKEN HCOMM_TIMEOUT_MS \
  HCOMM_CHECK_COLLECTIVES

show_logs() {
  local f
  for f in "$@"; do echo "----- $(basename "$f")"; cat "$f"; done
}

# start_rank LOG RANK WORLD PORT TOKEN ARGS...: its pid in $last_pid.
start_rank() {
  local log="$1" rank="$2" world="$3" port="$4" token="$5"
  shift 5
  HCOMM_RANK="$rank" HCOMM_WORLD_SIZE="$world" HCOMM_STORE_ADDR="127.0.0.1:$port" \
    HCOMM_JOB_TOKEN="$token" HCOMM_TIMEOUT_MS=30000 \
    "$prog" "$@" >"$log" 2>&1 </dev/null &
  last_pid=$!
  pids+=("$last_pid")
}

expect_exit() {
  local name="$1" pid="$2" secs="$3" rc=0
  shift 3
  wait_pid "$pid" "$secs" || rc=$?
  if [[ $rc -ne 0 ]]; then
    show_logs "$@"
    if [[ $rc -eq 124 ]]; then fail "$name did not finish within $secs s"; fi
    fail "$name exited $rc"
  fi
}

token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# --- 1. after init ----------------------------------------------------------
after_init() {
  local transport="$1" dir="$work/after-$1" port tok r0 r1 r2
  echo "=== rank 0 dies after init, over $transport"
  if [[ "$transport" == tcp ]]; then export HCOMM_TRANSPORTS=tcp; else unset HCOMM_TRANSPORTS; fi
  mkdir -p "$dir"
  port="$(free_port)" || fail "no free port"
  tok="$(token)"
  start_rank "$dir/r0.log" 0 3 "$port" "$tok" rank0-dies "$dir"; r0=$last_pid
  start_rank "$dir/r1.log" 1 3 "$port" "$tok" rank0-dies "$dir"; r1=$last_pid
  start_rank "$dir/r2.log" 2 3 "$port" "$tok" rank0-dies "$dir"; r2=$last_pid
  local logs=("$dir/r0.log" "$dir/r1.log" "$dir/r2.log")
  wait_file "$dir/ready" 60 || { show_logs "${logs[@]}"; fail "rank 0 never got ready"; }
  kill -9 "$r0"
  { wait "$r0"; } 2>/dev/null
  expect_exit "rank 1 (rank 0 dead)" "$r1" 60 "${logs[@]}"
  expect_exit "rank 2 (rank 0 dead)" "$r2" 60 "${logs[@]}"
  show_logs "$dir/r1.log" "$dir/r2.log"
  grep -q '^ok: rank 1 survived rank 0$' "$dir/r1.log" || fail "rank 1 did not finish its checks"
  grep -q '^ok: rank 2 survived rank 0$' "$dir/r2.log" || fail "rank 2 did not finish its checks"
  unset HCOMM_TRANSPORTS
}
after_init shm
after_init tcp

# --- 2. during init ---------------------------------------------------------
echo "=== rank 0 dies during init, before every rank joined"
dir="$work/init"
mkdir -p "$dir"
port="$(free_port)" || fail "no free port"
tok="$(token)"
start_rank "$dir/r0.log" 0 3 "$port" "$tok" init-only; r0=$last_pid
# Rank 1 has joined the store once it has read the job rank 0 published
# there: with HCOMM_CHECK_COLLECTIVES=1 here and not on rank 0, it then
# says that it follows rank 0's setting (a line on stderr), and goes on
# to claim its rank and publish its card.
HCOMM_CHECK_COLLECTIVES=1 start_rank "$dir/r1.log" 1 3 "$port" "$tok" init-only; r1=$last_pid
deadline=$(( $(date +%s) + 30 ))
until grep -q 'HCOMM_CHECK_COLLECTIVES is 1 here' "$dir/r1.log" 2>/dev/null; do
  (( $(date +%s) < deadline )) || { show_logs "$dir/r0.log" "$dir/r1.log"; fail "rank 1 never joined"; }
  sleep 0.02
done
kill -9 "$r0"
killed_at="$(now)"
{ wait "$r0"; } 2>/dev/null
expect_exit "rank 1 (rank 0 died in init)" "$r1" 40 "$dir/r1.log"
echo "rank 1's init ended $(elapsed "$killed_at") s after rank 0's SIGKILL"
show_logs "$dir/r1.log"
grep -q '^ok: init failed' "$dir/r1.log" || fail "rank 1 did not finish its checks"

echo "PASS: rank 0's death after and during init"
