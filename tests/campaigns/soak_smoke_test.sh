#!/usr/bin/env bash
# soak.sh --short (10^5 operations on 2 ranks) over shm, then over tcp:
# every result checked, RSS growth from 10% to 100% of the run under 5%.
set -uo pipefail
script=""
for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [[ -n "$d" && -f "$d/hcomm/tests/campaigns/soak.sh" ]]; then
    script="$d/hcomm/tests/campaigns/soak.sh"
    break
  fi
done
[[ -n "$script" ]] || { echo "FAIL: soak.sh not in the runfiles" >&2; exit 1; }
for transport in shm tcp; do
  bash "$script" --short -x "$transport" || { echo "FAIL: soak.sh --short -x $transport" >&2; exit 1; }
done
echo "PASS: soak smoke (10^5 ops on 2 ranks, shm and tcp)"
