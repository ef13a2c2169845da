#!/usr/bin/env bash
# Starts a Python example on ${HCOMM_NP:-4} local ranks through hcomm_run:
#
#   run_ranks.sh PROGRAM [ARGS...]
#
# PROGRAM is a py_binary of this package (pipeline_parallel_rank, scheduler_rank,
# parameter_server_rank); ARGS go to every rank. hcomm_run and PROGRAM are
# found through this target's runfiles. See BUILD.bazel for the targets.
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
  echo "run_ranks.sh: cannot find the runfiles of $0" >&2
  return 1
}

[[ $# -ge 1 ]] || { echo "usage: run_ranks.sh PROGRAM [ARGS...]" >&2; exit 2; }
root="$(runfiles_root)"
root="$(cd "$root" && pwd)"
export RUNFILES_DIR="$root"
launcher="$root/hcomm/tools/hcomm_run"
rank_prog="$root/hcomm/examples/python/$1"
shift
for f in "$launcher" "$rank_prog"; do
  [[ -x "$f" ]] || { echo "run_ranks.sh: $f is missing from the runfiles" >&2; exit 1; }
done

exec "$launcher" -n "${HCOMM_NP:-4}" --timeout "${HCOMM_EXAMPLE_TIMEOUT:-120}" -- "$rank_prog" "$@"
