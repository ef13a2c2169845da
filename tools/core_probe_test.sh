#!/bin/bash
# Tests of tools/core_probe: its one line of output, and its exit statuses.
# Usage: core_probe_test.sh PATH_TO_CORE_PROBE   (Bazel passes $(location :core_probe))
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PATH_TO_CORE_PROBE" >&2
  exit 2
fi
PROBE="$1"
FAILURES=0
fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }

# The CPUs this test may run on (Bazel or a CI runner may narrow the set).
mapfile -t CPUS < <(python3 -c 'import os; print("\n".join(map(str, sorted(os.sched_getaffinity(0)))))')

if [ "${#CPUS[@]}" -ge 2 ]; then
  out=$("$PROBE" "${CPUS[0]}" "${CPUS[1]}")
  rc=$?
  [ $rc -eq 0 ] || fail "two usable CPUs: exit $rc"
  [[ "$out" =~ ^core_probe\ cpus\ ${CPUS[0]}\ ${CPUS[1]}\ one_way_ns\ ([0-9]+\.[0-9])$ ]] ||
    fail "unexpected output: '$out'"
  ns="${BASH_REMATCH[1]:-0}"
  # A cache line crosses between two CPUs in tens to thousands of ns; zero
  # or a second would mean the measurement is broken.
  awk -v ns="$ns" 'BEGIN { exit !(ns > 1 && ns < 1000000) }' || fail "implausible ${ns} ns"
else
  echo "only one usable CPU: skipping the measurement"
fi

# A CPU this process may not use cannot be pinned: exit 1, with a message.
err=$("$PROBE" "${CPUS[0]}" 1023 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] || fail "unusable CPU 1023: exit $rc, want 1"
[[ "$err" == *"cannot pin"* ]] || fail "unusable CPU 1023: message '$err'"

# Bad arguments: exit 2 with usage or a reason.
for args in "0" "0 0" "a 1" "-1 1" "0 1 2"; do
  # shellcheck disable=SC2086
  "$PROBE" $args >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "arguments '$args': exit $rc, want 2"
done

if [ $FAILURES -ne 0 ]; then
  echo "$FAILURES failure(s)" >&2
  exit 1
fi
echo "PASS"
