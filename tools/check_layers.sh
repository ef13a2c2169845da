#!/usr/bin/env bash
# The layering test of DESIGN.md ("Layers"): every Bazel dependency and
# #include of the library points where the arrows allow, and no library
# file is too long. Run from anywhere; needs bazel (for bazel query).
#
#   bash tools/check_layers.sh           # exit 0, or 1 naming each offender
#   bash tools/check_layers.sh --graph   # each package's hcomm dependencies
#
# tools/check_layers.py does the work; tools/check_layers_test.sh tests it.
set -uo pipefail
cd "$(dirname "$0")/.."
exec python3 tools/check_layers.py --root . "$@"
