#!/usr/bin/env bash
# A small /dev/shm (a container's default is 64 MB) or none must never crash
# a rank or fail a job that TCP can carry.
# tmpfs hands out pages on first touch, so a segment sized with ftruncate
# alone maps fine and kills the rank with SIGBUS when /dev/shm runs out.
# Each case runs in a mount namespace of its own with a tmpfs of the given
# size on /dev/shm (the machine's /dev/shm is not touched):
#
#   (a) 10 MiB, 3 ranks: the shared-memory transport's rings fit (up to
#       2 MiB a rank), the collective segment with 1 MiB slots (8 MiB) does
#       not. The collective acceptance must pass in full through a segment
#       of smaller slots, and the rank that made it must say so on stderr.
#   (b) 64 MiB (a container's default), 8 ranks: rings of 1 MiB would take
#       56 MiB, the segment with 1 MiB slots 18 MiB: allreduce 8 B-4 MiB
#       with hcomm_bench's data check must find every value right, and a
#       rank must say what it made smaller.
#   (c) 512 KiB, 3 ranks: not even rings of 128 KiB fit. hcomm_comm_init
#       must fail with HCOMM_ERR_OUT_OF_MEM naming /dev/shm (and the bytes
#       one rank's smallest rings take), and the job must end within a
#       minute.
#   (d) room for the smallest rings (3 times what (c) named) and 256 KiB:
#       not even the smallest segment (512 KiB of slots) fits. The
#       collective acceptance must pass in full by messages, and rank 0
#       must say why.
#   (e) 64 MiB and 12 ranks: rings of 512 KiB would take 67 MiB; each rank
#       takes its share of the room instead (256 KiB rings or less):
#       allreduce 8 B-4 MiB with the data check must find every value
#       right, and the ranks must say that their rings are smaller.
#   (f) a read-only /dev/shm (as unusable as none, a container's
#       --ipc=none): the collective acceptance must pass in full over TCP,
#       every rank saying why on stderr; with HCOMM_TRANSPORTS=shm init
#       must fail with HCOMM_ERR_NO_DEVICE naming /dev/shm's error.
#   (g) rank 2 in a mount namespace of its own (a container with the same
#       host name and a /dev/shm of its own), ranks 0 and 1 outside: rank 2
#       must reach them over TCP, and the collective acceptance pass in
#       full (it waited for segments it could not see until the timeout).
#
# Needs root (a mount namespace and a tmpfs mount); prints "SKIP: ..." and
# passes where `unshare --mount` cannot mount a tmpfs.
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/acceptance/collectives_acceptance)" ||
  fail "collectives_acceptance not in the runfiles"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/small_devshm.XXXXXX")"
trap 'rm -f "$out"' EXIT

# in_small_shm SIZE CMD...: CMD with a tmpfs of SIZE on /dev/shm, privately
# (SIZE "ro": a read-only one).
in_small_shm() {
  local opts="size=$1"
  [[ "$1" == ro ]] && opts="ro,size=64k"
  shift
  unshare --mount --propagation private \
    bash -c 'mount -t tmpfs -o "$0" hcomm-test /dev/shm && exec "$@"' "$opts" "$@"
}

if ! err="$(in_small_shm 1m true 2>&1)"; then
  echo "SKIP: cannot mount a tmpfs in a mount namespace here ($err)"
  exit 0
fi

# passes CASE SIZE RANKS CMD...: CMD on RANKS ranks with SIZE of /dev/shm
# exits 0 (its output in $out); fails the test otherwise.
passes() {
  local case="$1" size="$2" n="$3" start rc
  shift 3
  start="$(now)"
  in_small_shm "$size" timeout -k 5 120 "$launcher" -n "$n" --timeout 90 -- "$@" >"$out" 2>&1
  rc=$?
  cat "$out"
  echo "--- ($case) /dev/shm $size, $n ranks: exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "($case) $(basename "$1") on $n ranks, /dev/shm $size: exited $rc"
}

# acceptance_passes CASE SIZE: the collective acceptance passes in full on
# 3 ranks.
acceptance_passes() {
  local r
  passes "$1" "$2" 3 "$prog"
  for r in 0 1 2; do
    grep -qxF "[rank $r] ok: all" "$out" || fail "($1) rank $r did not print 'ok: all'"
  done
  if grep -q 'FAIL' "$out"; then fail "($1) a rank reported a failure"; fi
}

# allreduce_right CASE SIZE RANKS: hcomm_bench's allreduce, 8 B-4 MiB, finds
# every value right.
allreduce_right() {
  passes "$1" "$2" "$3" "$bench" allreduce -b 8 -e 4M -f 8 --runs 1 -n 5 -w 1
  grep -qF '[rank 0] # Out of bounds values : 0 OK' "$out" || fail "($1) wrong values"
}
bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"

# (a) room for the rings, not for the collective segment of 1 MiB slots
acceptance_passes a 10m
smaller='has slots of [0-9]* KiB instead of 1 MiB: /dev/shm is short'
grep -q "^\[rank 0\] hcomm WARN: rank 0, communicator of 3: .* $smaller" "$out" ||
  fail "(a) rank 0 did not say that its segment has smaller slots, and why"

# (b) a container's /dev/shm and 8 ranks
allreduce_right b 64m 8
grep -q '^\[rank [0-7]\] hcomm WARN: .*/dev/shm is short of room.*--shm-size' "$out" ||
  fail "(b) no rank said that its rings or segment are smaller, and how to fix it"

# (c) no room for the rings
start="$(now)"
in_small_shm 512k timeout -k 5 60 "$launcher" -n 3 --timeout 30 -- "$prog" >"$out" 2>&1
rc=$?
cat "$out"
echo "--- (c) 512 KiB /dev/shm: exited $rc after $(elapsed "$start") s"
[[ $rc -ne 0 ]] || fail "(c) collectives_acceptance on a 512 KiB /dev/shm exited 0"
[[ $rc -ne 124 && $rc -ne 137 ]] || fail "(c) the job did not end within a minute"
if grep -qi 'SIGBUS\|signal' "$out"; then fail "(c) a rank was killed by a signal"; fi
rings="$(grep -o 'HCOMM_ERR_OUT_OF_MEM.*cannot reserve [0-9]* bytes in /dev/shm' "$out" |
  head -1 | sed 's/.*cannot reserve \([0-9]*\) bytes.*/\1/')"
[[ -n "$rings" ]] || fail "(c) no rank said that /dev/shm has no room"

# (d) room for the smallest rings, not for the smallest collective segment
acceptance_passes d $((3 * rings + 256 * 1024))
by_messages='go by messages instead of a shared segment: cannot reserve [0-9]* bytes in /dev/shm'
grep -q "^\[rank 0\] hcomm WARN: rank 0, communicator of 3: collectives $by_messages" "$out" ||
  fail "(d) rank 0 did not say that its collectives go by messages, and why"

# (e) a container's /dev/shm and 12 ranks
allreduce_right e 64m 12
smaller_rings='hcomm WARN: rank [0-9]*: shared-memory rings of [0-9]* KiB instead of 512'
grep -q "^\[rank [0-9]*\] $smaller_rings" "$out" ||
  fail "(e) no rank said that its rings are smaller"

# (f) /dev/shm unusable
acceptance_passes f ro
for r in 0 1 2; do
  grep -q "^\[rank $r\] hcomm WARN: rank $r: ranks of this host talk over tcp: .*Read-only" \
    "$out" || fail "(f) rank $r did not say that it talks over TCP, and why"
done
in_small_shm ro env HCOMM_TRANSPORTS=shm timeout -k 5 60 "$launcher" -n 2 --timeout 30 -- \
  "$prog" >"$out" 2>&1
rc=$?
cat "$out"
echo "--- (f) read-only /dev/shm, transports=shm: exited $rc"
[[ $rc -ne 0 ]] || fail "(f) transports=shm on a read-only /dev/shm exited 0"
grep -q 'HCOMM_ERR_NO_DEVICE.*cannot use shared memory: shm_open.*Read-only' "$out" ||
  fail "(f) transports=shm: no rank said that /dev/shm is unusable"

# (g) one rank with a /dev/shm of its own, started without the launcher
port="$(free_port)"
pids=()
for r in 0 1 2; do
  wrap=()
  [[ $r -eq 2 ]] && wrap=(in_small_shm 64m)
  "${wrap[@]}" env HCOMM_RANK="$r" HCOMM_WORLD_SIZE=3 HCOMM_STORE_ADDR="127.0.0.1:$port" \
    HCOMM_TIMEOUT_MS=60000 "$prog" >"$out.$r" 2>&1 &
  pids+=($!)
done
for r in 0 1 2; do
  wait_pid "${pids[r]}" 120
  rc=$?
  sed "s/^/[rank $r] /" "$out.$r"
  echo "--- (g) rank $r, /dev/shm of its own: $([[ $r -eq 2 ]] && echo yes || echo no): exited $rc"
  [[ $rc -eq 0 ]] || fail "(g) rank $r exited $rc"
  grep -qxF "ok: all" "$out.$r" || fail "(g) rank $r did not print 'ok: all'"
  rm -f "$out.$r"
done
echo "PASS: a small /dev/shm shrinks the segment, or its collectives go by messages, or" \
  "init fails with a message; an unusable or separate one leaves the ranks on TCP;" \
  "no rank crashes"
