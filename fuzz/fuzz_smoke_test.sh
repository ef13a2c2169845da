#!/usr/bin/env bash
# fuzz_smoke_test: builds every libFuzzer target of fuzz/ with clang and runs
# each for a few seconds from its seed corpus (tools/fuzz.sh), so that CI
# notices a target that no longer builds, a seed that now crashes, or a
# shallow bug. Long runs are for `bash tools/fuzz.sh all SECONDS`.
#
# Fails when clang or its libFuzzer runtime is missing: tools/setup.sh
# installs both (packages clang and libclang-rt-14-dev), so a machine without
# them has a broken setup, and a pass would hide that nothing was fuzzed.
set -uo pipefail
root="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:-hcomm}"
seconds="${HCOMM_FUZZ_SMOKE_SECONDS:-3}"
HCOMM_FUZZ_OPT="${HCOMM_FUZZ_OPT:--O0}" bash "$root/tools/fuzz.sh" all "$seconds"
rc=$?
if [ "$rc" -eq 3 ]; then
  echo "FAILED: ${CXX:-clang++} or its libFuzzer runtime (libclang_rt.fuzzer) is missing, so no" \
       "fuzz target ran: install the Debian packages clang and libclang-rt-14-dev" \
       "(bash tools/setup.sh does)"
  exit 1
fi
exit "$rc"
