#!/usr/bin/env bash
# Starts the Go allreduce example on ${HCOMM_NP:-4} local ranks through
# hcomm_run:
#
#   bazel run //examples/go:allreduce                 # 4 ranks, 1 Mi elements
#   HCOMM_NP=3 bazel run //examples/go:allreduce -- -n 1000
#
# Arguments go to every rank (allreduce_rank, see main.go). hcomm_run and
# allreduce_rank are found through this target's runfiles.
set -euo pipefail

# Prints the runfiles folder that holds this workspace's files.
runfiles_root() {
  local d
  for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
    if [[ -n "$d" && -d "$d/hcomm" ]]; then echo "$d"; return 0; fi
  done
  case "$0" in
    *.runfiles/*) echo "${0%%.runfiles/*}.runfiles"; return 0 ;;
  esac
  echo "run_allreduce.sh: cannot find the runfiles of $0" >&2
  return 1
}

root="$(runfiles_root)"
root="$(cd "$root" && pwd)"
export RUNFILES_DIR="$root"
launcher="$root/hcomm/tools/hcomm_run"
rank_prog="$root/hcomm/examples/go/allreduce_rank"
for f in "$launcher" "$rank_prog"; do
  [[ -x "$f" ]] || { echo "run_allreduce.sh: $f is missing from the runfiles" >&2; exit 1; }
done

exec "$launcher" -n "${HCOMM_NP:-4}" --timeout 120 -- "$rank_prog" "$@"
