#!/usr/bin/env bash
# Failure cases that need ranks started by hand (hcomm_run would stop the
# whole job when one rank dies):
#   1. killed peer: 3 ranks; rank 1 is SIGKILLed while rank 0 is blocked in
#      hcomm_recv from it -> rank 0 gets HCOMM_ERR_PEER_FAILURE within 10 s,
#      later calls to rank 1 fail the same way, rank 2 still works;
#   1b. stopped peer: 2 ranks; rank 1 is SIGSTOPped while it streams large
#      messages to rank 0 -> rank 0's blocking receive ends with
#      HCOMM_ERR_TIMEOUT by its deadline, also when a message was landing;
#   2. wrong job token: a process claiming rank 1 with the wrong token beside
#      a correct job fails init with HCOMM_ERR_PERMISSION_DENIED, and the
#      correct job then completes;
#   3. junk on the store port during init (random bytes, a huge length
#      prefix, a silent open connection) does not disturb a 2-rank job.
# Every wait is bounded; readiness is signalled through files and the
# listening socket, never by sleeping.
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

prog="$(runfile tests/acceptance/peer_failure)" || fail "peer_failure not in the runfiles"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/peer_failure.XXXXXX")"

pids=()
junk_fds=()
cleanup() {
  local p fd
  for fd in "${junk_fds[@]}"; do eval "exec $fd>&-" 2>/dev/null; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  { wait; } 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The variables that hcomm_run and other launchers set must not leak in.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS \
  HCOMM_RANK HCOMM_WORLD_SIZE HCOMM_STORE_ADDR HCOMM_JOB_TOKEN HCOMM_TIMEOUT_MS

# start_rank LOG RANK WORLD PORT TOKEN ARGS...: starts one rank in the
# background; its pid is in $last_pid (and in pids for the trap).
start_rank() {
  local log="$1" rank="$2" world="$3" port="$4" token="$5"
  shift 5
  HCOMM_RANK="$rank" HCOMM_WORLD_SIZE="$world" HCOMM_STORE_ADDR="127.0.0.1:$port" \
    HCOMM_JOB_TOKEN="$token" HCOMM_TIMEOUT_MS=30000 \
    "$prog" "$@" >"$log" 2>&1 </dev/null &
  last_pid=$!
  pids+=("$last_pid")
}

show_logs() {
  local f
  for f in "$@"; do echo "----- $(basename "$f")"; cat "$f"; done
}

# expect_exit NAME PID SECONDS LOG...: the process must exit 0 in time.
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

wait_listening() {
  local port="$1" deadline=$(( $(date +%s) + $2 ))
  until port_listening "$port"; do
    (( $(date +%s) < deadline )) || return 1
    sleep 0.02
  done
}

token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# start_job NAME TRANSPORT N MODE: starts N ranks of `peer_failure MODE DIR`
# over TRANSPORT (shm: one host, the default; tcp) in DIR=$work/NAME-TRANSPORT;
# their pids in r0 r1 ..., their logs in logs; waits for DIR/ready.
start_job() {
  local name="$1" transport="$2" n="$3" mode="$4" r port tok
  if [[ "$transport" == tcp ]]; then export HCOMM_TRANSPORTS=tcp; else unset HCOMM_TRANSPORTS; fi
  dir="$work/$name-$transport"
  mkdir -p "$dir"
  port="$(free_port)" || fail "no free port"
  tok="$(token)"
  logs=()
  for (( r = 0; r < n; r++ )); do
    start_rank "$dir/r$r.log" "$r" "$n" "$port" "$tok" "$mode" "$dir"
    printf -v "r$r" '%s' "$last_pid"
    logs+=("$dir/r$r.log")
  done
  if ! wait_file "$dir/ready" 60; then
    show_logs "${logs[@]}"
    fail "rank 1 never signalled readiness"
  fi
}

# --- 1. killed peer, over shared memory and over TCP -----------------------
# killed_peer MODE: MODE is shm (the default: one host) or tcp.
killed_peer() {
  echo "=== killed peer over $1"
  start_job killed "$1" 3 killed-peer
  # Rank 1 writes "ready" after rank 0 has sent its last message before its
  # hcomm_recv; a short pause makes it very likely that rank 0 is inside the
  # call when rank 1 dies (the outcome must be the same either way).
  sleep 0.3
  # The job's key, from the segments the killed rank has mapped (unlinked
  # already, "(deleted)"): what it might leave behind is named after it.
  job_keys+=" $(grep -o '/dev/shm/hcomm-[0-9a-f]*-' "/proc/$r1/maps" 2>/dev/null |
    sed 's|/dev/shm/||' | sort -u | tr '\n' ' ')"
  kill -9 "$r1"
  killed_at="$(now)"
  { wait "$r1"; } 2>/dev/null
  # Poll rank 0's output for the failure it must report.
  deadline=$(( $(date +%s) + 15 ))
  until grep -q 'HCOMM_ERR_PEER_FAILURE' "$dir/r0.log"; do
    if (( $(date +%s) >= deadline )) || ! kill -0 "$r0" 2>/dev/null; then break; fi
    sleep 0.02
  done
  detect="$(elapsed "$killed_at")"
  grep -q 'HCOMM_ERR_PEER_FAILURE' "$dir/r0.log" ||
    { show_logs "${logs[@]}"; fail "rank 0 did not report HCOMM_ERR_PEER_FAILURE"; }
  echo "rank 0 reported HCOMM_ERR_PEER_FAILURE $detect s after SIGKILL of rank 1"
  awk -v d="$detect" 'BEGIN { exit !(d < 10) }' ||
    { show_logs "${logs[@]}"; fail "peer failure took $detect s to surface (limit 10 s)"; }
  expect_exit "rank 0 (killed peer)" "$r0" 60 "${logs[@]}"
  expect_exit "rank 2 (killed peer)" "$r2" 60 "${logs[@]}"
  show_logs "$dir/r0.log" "$dir/r2.log"
  grep -q '^ok: killed peer$' "$dir/r0.log" || fail "rank 0 did not finish its checks"
  unset HCOMM_TRANSPORTS
}

job_keys=""
killed_peer shm
killed_peer tcp
# The killed rank had unlinked its segments at init: nothing of its job is
# left behind. (Only this job's names count: tests running beside this one
# hold segments of their own.)
[[ -n "${job_keys// /}" ]] || fail "found no shared-memory segment of the killed rank"
echo "segments of the killed ranks' jobs:$job_keys"
for key in $job_keys; do
  left="$(ls /dev/shm | grep "^$key" || true)"
  [[ -z "$left" ]] || fail "a killed rank left segments in /dev/shm: $left"
done

# --- 1b. stopped peer: a receive ends by its deadline ----------------------
# stalled_peer MODE: rank 1 streams 16 MiB messages to rank 0 and is then
# SIGSTOPped (most often mid-message); rank 0's blocking receive must end
# with HCOMM_ERR_TIMEOUT within its 3 s timeout plus 1.5 s.
stalled_peer() {
  echo "=== stopped peer over $1"
  start_job stalled "$1" 2 stalled-peer
  sleep 0.2
  kill -STOP "$r1"
  expect_exit "rank 0 (stopped peer)" "$r0" 30 "${logs[@]}"
  kill -9 "$r1"
  { wait "$r1"; } 2>/dev/null
  show_logs "$dir/r0.log"
  grep -q '^ok: rank 0: after' "$dir/r0.log" || fail "rank 0 did not finish its checks"
  unset HCOMM_TRANSPORTS
}
stalled_peer shm
stalled_peer tcp

# --- 2. wrong job token ----------------------------------------------------
echo "=== wrong job token"
dir="$work/token"
mkdir -p "$dir"
port="$(free_port)" || fail "no free port"
tok="$(token)"
start_rank "$dir/r0.log" 0 2 "$port" "$tok" pingpong; r0=$last_pid
wait_listening "$port" 30 || { show_logs "$dir/r0.log"; fail "rank 0 never listened on $port"; }
start_rank "$dir/intruder.log" 1 2 "$port" "not-$tok" denied; intruder=$last_pid
expect_exit "the rank with the wrong token" "$intruder" 40 "$dir/intruder.log" "$dir/r0.log"
show_logs "$dir/intruder.log"
start_rank "$dir/r1.log" 1 2 "$port" "$tok" pingpong; r1=$last_pid
expect_exit "rank 0 (after the intruder)" "$r0" 60 "$dir/r0.log" "$dir/r1.log"
expect_exit "rank 1 (after the intruder)" "$r1" 60 "$dir/r0.log" "$dir/r1.log"
show_logs "$dir/r0.log" "$dir/r1.log"

# --- 3. junk on the store port ---------------------------------------------
echo "=== junk on the store port"
dir="$work/junk"
mkdir -p "$dir"
port="$(free_port)" || fail "no free port"
tok="$(token)"
start_rank "$dir/r0.log" 0 2 "$port" "$tok" pingpong; r0=$last_pid
wait_listening "$port" 30 || { show_logs "$dir/r0.log"; fail "rank 0 never listened on $port"; }
# Connections that send junk and close (the writer may get EPIPE: fine).
for i in 1 2 3; do
  timeout 5 bash -c "head -c 4096 /dev/urandom > /dev/tcp/127.0.0.1/$port" 2>/dev/null
done
timeout 5 bash -c "printf '\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x7f' > /dev/tcp/127.0.0.1/$port" \
  2>/dev/null
# Connections that stay open while the job initialises: one with junk, one
# with a huge length prefix and nothing after it, one silent.
exec {fd1}<>"/dev/tcp/127.0.0.1/$port" && junk_fds+=("$fd1")
exec {fd2}<>"/dev/tcp/127.0.0.1/$port" && junk_fds+=("$fd2")
exec {fd3}<>"/dev/tcp/127.0.0.1/$port" && junk_fds+=("$fd3")
head -c 4096 /dev/urandom >&"$fd1" 2>/dev/null
printf '\xff\xff\xff\x7f' >&"$fd2" 2>/dev/null
echo "sent junk on $port (4 closed connections, 3 held open)"
start_rank "$dir/r1.log" 1 2 "$port" "$tok" pingpong; r1=$last_pid
expect_exit "rank 0 (junk)" "$r0" 60 "$dir/r0.log" "$dir/r1.log"
expect_exit "rank 1 (junk)" "$r1" 60 "$dir/r0.log" "$dir/r1.log"
show_logs "$dir/r0.log" "$dir/r1.log"

echo "PASS: killed peer, wrong token, junk on the store port"
