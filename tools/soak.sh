#!/usr/bin/env bash
# Soak benchmark: OPS random operations (p2p messages of 0..1 MiB with random
# tags and any-source receives, allreduce/broadcast/allgather/alltoall of
# random sizes) over 4 local ranks, every byte checked, with each rank's
# RSS, descriptors and shared-memory segments sampled every 10^4 operations.
# See tests/soak/soak.c for what is counted and what PASS means.
#
#   tools/soak.sh [OPS]        (default 100000; builds what it needs)
#
# Environment: SOAK_SEED (default 1), SOAK_RANKS (default 4),
# SOAK_TIMEOUT (seconds, default 120 + OPS/20), HCOMM_TRANSPORTS (e.g. tcp to
# soak the TCP transport; the default puts all ranks on shared memory).
# Exit status: 0 on PASS, 1 on FAIL, the launcher's status otherwise (124:
# timeout). Not part of `bazel test //...`: //tests/soak:soak_smoke_test runs
# a short version.
set -uo pipefail

ops="${1:-100000}"
if [[ ! "$ops" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: tools/soak.sh [OPS]   (OPS: a positive integer, default 100000)" >&2
  exit 2
fi
seed="${SOAK_SEED:-1}"
ranks="${SOAK_RANKS:-4}"
limit="${SOAK_TIMEOUT:-$((120 + ops / 20))}"

# Inside Bazel (the smoke test) the binaries are in the runfiles; from a
# checkout, build them.
soak="" run=""
for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [[ -n "$d" && -x "$d/hcomm/tests/soak/soak" && -x "$d/hcomm/tools/hcomm_run" ]]; then
    soak="$d/hcomm/tests/soak/soak"
    run="$d/hcomm/tools/hcomm_run"
    break
  fi
done
if [[ -z "$soak" ]]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  (cd "$root" && bazel build //tests/soak:soak //tools:hcomm_run) || exit 1
  bin="$(cd "$root" && bazel info bazel-bin 2>/dev/null)" || exit 1
  soak="$bin/tests/soak/soak"
  run="$bin/tools/hcomm_run"
fi

echo "soak: hcomm_run -n $ranks --timeout $limit -- soak $ops $seed" \
  "(transports: ${HCOMM_TRANSPORTS:-default})"
start=$(date +%s)
"$run" -n "$ranks" --timeout "$limit" -- "$soak" "$ops" "$seed"
rc=$?
echo "soak: exit status $rc after $(($(date +%s) - start)) s"
exit "$rc"
