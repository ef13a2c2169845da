#!/usr/bin/env bash
# Runs stream_acceptance through hcomm_run as 4 and 2 ranks on each host's
# default transports (the shared segment) and over tcp alone; each job must
# exit 0 with every rank's "ok: all".
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/streams/stream_acceptance)" || fail "stream_acceptance not in the runfiles"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/stream_acceptance.XXXXXX")"
trap 'rm -f "$out"' EXIT

# run N LABEL [VAR=VALUE...]: the program as N ranks with those variables.
run() {
  local n="$1" label="$2" start rc r
  shift 2
  start="$(now)"
  env "$@" timeout -k 5 180 "$launcher" -n "$n" --timeout 120 -- "$prog" >"$out" 2>&1
  rc=$?
  cat "$out"
  echo "--- $label: hcomm_run -n $n exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "$label: hcomm_run -n $n -- stream_acceptance exited $rc"
  for ((r = 0; r < n; r++)); do
    grep -qxF "[rank $r] ok: all" "$out" || fail "$label, $n ranks: rank $r did not print 'ok: all'"
  done
  if grep -q 'FAIL' "$out"; then fail "$label, $n ranks: a rank reported a failure"; fi
}

run 4 default
run 2 default
run 4 tcp HCOMM_TRANSPORTS=tcp
run 1 default
echo "PASS: stream_acceptance on 4, 2 and 1 ranks, and on 4 over tcp"
