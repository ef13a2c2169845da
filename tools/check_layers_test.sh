#!/usr/bin/env bash
# Tests tools/check_layers.py on a small tree of its own and a query of its
# own: an allowed graph passes; each kind of forbidden arrow (a Bazel dep,
# an #include, a file too long) fails, naming the offender and the rule.
set -uo pipefail
checker="$1"
fail() { echo "FAIL: $*"; exit 1; }
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/check_layers.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# query RULE...: a bazel query XML of rules "TARGET<TAB>DEP,DEP...".
query() {
  echo '<?xml version="1.1" encoding="UTF-8" standalone="no"?><query version="2">'
  local line t deps d
  for line in "$@"; do
    t="${line%%	*}"
    deps="${line#*	}"
    echo "<rule class=\"cc_library\" name=\"$t\"><list name=\"deps\">"
    IFS=, read -ra ds <<<"$deps"
    for d in "${ds[@]}"; do echo "<label value=\"$d\"/>"; done
    echo '</list></rule>'
  done
  echo '</query>'
}
T=$'\t'
good=(
  "//c_api:hcomm_c_impl$T//core/comm:communicator,//core/p2p:request,//core/base:status,//c_api:hcomm_headers"
  "//core/comm:communicator$T//algorithms:collectives,//core/p2p:engine,//third_party/system:absl"
  "//core/p2p:engine$T//transports:registry,//core/bootstrap:job,//core/topology:placement"
  "//transports:registry$T//transports/shm:protocol,//transports/tcp:protocol,//transports:provider"
  "//transports/tcp:protocol$T//transports/tcp:tcp,//transports:transport_protocol,//c_api:transport_headers"
  "//transports/shm:shm$T//algorithms/kernels:shared_copy,//core/base:fence"
  "//algorithms:collectives$T//algorithms/kernels:reduce,//core/base:status"
  "//examples/plugin:libhcomm_uds.so$T//c_api:transport_headers"
)
mkdir -p "$work/tree/transports/tcp"
echo '#include "transports/transport.h"' >"$work/tree/transports/tcp/ok.cc"
query "${good[@]}" >"$work/good.xml"
out="$(python3 "$checker" --root "$work/tree" --query-xml "$work/good.xml")" ||
  fail "an allowed graph was refused: $out"

# expect_refused NEEDLE ARGS...: the checker exits 1 and prints NEEDLE.
expect_refused() {
  local needle="$1" rc
  shift
  out="$(python3 "$checker" "$@")"
  rc=$?
  [[ $rc -eq 1 ]] || fail "expected exit 1, got $rc: $out"
  grep -qF -- "$needle" <<<"$out" || fail "expected '$needle' in: $out"
}
# Each forbidden arrow of DESIGN.md, one at a time.
for bad in \
  "//transports/tcp:protocol$T//core/p2p:engine|//transports/tcp:protocol -> //core/p2p:engine: a transport may depend on" \
  "//transports/tcp:tcp$T//transports/shm:shm|//transports/tcp:tcp -> //transports/shm:shm" \
  "//core/p2p:engine$T//transports/shm:shm|//core/p2p:engine -> //transports/shm:shm: core/p2p may depend on" \
  "//core/p2p:engine$T//algorithms:collectives|//core/p2p:engine -> //algorithms:collectives" \
  "//algorithms:collectives$T//core/p2p:matcher|//algorithms:collectives -> //core/p2p:matcher: an algorithm may depend on" \
  "//core/base:status$T//algorithms/kernels:reduce|core/base may depend on nothing else of hcomm" \
  "//algorithms/kernels:reduce$T//core/base:spin|algorithms/kernels may depend on nothing else of hcomm" \
  "//c_api:hcomm_c_impl$T//core/p2p:engine|//c_api:hcomm_c_impl -> //core/p2p:engine: the C API shim" \
  "//examples/plugin:libhcomm_uds.so$T//transports:registry|the plugin example may depend on the public headers only"; do
  query "${good[@]}" "${bad%%|*}" >"$work/bad.xml"
  expect_refused "${bad#*|}" --root "$work/tree" --query-xml "$work/bad.xml"
done
# A forbidden #include, though no Bazel dep says so.
printf '// a transport\n#include "core/p2p/engine.h"\n' >"$work/tree/transports/tcp/bad.cc"
expect_refused 'FORBIDDEN include: transports/tcp/bad.cc:2 includes "core/p2p/engine.h"' \
  --root "$work/tree" --query-xml "$work/good.xml"
rm "$work/tree/transports/tcp/bad.cc"
# A library file too long; a test file of that length is not one.
seq 1 901 | sed 's/^/\/\/ /' >"$work/tree/transports/tcp/long.cc"
seq 1 901 | sed 's/^/\/\/ /' >"$work/tree/transports/tcp/long_test.cc"
expect_refused 'TOO LONG: transports/tcp/long.cc has 901 lines' \
  --root "$work/tree" --query-xml "$work/good.xml"
grep -q long_test <<<"$out" && fail "a test file was counted: $out"
# The graph: each package with the hcomm packages it depends on.
out="$(python3 "$checker" --root "$work/tree" --query-xml "$work/good.xml" --graph)"
grep -qxF 'transports -> transports/shm transports/tcp' <<<"$out" || fail "bad graph: $out"
echo "PASS: check_layers refuses every forbidden arrow and passes the allowed ones"
