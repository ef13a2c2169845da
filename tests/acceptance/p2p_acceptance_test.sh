#!/usr/bin/env bash
# Runs p2p_acceptance as 4 ranks through hcomm_run and checks that the job
# exits 0 and that every rank printed its final "ok: all".
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/acceptance/p2p_acceptance)" || fail "p2p_acceptance not in the runfiles"
uds="$(runfile examples/plugin/libhcomm_uds.so)" || fail "the uds plugin is not in the runfiles"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/p2p_acceptance.XXXXXX")"
trap 'rm -f "$out"' EXIT

# run_mode NAME NP: the whole program as NP ranks, over
#   shm   - shared memory only (HCOMM_TRANSPORTS=shm; all ranks on this host),
#   tcp   - TCP only (HCOMM_TRANSPORTS=tcp),
#   mixed - ranks on two pretend hosts (HCOMM_HOST_ID by rank parity):
#           shared memory within each, TCP between them,
#   uds   - the plugin example only (HCOMM_PLUGINS=its .so,
#           HCOMM_TRANSPORTS=uds: Unix-domain sockets, examples/plugin).
# Rank 0 also says its job's key, which starts the names of what the job
# puts in /dev/shm (job_keys collects them).
job_keys=""
run_mode() {
  local mode="$1" np="$2" start rc r host=''
  case "$mode" in
    shm) export HCOMM_TRANSPORTS=shm ;;
    tcp) export HCOMM_TRANSPORTS=tcp ;;
    uds) export HCOMM_PLUGINS="$uds" HCOMM_TRANSPORTS=uds ;;
    mixed) host='HCOMM_HOST_ID="host$((RANK % 2))"' ;;
  esac
  local -a cmd=(/bin/sh -c \
    '[ "$RANK" = 0 ] && echo "job key: $HCOMM_JOB_KEY"; '"$host"' exec "$0" "$@"' "$prog")
  start="$(now)"
  # hcomm_run has its own --timeout; `timeout` is a backstop for the launcher.
  timeout -k 5 180 "$launcher" -n "$np" --timeout 120 -- "${cmd[@]}" >"$out" 2>&1
  rc=$?
  unset HCOMM_TRANSPORTS HCOMM_PLUGINS
  cat "$out"
  echo "--- $mode, $np ranks: hcomm_run exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "$mode: hcomm_run -n $np -- p2p_acceptance exited $rc"
  for ((r = 0; r < np; r++)); do
    grep -qxF "[rank $r] ok: all" "$out" || fail "$mode: rank $r did not print 'ok: all'"
  done
  if grep -q 'FAIL' "$out"; then fail "$mode: a rank reported a failure"; fi
  job_keys+=" $(sed -n 's/^\[rank 0\] job key: //p' "$out")"
}

run_mode shm 4
run_mode tcp 4
run_mode mixed 4
run_mode uds 4
run_mode shm 8   # more ranks than cores
# Nothing of these jobs is left in /dev/shm. (Only their names count: tests
# running beside this one hold segments of their own.)
[[ $(wc -w <<<"$job_keys") -eq 5 ]] || fail "not every job said its key:$job_keys"
for key in $job_keys; do
  left="$(ls /dev/shm | grep "^hcomm-$key" || true)"
  [[ -z "$left" ]] || fail "hcomm segments left in /dev/shm: $left"
  left="$(ls /tmp | grep "^hcomm-uds-$key" || true)"
  [[ -z "$left" ]] || fail "uds sockets left in /tmp: $left"
done
echo "PASS: every check over shm, tcp, mixed hosts and the uds plugin (4 ranks) and shm with 8 ranks"
