#!/usr/bin/env bash
# Runs hcomm's whole test suite (installing what it needs first) and ends
# with the line "N passed, N failed" (test targets).
#
#   bash tools/test.sh                 # everything
#   bash tools/test.sh //core/...      # a subset
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }
export HOME="${HOME:-/root}"

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(//...)
FLAGS=(--color=no --curses=no --show_progress_rate_limit=30 --test_output=errors)
if [ -n "${CI:-}" ]; then
  trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT
fi

log="$(mktemp /tmp/hcomm-test.XXXXXX.log)"
bazel test "${FLAGS[@]}" "${targets[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED in ' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$log")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # the build itself failed before any test ran
fi
rm -f "$log"
echo "${passed} passed, ${failed} failed"
exit "$rc"
