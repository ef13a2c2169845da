#!/usr/bin/env bash
# Runs tools/train_bench.py as N ranks through hcomm_run:
#
#   bazel run //tools:train_bench -- [--ranks N] [train_bench.py flags...]
#
# --ranks (default 2) is this script's; every other flag goes to each rank.
# gloo's store gets a free port of its own.
set -euo pipefail

runfiles_root() {
  local d
  for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
    if [[ -n "$d" && -d "$d/hcomm" ]]; then echo "$d"; return 0; fi
  done
  echo "train_bench.sh: cannot find the runfiles of $0" >&2
  return 1
}

ranks=2
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
root="$(cd "$(runfiles_root)" && pwd)"
export RUNFILES_DIR="$root"
port="$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
exec "$root/hcomm/tools/hcomm_run" -n "$ranks" --timeout 600 -- \
  "$root/hcomm/tools/train_bench_rank" --port "$port" "${args[@]}"
