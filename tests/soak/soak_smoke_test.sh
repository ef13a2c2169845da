#!/usr/bin/env bash
# Runs tools/soak.sh with 3000 operations over 4 ranks, once over shared
# memory and once with HCOMM_TRANSPORTS=tcp, and checks its verdict: no lost
# or corrupted data, RSS/fds/shm flat (see tests/soak/soak.c).
set -uo pipefail
script=""
for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [[ -n "$d" && -f "$d/hcomm/tools/soak.sh" ]]; then script="$d/hcomm/tools/soak.sh"; break; fi
done
[[ -n "$script" ]] || { echo "FAIL: tools/soak.sh not in the runfiles" >&2; exit 1; }
out="$(mktemp "${TEST_TMPDIR:-/tmp}/soak_smoke.XXXXXX")"
trap 'rm -f "$out"' EXIT
# Shared memory (one host: the default), then TCP.
for transports in default tcp; do
  if [[ "$transports" == tcp ]]; then export HCOMM_TRANSPORTS=tcp; else unset HCOMM_TRANSPORTS; fi
  SOAK_TIMEOUT=25 bash "$script" 3000 >"$out" 2>&1
  rc=$?
  cat "$out"
  [[ $rc -eq 0 ]] || { echo "FAIL: tools/soak.sh 3000 ($transports) exited $rc" >&2; exit 1; }
  grep -q '^\[rank 0\] soak: 3[0-9]* ops in ' "$out" || { echo "FAIL: no summary" >&2; exit 1; }
  grep -q '^\[rank 0\] soak: lost 0, corrupted 0$' "$out" ||
    { echo "FAIL: data lost or corrupted ($transports)" >&2; exit 1; }
  grep -q '^\[rank 0\] soak: PASS' "$out" || { echo "FAIL: no PASS verdict ($transports)" >&2; exit 1; }
done
echo "PASS: soak smoke (3000 ops over shm, 3000 over tcp)"
