#!/usr/bin/env bash
# hcomm_bench end to end: the p2p table on 2 ranks, --json on 3 ranks (rank 2
# idle), and the usage errors (unknown OP, bad flag, a 1-rank job).
set -uo pipefail
source "$(dirname "$0")/testlib.sh"

launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"
out="$(mktemp "${TEST_TMPDIR:-/tmp}/hcomm_bench.XXXXXX")"
trap 'rm -f "$out"' EXIT

run() {  # run SECONDS CMD...: output in $out, exit status in $rc
  local secs="$1"
  shift
  rc=0
  timeout -k 5 "$secs" "$@" >"$out" 2>&1 || rc=$?
}

# --- table: 8 B .. 1 MiB, factor 2 -> 18 rows ------------------------------
run 150 "$launcher" -n 2 --timeout 120 -- "$bench" p2p -b 8 -e 1M -n 20 -w 2
cat "$out"
[[ $rc -eq 0 ]] || fail "p2p table run exited $rc"
grep -q '^\[rank 0\] # hcomm_bench p2p: 2 ranks, transport ' "$out" || fail "no header line"
rows="$(grep -cE '^\[rank 0\] +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' "$out")"
[[ "$rows" -eq 18 ]] || fail "expected 18 result rows with #wrong 0, got $rows"
for size in 8 1024 1048576; do
  grep -qE "^\[rank 0\] +$size " "$out" || fail "no row for $size bytes"
done
grep -q '^\[rank 0\] # Out of bounds values : 0 OK' "$out" || fail "no 'Out of bounds' footer"
if grep -q '^\[rank 1\]' "$out"; then fail "rank 1 printed something"; fi

# --- json: 1K .. 64K, factor 4, 3 ranks ------------------------------------
run 150 "$launcher" -n 3 --timeout 120 -- "$bench" p2p -b 1K -e 64K -f 4 --json
cat "$out"
[[ $rc -eq 0 ]] || fail "p2p --json run exited $rc"
json='^\[rank 0\] \{"op":"p2p","bytes":[0-9]+,"time_us":[0-9.]+,"algbw_gbs":[0-9.]+,'
json+='"busbw_gbs":[0-9.]+,"wrong":0(,[^{}]*)?\}$'
n="$(grep -cE "$json" "$out")"
[[ "$n" -eq 4 ]] || fail "expected 4 JSON lines, got $n"
for size in 1024 4096 16384 65536; do
  grep -q "\"bytes\":$size," "$out" || fail "no JSON line for $size bytes"
done
others="$(grep -vcE "$json" "$out")"
[[ "$others" -eq 0 ]] || fail "--json printed $others lines that are not JSON results"

# --- usage errors ----------------------------------------------------------
run 10 "$bench" frobnicate
[[ $rc -eq 2 ]] || { cat "$out"; fail "unknown OP exited $rc, expected 2"; }
grep -q 'usage: hcomm_bench' "$out" || fail "unknown OP printed no usage"
run 10 "$bench" p2p -b 1X
[[ $rc -eq 2 ]] || { cat "$out"; fail "bad -b exited $rc, expected 2"; }
run 10 "$bench" p2p -b 1M -e 1K
[[ $rc -eq 2 ]] || { cat "$out"; fail "-e < -b exited $rc, expected 2"; }
run 10 "$bench" --help
[[ $rc -eq 0 ]] || fail "--help exited $rc"
run 60 "$launcher" -n 1 --timeout 30 -- "$bench" p2p -b 8 -e 8
cat "$out"
[[ $rc -eq 2 ]] || fail "a 1-rank job exited $rc, expected 2"
grep -q 'needs at least 2 ranks' "$out" || fail "no 'needs at least 2 ranks' message"

echo "PASS: hcomm_bench"
