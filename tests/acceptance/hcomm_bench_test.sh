#!/usr/bin/env bash
# hcomm_bench end to end: the p2p table on 2 ranks, --json on 3 ranks (rank 2
# idle), the collectives (a --json sweep over every op and a table, 3 ranks),
# sizes too large to allocate, and the usage errors (unknown OP, bad flag,
# bad -d/-o/-a/-r, a 1-rank job).
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
# A JSON number (nlohmann/json writes small ones with an exponent: 9.6e-05).
num='[0-9.]+(e[-+][0-9]+)?'
json="^\\[rank 0\\] \\{\"op\":\"p2p\",\"bytes\":[0-9]+,\"time_us\":$num,\"algbw_gbs\":$num,"
json+="\"busbw_gbs\":$num,\"wrong\":0(,[^{}]*)?\\}\$"
n="$(grep -cE "$json" "$out")"
[[ "$n" -eq 4 ]] || fail "expected 4 JSON lines, got $n"
for size in 1024 4096 16384 65536; do
  grep -q "\"bytes\":$size," "$out" || fail "no JSON line for $size bytes"
done
others="$(grep -vcE "$json" "$out")"
[[ "$others" -eq 0 ]] || fail "--json printed $others lines that are not JSON results"
# The rank count has the collectives' key.
n="$(grep -c '"nranks":3,' "$out")"
[[ "$n" -eq 4 ]] || fail "expected \"nranks\":3 on 4 p2p JSON lines, got $n"

# --- collectives: a quick --json sweep on 3 ranks ----------------------------
# 8 B .. 32 KiB, factor 16 -> 4 lines per op, every one with "wrong":0.
coll_json="^\\[rank 0\\] \\{\"op\":\"%s\",\"bytes\":[0-9]+,\"time_us\":$num,\"algbw_gbs\":$num,"
coll_json+="\"busbw_gbs\":$num,"'"wrong":0,"count":[0-9]+,"type":"%s","redop":"%s",'
coll_json+='"root":%s,"algo":"%s","nranks":3(,[^{}]*)?\}$'
while read -r op flags type redop root algo; do
  flags="${flags//_/ }"  # flags are written with '_' for spaces
  # shellcheck disable=SC2086
  run 150 "$launcher" -n 3 --timeout 120 -- "$bench" "$op" -b 8 -e 32K -f 16 -n 5 -w 1 \
    --runs 3 $flags --json </dev/null
  cat "$out"
  [[ $rc -eq 0 ]] || fail "$op $flags --json exited $rc"
  # shellcheck disable=SC2059
  re="$(printf "$coll_json" "$op" "$type" "$redop" "$root" "$algo")"
  n="$(grep -cE "$re" "$out")"
  [[ "$n" -eq 4 ]] || fail "$op $flags: expected 4 JSON lines with \"wrong\":0, got $n"
  others="$(grep -vcE "$re" "$out")"
  [[ "$others" -eq 0 ]] || fail "$op $flags --json printed $others other lines"
done <<'EOF_SWEEP'
allreduce      -a_ring       float    sum  -1 ring
allreduce      -d_float16_-o_avg half avg -1 auto
broadcast      -r2_-adirect_-dint32 int32 none 2 direct
reduce         -r1_-atree_-dbf16_-omax bfloat16 max 1 tree
allgather      -duint8       uint8    none -1 auto
reduce_scatter -dint64_-oprod int64   prod -1 auto
alltoall       --datatype=float64_--algo=ring double none -1 ring
gather         -r1_-dint8    int8     none 1 auto
gather         -r2_-atree_-dfloat64 double none 2 tree
scatter        -r2_-duint32  uint32   none 2 auto
scatter        -r0_-adirect_-dbf16 bfloat16 none 0 direct
copy           -dint8        int8     none -1 auto
copy_stream    -duint8       uint8    none -1 auto
EOF_SWEEP

# --- collectives: the nccl-tests table ------------------------------------------
run 150 "$launcher" -n 3 --timeout 120 -- "$bench" allreduce -b 1K -e 1M -f 32 -n 5 -w 1 \
  -a tree
cat "$out"
[[ $rc -eq 0 ]] || fail "allreduce table run exited $rc"
grep -q '^\[rank 0\] # hcomm_bench allreduce: 3 ranks, transport .*, algorithm tree' "$out" ||
  fail "no collective header line"
grep -qE '^\[rank 0\] # +size +count +type +redop +root +time +algbw +busbw +#wrong$' "$out" ||
  fail "no nccl-tests column header"
rows="$(grep -cE '^\[rank 0\] +[0-9]+ +[0-9]+ +float +sum +-1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' "$out")"
[[ "$rows" -eq 3 ]] || fail "expected 3 allreduce rows with #wrong 0, got $rows"
grep -qE '^\[rank 0\] +1048576 +262144 +float ' "$out" || fail "no row for 1 MiB / 262144 floats"
grep -q '^\[rank 0\] # Out of bounds values : 0 OK' "$out" || fail "no 'Out of bounds' footer"
if grep -qE '^\[rank [12]\]' "$out"; then fail "a rank other than 0 printed something"; fi

# --- sizes too large to allocate -----------------------------------------------
# Rounding a size within a page of 2^64 up to whole pages used to wrap to a
# 4 KiB buffer that the count then overran (SIGSEGV). Such sizes fail like
# any allocation that is too large.
for size in 18446744073709551615 18446744073709547521 9223372036854775808; do
  for op in p2p allreduce broadcast allgather; do
    run 60 "$launcher" -n 2 --timeout 30 -- "$bench" "$op" -b "$size" -e "$size"
    [[ $rc -eq 1 ]] || { cat "$out"; fail "$op -b $size -e $size exited $rc, expected 1"; }
    grep -q "^\[rank [01]\] hcomm_bench: cannot allocate [0-9]* bytes for the largest size (-e, --maxbytes); lower it$" "$out" ||
      { cat "$out"; fail "$op -b $size -e $size: no 'cannot allocate' message"; }
  done
done

# --- usage errors ----------------------------------------------------------
run 10 "$bench" frobnicate
[[ $rc -eq 2 ]] || { cat "$out"; fail "unknown OP exited $rc, expected 2"; }
grep -q 'usage: hcomm_bench' "$out" || fail "unknown OP printed no usage"
run 10 "$bench" p2p -b 1X
[[ $rc -eq 2 ]] || { cat "$out"; fail "bad -b exited $rc, expected 2"; }
run 10 "$bench" p2p -b 1M -e 1K
[[ $rc -eq 2 ]] || { cat "$out"; fail "-e < -b exited $rc, expected 2"; }
run 10 "$bench" allreduce -d float17
[[ $rc -eq 2 ]] || { cat "$out"; fail "bad -d exited $rc, expected 2"; }
grep -q "bad -d 'float17'" "$out" || fail "bad -d printed no message"
run 10 "$bench" allreduce -o median
[[ $rc -eq 2 ]] || { cat "$out"; fail "bad -o exited $rc, expected 2"; }
grep -q "bad -o 'median'" "$out" || fail "bad -o printed no message"
run 10 "$bench" reduce_scatter -a butterfly
[[ $rc -eq 2 ]] || { cat "$out"; fail "bad -a exited $rc, expected 2"; }
grep -q "bad -a 'butterfly'" "$out" || fail "bad -a printed no message"
run 60 "$launcher" -n 2 --timeout 30 -- "$bench" broadcast -r 2 -b 8 -e 8
[[ $rc -eq 2 ]] || { cat "$out"; fail "-r 2 on 2 ranks exited $rc, expected 2"; }
grep -q 'not a rank' "$out" || fail "-r out of range printed no message"
run 10 "$bench" --help
[[ $rc -eq 0 ]] || fail "--help exited $rc"
run 60 "$launcher" -n 1 --timeout 30 -- "$bench" p2p -b 8 -e 8
cat "$out"
[[ $rc -eq 2 ]] || fail "a 1-rank job exited $rc, expected 2"
grep -q 'needs at least 2 ranks' "$out" || fail "no 'needs at least 2 ranks' message"

echo "PASS: hcomm_bench"
