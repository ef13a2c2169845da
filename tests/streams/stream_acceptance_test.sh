#!/usr/bin/env bash
# Runs stream_acceptance through hcomm_run as 4 and 2 ranks on each host's
# default transports (the shared segment) and over tcp alone; each job must
# exit 0 with every rank's "ok: all".
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/streams/stream_acceptance)" || fail "stream_acceptance not in the runfiles"

# run N LABEL [VAR=VALUE...]: the program as N ranks with those variables.
run() { run_all_ok "$launcher" "$prog" "$@"; }

run 4 default
run 2 default
run 4 tcp HCOMM_TRANSPORTS=tcp
run 1 default
echo "PASS: stream_acceptance on 4, 2 and 1 ranks, and on 4 over tcp"
