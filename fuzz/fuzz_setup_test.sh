#!/usr/bin/env bash
# fuzz_setup_test: the smoke test (fuzz_smoke_test.sh) fails, naming the
# packages, where clang or its libFuzzer runtime is missing: tools/setup.sh
# installs both, so their absence is a broken setup, not a reason to skip.
# Cheap: tools/fuzz.sh stops at its checks, before building anything.
set -uo pipefail
root="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:-hcomm}"
fails=0

# expect_failure WHAT CXX: the smoke test with that compiler must exit
# non-zero, say FAILED and name the missing package.
expect_failure() {
  local what="$1" out rc
  out="$(CXX="$2" bash "$root/fuzz/fuzz_smoke_test.sh" 2>&1)"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "FAIL ($what): the smoke test passed (exit 0):"; echo "$out" | sed 's/^/  /'
    fails=$((fails + 1))
  elif ! grep -q 'libclang-rt-14-dev' <<<"$out" || ! grep -q 'FAILED' <<<"$out"; then
    echo "FAIL ($what): exit $rc without FAILED and the package to install:"
    echo "$out" | sed 's/^/  /'
    fails=$((fails + 1))
  else
    echo "ok ($what): exit $rc: $(grep FAILED <<<"$out" | head -1)"
  fi
}

expect_failure "no compiler" "/nonexistent/clang++"

# A "compiler" whose resource directory has no libclang_rt.fuzzer.
fake="$TEST_TMPDIR/fake-clang++"
mkdir -p "$TEST_TMPDIR/empty-resource-dir"
printf '#!/bin/sh\necho "%s"\n' "$TEST_TMPDIR/empty-resource-dir" > "$fake"
chmod +x "$fake"
expect_failure "no libFuzzer runtime" "$fake"

[ "$fails" -eq 0 ]
