#!/usr/bin/env bash
# Installs hcomm into a temporary prefix with tools/install.sh, then, using
# only that tree (no Bazel): compiles the C99 acceptance programs (p2p and
# collectives) with pkg-config, runs each as 4 ranks with the installed
# hcomm_run, and runs the installed hcomm_bench (p2p and allreduce) and
# hcomm-visualize on its JSON. Also checks the library exports hcomm_* only.
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

install_sh="$(runfile tools/install)" || fail "tools/install not in the runfiles"
src="$(runfile tests/acceptance/p2p_acceptance.c)" || fail "p2p_acceptance.c not in the runfiles"
# collectives_acceptance.c: from the runfiles when the test's data lists it
# (//tests/acceptance:collectives_acceptance.c), else next to the source
# that p2p_acceptance.c's runfile links to.
coll_src="$(runfile tests/acceptance/collectives_acceptance.c 2>/dev/null)" ||
  coll_src="$(dirname "$(readlink -f "$src")")/collectives_acceptance.c"
[[ -f "$coll_src" ]] || fail "collectives_acceptance.c is neither in the runfiles nor at $coll_src"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

RUNFILES_DIR="${RUNFILES_DIR:-$TEST_SRCDIR}" "$install_sh" --prefix="$prefix" ||
  fail "install.sh failed"
for f in include/hcomm/hcomm.h lib/libhcomm_c.so lib/pkgconfig/hcomm.pc bin/hcomm_run \
         bin/hcomm_bench bin/hcomm-visualize; do
  [[ -e "$prefix/$f" ]] || fail "missing $prefix/$f"
done

# Only hcomm_* symbols are exported (global: an upper-case type, or u; a local
# one, such as the profiler's initial-exec thread-local cursor, which the
# dynamic table lists for its TLS relocation, links to nothing outside),
# and the SONAME is set.
bad="$(nm -D --defined-only "$prefix/lib/libhcomm_c.so" | awk '$3 != "" && $2 ~ /^[A-Zu]$/ {print $3}' |
       sed 's/@.*//' | grep -v '^hcomm_' | grep -v '^HCOMM_' || true)"
[[ -z "$bad" ]] || fail "libhcomm_c.so exports non-hcomm symbols: $bad"
readelf -d "$prefix/lib/libhcomm_c.so" | grep -q 'SONAME.*libhcomm_c.so' || fail "no SONAME"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[[ "$(pkg-config --modversion hcomm)" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "bad pkg-config version"
# Plain C99 with warnings as errors: the header needs no C++ and no extensions.
cc -std=c99 -Wall -Wextra -pedantic -Werror -o "$work/p2p_acceptance" "$src" \
   $(pkg-config --cflags --libs hcomm) || fail "cannot compile against the installed tree"
cc -std=c99 -Wall -Wextra -pedantic -Werror -o "$work/collectives_acceptance" "$coll_src" \
   $(pkg-config --cflags --libs hcomm) -lm ||
  fail "cannot compile collectives_acceptance.c against the installed tree"

out="$work/out.txt"
timeout -k 5 180 "$prefix/bin/hcomm_run" -n 4 --timeout 120 -- "$work/p2p_acceptance" \
  >"$out" 2>&1
rc=$?
cat "$out"
[[ $rc -eq 0 ]] || fail "installed acceptance run exited $rc"
for r in 0 1 2 3; do
  grep -qxF "[rank $r] ok: all" "$out" || fail "rank $r did not print 'ok: all'"
done

timeout -k 5 180 "$prefix/bin/hcomm_run" -n 4 --timeout 120 -- "$work/collectives_acceptance" \
  >"$out" 2>&1
rc=$?
cat "$out"
[[ $rc -eq 0 ]] || fail "installed collectives acceptance run exited $rc"
for r in 0 1 2 3; do
  grep -qxF "[rank $r] ok: all" "$out" ||
    fail "collectives_acceptance: rank $r did not print 'ok: all'"
done

timeout -k 5 120 "$prefix/bin/hcomm_run" -n 2 --timeout 60 -- "$prefix/bin/hcomm_bench" p2p \
  -b 8 -e 64K -f 64 -n 5 -w 1 --json >"$out" 2>&1 || { cat "$out"; fail "installed hcomm_bench failed"; }
cat "$out"
grep -q '"op":"p2p"' "$out" || fail "hcomm_bench printed no JSON line"
timeout -k 5 120 "$prefix/bin/hcomm_run" -n 2 --timeout 60 -- "$prefix/bin/hcomm_bench" \
  allreduce -b 8 -e 64K -f 64 -n 5 -w 1 --json >"$out" 2>&1 ||
  { cat "$out"; fail "installed hcomm_bench allreduce failed"; }
cat "$out"
grep -q '"op":"allreduce".*"wrong":0' "$out" || fail "hcomm_bench allreduce printed no clean JSON line"

# hcomm-visualize: an executable that runs with the system's python3, and
# draws the bench's own output (hcomm_run's "[rank 0] " prefixes included).
[[ -x "$prefix/bin/hcomm-visualize" ]] || fail "bin/hcomm-visualize is not executable"
(cd "$work" && env -i PATH=/usr/bin:/bin "$prefix/bin/hcomm-visualize" --help) \
  >"$work/help.txt" 2>&1 || { cat "$work/help.txt"; fail "hcomm-visualize --help failed"; }
grep -q '^usage: hcomm-visualize' "$work/help.txt" || fail "hcomm-visualize --help: no usage line"
"$prefix/bin/hcomm-visualize" "$out" -o "$work/bench.html" ||
  fail "hcomm-visualize failed on bench JSON"
grep -q '<path class="series" data-series="allreduce [^"]*2 ranks"' "$work/bench.html" ||
  fail "hcomm-visualize drew no allreduce series from hcomm_bench's JSON"
echo "PASS: installed tree works without Bazel"
