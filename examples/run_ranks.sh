#!/usr/bin/env bash
# Starts an example on ${HCOMM_NP:-4} local ranks through hcomm_run:
#
#   run_ranks.sh PROGRAM [ARGS...]
#
#   bazel run //examples/c:ring -- --bytes 1M        # PROGRAM examples/c/ring_rank
#   bazel run //examples/python:scheduler             # PROGRAM examples/python/scheduler_rank
#
# PROGRAM is the workspace path of one rank's binary (a cc_binary or
# py_binary of examples/c or examples/python); ARGS go to every rank.
# hcomm_run and PROGRAM are found through the target's runfiles. The
# targets are in examples/*/BUILD.bazel.
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
rank_prog="$root/hcomm/$1"
shift
for f in "$launcher" "$rank_prog"; do
  [[ -x "$f" ]] || { echo "run_ranks.sh: $f is missing from the runfiles" >&2; exit 1; }
done

exec "$launcher" -n "${HCOMM_NP:-4}" --timeout "${HCOMM_EXAMPLE_TIMEOUT:-120}" -- "$rank_prog" "$@"
