#!/usr/bin/env bash
# The seed's profiling commands, run as a person would: in a fresh folder,
#
#   export HCOMM_PROFILE=1
#   hcomm_run -n 4 -- profile_job          # a 4-rank Python job
#   hcomm-visualize hcomm_profile.json     # when the tool is given
#
# with rank 2 coming 50 ms late to one allreduce. Then the file is checked
# by check_trace.py (the trace event format's schema, named tracks, nesting,
# rank 2 the straggler), and the report, if hcomm-visualize is given, must
# name rank 2 too. A second run without HCOMM_PROFILE writes no file.
#
# Usage (Bazel passes the paths): profile_job_test.sh HCOMM_RUN PROFILE_JOB CHECK_TRACE [VISUALIZE]
set -uo pipefail

[ $# -ge 3 ] || { echo "usage: $0 HCOMM_RUN PROFILE_JOB CHECK_TRACE [VISUALIZE]" >&2; exit 2; }
abs() { (cd "$(dirname "$1")" && echo "$PWD/$(basename "$1")"); }
RUN=$(abs "$1"); JOB=$(abs "$2"); CHECK=$(abs "$3"); VIS=""
[ $# -ge 4 ] && VIS=$(abs "$4")
# The job's py_binary finds its runfiles from here, wherever it runs.
export RUNFILES_DIR="${RUNFILES_DIR:-${TEST_SRCDIR:-$(abs "$0").runfiles}}"
FAILURES=0
fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }

work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/profile.XXXXXX")
cd "$work" || exit 1

export HCOMM_PROFILE=1
out=$(DELAY_RANK=2 DELAY_CALL=5 "$RUN" -n 4 --timeout 120 -- "$JOB" 2>&1)
rc=$?
unset HCOMM_PROFILE
echo "$out" | tail -5
[ $rc -eq 0 ] || fail "the job exited $rc"
grep -q "hcomm: profile of 4 ranks written to hcomm_profile.json" <<<"$out" ||
  fail "rank 0 did not say where the profile went"
if [ ! -s hcomm_profile.json ]; then
  fail "no hcomm_profile.json in the job's folder"
else
  python3 "$CHECK" hcomm_profile.json --ranks 4 --straggler 2 || fail "check_trace"
  if [ -n "$VIS" ]; then
    # As a person types it: the page lands beside the file.
    "$VIS" hcomm_profile.json || fail "hcomm-visualize exited $?"
    if [ ! -s hcomm_profile.html ]; then
      fail "hcomm-visualize wrote no hcomm_profile.html"
    elif ! timeout 120 chromium --headless --no-sandbox --disable-gpu \
        --user-data-dir="$work/chromium" --virtual-time-budget=5000 \
        --dump-dom "file://$work/hcomm_profile.html" >dom.html 2>/dev/null; then
      fail "chromium could not render the report"
    else
      grep -q 'data-js-errors="0"' dom.html || fail "the report's scripts failed"
      grep -q 'data-rendered="1"' dom.html || fail "the report did not finish drawing"
      grep -q 'data-last-rank="2"' dom.html || fail "the report names no rank 2 as a straggler"
    fi
  fi
fi

# Off: no file.
mkdir off && cd off || exit 1
"$RUN" -n 2 --timeout 60 -- "$JOB" >/dev/null 2>&1 || fail "the job without profiling failed"
[ ! -e hcomm_profile.json ] || fail "a profile was written with HCOMM_PROFILE unset"

if [ $FAILURES -ne 0 ]; then
  echo "$FAILURES failure(s)" >&2
  exit 1
fi
echo "PASS"
