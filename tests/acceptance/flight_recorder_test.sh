#!/usr/bin/env bash
# The flight recorder in a hang (docs/reliability.md, "Flight recorder"):
# 3 ranks over shared memory and over TCP; ranks 0 and 1 call an allreduce
# that rank 2 never calls. Both must time out (timeout 3 s) with a message
# that names rank 2 as the rank that did not arrive and shows its last
# operations (checked by the rank program, peer_failure missing-rank), and
# every rank's dump (HCOMM_FLIGHT_RECORDER_FILE=DIR/fr-%r.json) must parse
# as JSON with the expected entries (checked here with python3's json).
# Every wait is bounded; ranks are started by hand, as in peer_failure_test.
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

prog="$(runfile tests/acceptance/peer_failure)" || fail "peer_failure not in the runfiles"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/flight_recorder.XXXXXX")"
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
  HCOMM_FLIGHT_RECORDER HCOMM_FLIGHT_RECORDER_FILE

show_logs() {
  local f
  for f in "$@"; do echo "----- $(basename "$f")"; cat "$f"; done
}

missing_rank() {
  local transport="$1" dir="$work/$1" port tok r rc
  echo "=== rank 2 never calls the allreduce, over $transport"
  mkdir -p "$dir"
  if [[ "$transport" == tcp ]]; then export HCOMM_TRANSPORTS=tcp; else unset HCOMM_TRANSPORTS; fi
  port="$(free_port)" || fail "no free port"
  tok="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  local rp=() logs=()
  for r in 0 1 2; do
    HCOMM_RANK=$r HCOMM_WORLD_SIZE=3 HCOMM_STORE_ADDR="127.0.0.1:$port" HCOMM_JOB_TOKEN="$tok" \
      HCOMM_TIMEOUT_MS=30000 HCOMM_FLIGHT_RECORDER_FILE="$dir/fr-%r.json" \
      "$prog" missing-rank >"$dir/r$r.log" 2>&1 </dev/null &
    rp+=($!)
    pids+=($!)
    logs+=("$dir/r$r.log")
  done
  for r in 0 1 2; do
    rc=0
    wait_pid "${rp[$r]}" 60 || rc=$?
    if [[ $rc -ne 0 ]]; then show_logs "${logs[@]}"; fail "rank $r exited $rc"; fi
  done
  show_logs "$dir/r0.log"
  grep -q '^ok: missing rank$' "$dir/r0.log" || fail "rank 0 did not finish its checks"
  grep -q '^ok: missing rank$' "$dir/r1.log" || fail "rank 1 did not finish its checks"
  python3 - "$dir" <<'PY' || fail "the dumps in $dir are not as expected"
import json, sys
d = sys.argv[1]

def ops(doc, rank):
    [one] = [x for x in doc["ranks"] if x["rank"] == rank]
    return one

for me in (0, 1):
    doc = json.load(open(f"{d}/fr-{me}.json"))  # must parse
    assert doc["rank"] == me and doc["world_size"] == 3, doc
    # Rewritten at hcomm_comm_destroy; the hang report's records stay in it.
    assert doc["reason"] == "hcomm_comm_destroy", doc["reason"]
    assert "rank 2 did not arrive at allreduce" in doc["hang_report"], doc["hang_report"]
    assert [x["rank"] for x in doc["ranks"]] == [0, 1, 2], doc["ranks"]
    assert all(x["answered"] for x in doc["ranks"]), doc["ranks"]
    # Rank 2, as the report found it: the ring, then the receive it waits in.
    two = ops(doc, 2)["entries"]
    assert [e["op"] for e in two] == ["barrier", "irecv", "isend", "recv"], two
    assert two[0]["seq"] == 0 and two[0]["state"] == "done", two
    assert two[1]["peer"] == 1 and two[1]["tag"] == 21 and two[1]["state"] == "done", two
    assert two[3]["peer"] == 0 and two[3]["tag"] == 20 and two[3]["state"] == "in_progress", two
    assert two[3]["end_unix_ns"] == 0 and two[3]["start_unix_ns"] > 0, two
    # This rank, as of its destroy: the allreduce failed.
    mine = ops(doc, me)["entries"]
    assert [e["op"] for e in mine[:4]] == ["barrier", "irecv", "isend", "allreduce"], mine
    ar = mine[3]
    assert ar["seq"] == 1 and ar["bytes"] == 16 and ar["state"] == "failed", ar
    assert ar["end_unix_ns"] >= ar["start_unix_ns"] > 0, ar
    # The other waiting rank, as the report found it: in the allreduce.
    other = ops(doc, 1 - me)["entries"]
    assert other[-1]["op"] == "allreduce" and other[-1]["state"] == "in_progress", other
# Rank 2 had no failure: its dump is its destroy's, of its own record alone.
doc = json.load(open(f"{d}/fr-2.json"))
assert doc["hang_report"] is None and [x["rank"] for x in doc["ranks"]] == [2], doc
two = doc["ranks"][0]["entries"]
assert [e["op"] for e in two] == ["barrier", "irecv", "isend", "recv", "recv", "send", "send"], two
assert all(e["state"] == "done" and e["end_unix_ns"] >= e["start_unix_ns"] for e in two), two
print("dumps ok:", sorted(x for x in __import__("os").listdir(d) if x.endswith(".json")))
PY
  unset HCOMM_TRANSPORTS
}

missing_rank shm
missing_rank tcp
echo "PASS: flight recorder"
