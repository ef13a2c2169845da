#!/usr/bin/env bash
# A transport plugin as a third party builds and loads one, from an
# installed tree alone (no Bazel): installs hcomm, checks the plugin headers
# and the installed example plugin, builds examples/plugin/uds_protocol.cc
# again against DIR/include with pkg-config, and runs the C99 p2p and
# collectives acceptance programs as 4 ranks with HCOMM_PLUGINS=that .so
# HCOMM_TRANSPORTS=uds (and the p2p one with the installed .so). Then the
# refusals: a plugin path that does not exist, and a plugin built for a
# transport ABI version this library does not know, each end init with a
# message naming the path and the reason.
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

install_sh="$(runfile tools/install)" || fail "tools/install not in the runfiles"
plugin_src="$(runfile examples/plugin/uds_protocol.cc)" || fail "uds_protocol.cc not in the runfiles"
p2p_src="$(runfile tests/acceptance/p2p_acceptance.c)" || fail "p2p_acceptance.c not in the runfiles"
coll_src="$(runfile tests/acceptance/collectives_acceptance.c)" ||
  fail "collectives_acceptance.c not in the runfiles"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/plugin_install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

RUNFILES_DIR="${RUNFILES_DIR:-$TEST_SRCDIR}" "$install_sh" --prefix="$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "install.sh failed"; }
for f in include/hcomm/hcomm_transport.h include/hcomm/protocol.hpp \
         lib/hcomm/plugins/libhcomm_uds.so; do
  [[ -e "$prefix/$f" ]] || fail "missing $prefix/$f"
done
nm -D --defined-only "$prefix/lib/hcomm/plugins/libhcomm_uds.so" | grep -q ' T hcomm_transport_plugin$' ||
  fail "the installed plugin does not export hcomm_transport_plugin"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# The plugin, from its source and the installed headers only.
mkdir -p "$work/plugin"
c++ -std=c++17 -O2 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden \
    $(pkg-config --cflags hcomm) "$plugin_src" -o "$work/plugin/libhcomm_uds.so" ||
  fail "cannot build the uds plugin against the installed headers"
for p in p2p collectives; do
  src="$p2p_src"
  [[ $p == collectives ]] && src="$coll_src"
  cc -std=c99 -Wall -Wextra -pedantic -Werror -o "$work/${p}_acceptance" "$src" \
     $(pkg-config --cflags --libs hcomm) -lm || fail "cannot compile ${p}_acceptance.c"
done

out="$work/out.txt"
# run_ok PROG PLUGIN: PROG as 4 ranks over the uds plugin at PLUGIN alone.
run_ok() {
  local prog="$1" plugin="$2" start rc r
  start="$(now)"
  HCOMM_PLUGINS="$plugin" HCOMM_TRANSPORTS=uds timeout -k 5 180 "$prefix/bin/hcomm_run" -n 4 \
    --timeout 120 -- "$work/$prog" >"$out" 2>&1
  rc=$?
  cat "$out"
  echo "--- $prog over $plugin: exited $rc after $(elapsed "$start") s"
  [[ $rc -eq 0 ]] || fail "$prog over the uds plugin exited $rc"
  for r in 0 1 2 3; do
    grep -qxF "[rank $r] ok: all" "$out" || fail "$prog over uds: rank $r did not print 'ok: all'"
  done
}
run_ok p2p_acceptance "$work/plugin/libhcomm_uds.so"
run_ok collectives_acceptance "$work/plugin/libhcomm_uds.so"
run_ok p2p_acceptance "$prefix/lib/hcomm/plugins/libhcomm_uds.so"

# What init says of a plugin it cannot use: a one-rank job is enough.
cat >"$work/init_only.c" <<'C'
#include <stdio.h>
#include <hcomm/hcomm.h>
int main(void) {
  hcomm_comm_t comm;
  hcomm_status_t s = hcomm_comm_init(NULL, &comm);
  if (s != HCOMM_SUCCESS) {
    printf("init: %s: %s\n", hcomm_status_string(s), hcomm_last_error());
    return 1;
  }
  hcomm_comm_destroy(comm);
  printf("init: ok\n");
  return 0;
}
C
cc -std=c99 -Wall -Werror -o "$work/init_only" "$work/init_only.c" $(pkg-config --cflags --libs hcomm) ||
  fail "cannot compile init_only.c"
cat >"$work/future.c" <<'C'
/* A plugin of a transport ABI this library does not know. */
#include <hcomm/hcomm_transport.h>
static struct { uint32_t abi_version, struct_size; const char* name; void* fn[40]; } table = {
    HCOMM_TRANSPORT_ABI_VERSION + 1, sizeof table, "future", {0}};
__attribute__((visibility("default"))) const hcomm_transport_v1_t* hcomm_transport_plugin(void) {
  return (const hcomm_transport_v1_t*)(const void*)&table;
}
C
cc -std=c99 -fPIC -shared -o "$work/plugin/libhcomm_future.so" "$work/future.c" \
   $(pkg-config --cflags hcomm) || fail "cannot build the future-ABI plugin"

# refused PLUGIN NEEDLE: init with that plugin fails, and says NEEDLE.
refused() {
  local rc
  HCOMM_PLUGINS="$1" timeout -k 5 60 "$prefix/bin/hcomm_run" -n 1 --timeout 30 -- \
    "$work/init_only" >"$out" 2>&1
  rc=$?
  cat "$out"
  [[ $rc -ne 0 ]] || fail "init with the plugin $1 succeeded"
  grep -qF -- "$2" "$out" || fail "init with the plugin $1 did not say: $2"
}
refused "$work/plugin/libnothere.so" \
  "HCOMM_ERR_NO_DEVICE: hcomm_comm_init: rank 0 of 1: plugin $work/plugin/libnothere.so cannot be loaded: $work/plugin/libnothere.so: cannot open shared object file"
refused "$work/plugin/libhcomm_future.so" \
  "HCOMM_ERR_NOT_SUPPORTED: hcomm_comm_init: rank 0 of 1: plugin $work/plugin/libhcomm_future.so: its table is of transport ABI version 2; this library knows version 1"
echo "PASS: the uds plugin built from an installed tree carries p2p and collectives; bad plugins are named"
