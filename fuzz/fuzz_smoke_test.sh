#!/usr/bin/env bash
# fuzz_smoke_test: builds every libFuzzer target of fuzz/ with clang and runs
# each for a few seconds from its seed corpus (tools/fuzz.sh), so that CI
# notices a target that no longer builds, a seed that now crashes, or a
# shallow bug. Long runs are for `bash tools/fuzz.sh all SECONDS`.
#
# Skips (passes, saying so) when clang or its libFuzzer runtime is missing.
set -uo pipefail
root="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:-hcomm}"
seconds="${HCOMM_FUZZ_SMOKE_SECONDS:-10}"
bash "$root/tools/fuzz.sh" all "$seconds"
rc=$?
if [ "$rc" -eq 3 ]; then
  echo "SKIPPED: clang++ or libclang_rt.fuzzer is not installed (bash tools/setup.sh installs clang and libclang-rt-14-dev); no fuzz target ran"
  exit 0
fi
exit "$rc"
