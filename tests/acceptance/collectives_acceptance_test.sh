#!/usr/bin/env bash
# Runs collectives_acceptance through hcomm_run as 4, 3 and 1 ranks (each
# host's default transports: the shared segment), then as 4 ranks over tcp
# alone and over the plugin example alone (HCOMM_PLUGINS=its .so,
# HCOMM_TRANSPORTS=uds), and checks that each job exits 0 and that every
# rank printed its final "ok: all".
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/acceptance/collectives_acceptance)" ||
  fail "collectives_acceptance not in the runfiles"
uds="$(runfile examples/plugin/libhcomm_uds.so)" || fail "the uds plugin is not in the runfiles"

# run N LABEL [VAR=VALUE...]: the program as N ranks with those variables.
run() { run_all_ok "$launcher" "$prog" "$@"; }

for n in 4 3 1; do run "$n" default; done
run 4 tcp HCOMM_TRANSPORTS=tcp
run 4 uds HCOMM_PLUGINS="$uds" HCOMM_TRANSPORTS=uds
echo "PASS: collectives_acceptance on 4, 3 and 1 ranks, and on 4 over tcp and over the uds plugin"
