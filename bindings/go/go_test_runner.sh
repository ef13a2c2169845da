#!/usr/bin/env bash
# sh_test entry of hcomm_go_test (tools/bzl/hcomm_go.bzl):
#
#   go_test_runner.sh TEST_BINARY [HCOMM_RUN] [-- GO_TEST_FLAGS...]
#
# Runs a `go test -c` binary verbosely; with HCOMM_RUN (the launcher), its
# absolute path is exported as $HCOMM_RUN for multi-process tests.
set -euo pipefail
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
bin="$(abs "$1")"
shift
if [[ $# -gt 0 && "$1" != -- ]]; then
  HCOMM_RUN="$(abs "$1")"
  export HCOMM_RUN
  shift
fi
[[ "${1:-}" == -- ]] && shift
exec "$bin" -test.v -test.timeout=150s "$@"
