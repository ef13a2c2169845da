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
out="$(mktemp "${TEST_TMPDIR:-/tmp}/collectives_acceptance.XXXXXX")"
trap 'rm -f "$out"' EXIT

# run N LABEL [VAR=VALUE...]: the program as N ranks with those variables.
run() {
  local n="$1" label="$2" start rc r
  shift 2
  start="$(now)"
  # hcomm_run has its own --timeout; `timeout` is a backstop for the launcher.
  env "$@" timeout -k 5 180 "$launcher" -n "$n" --timeout 120 -- "$prog" >"$out" 2>&1
  rc=$?
  cat "$out"
  echo "--- $label: hcomm_run -n $n exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "$label: hcomm_run -n $n -- collectives_acceptance exited $rc"
  for ((r = 0; r < n; r++)); do
    grep -qxF "[rank $r] ok: all" "$out" || fail "$label, $n ranks: rank $r did not print 'ok: all'"
  done
  if grep -q 'FAIL' "$out"; then fail "$label, $n ranks: a rank reported a failure"; fi
}

for n in 4 3 1; do run "$n" default; done
run 4 tcp HCOMM_TRANSPORTS=tcp
run 4 uds HCOMM_PLUGINS="$uds" HCOMM_TRANSPORTS=uds
echo "PASS: collectives_acceptance on 4, 3 and 1 ranks, and on 4 over tcp and over the uds plugin"
