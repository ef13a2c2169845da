#!/usr/bin/env bash
# Starts a C example on ${HCOMM_NP:-4} local ranks through hcomm_run:
#
#   run_ranks.sh PROGRAM [ARGS...]
#
#   bazel run //examples/c:ring                       # 4 ranks, 16 MiB buffers
#   HCOMM_NP=3 bazel run //examples/c:ring -- --bytes 1M
#   bazel run //examples/c:two_streams                # priorities on two streams
#
# PROGRAM is a cc_binary of this package (ring_rank, two_streams_rank);
# ARGS go to every rank. Both hcomm_run and PROGRAM are found through this
# target's runfiles.
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
rank_prog="$root/hcomm/examples/c/$1"
shift
for f in "$launcher" "$rank_prog"; do
  [[ -x "$f" ]] || { echo "run_ranks.sh: $f is missing from the runfiles" >&2; exit 1; }
done

exec "$launcher" -n "${HCOMM_NP:-4}" --timeout 120 -- "$rank_prog" "$@"
