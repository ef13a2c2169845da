#!/usr/bin/env bash
# Soak: OPS small operations on 2 ranks (alternately an 8-byte allreduce and
# an 8-byte exchange between the two ranks, every result checked; see
# mixed_ops.c -S); each rank reads its VmRSS from /proc/self/status after
# every tenth of the run. PASS when every rank's RSS grew less than 5% from
# 10% of the run (past warm-up) to its end, and the job succeeded.
#
#   tests/campaigns/soak.sh [-n OPS] [-x shm|tcp] [--short]
#
#   -n OPS      operations (default 1000000)
#   -x T        transport: shm (default) or tcp
#   --short     100000 operations (the CI smoke test)
# MIXED_OPS=PATH and HCOMM_RUN=PATH run those binaries instead of building.
# Exit status: 0 on PASS, 1 on FAIL, 2 on bad usage.
set -uo pipefail

ops=1000000
transport=shm
while (($# > 0)); do
  case "$1" in
    -n) ops="${2:-}"; shift 2 || exit 2 ;;
    -x) transport="${2:-}"; shift 2 || exit 2 ;;
    --short) ops=100000; shift ;;
    *) sed -n '8,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[[ "$ops" =~ ^[1-9][0-9]*$ && "$transport" =~ ^(shm|tcp)$ ]] ||
  { echo "usage: soak.sh [-n OPS] [-x shm|tcp] [--short]" >&2; exit 2; }

prog="${MIXED_OPS:-}" run="${HCOMM_RUN:-}"
for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [[ -n "$d" && -x "$d/hcomm/tests/campaigns/mixed_ops" ]]; then
    [[ -n "$prog" ]] || prog="$d/hcomm/tests/campaigns/mixed_ops"
    [[ -n "$run" ]] || run="$d/hcomm/tools/hcomm_run"
    break
  fi
done
if [[ -z "$prog" || -z "$run" ]]; then
  root="$(cd "$(dirname "$0")/../.." && pwd)"
  (cd "$root" && bazel build //tests/campaigns:mixed_ops //tools:hcomm_run) >&2 || exit 1
  bin="$(cd "$root" && bazel info bazel-bin 2>/dev/null)" || exit 1
  [[ -n "$prog" ]] || prog="$bin/tests/campaigns/mixed_ops"
  [[ -n "$run" ]] || run="$bin/tools/hcomm_run"
fi

out="$(mktemp "${TEST_TMPDIR:-/tmp}/soak.XXXXXX")"
trap 'rm -f "$out"' EXIT
limit=$((60 + ops / 5000))  # about 20 times what 2 ranks over tcp need here
echo "soak: hcomm_run -n 2 --timeout $limit -- mixed_ops -S -n $ops (transport $transport)"
start="$EPOCHREALTIME"
HCOMM_TRANSPORTS="$transport" "$run" -n 2 --timeout "$limit" -- "$prog" -S -n "$ops" >"$out" 2>&1
rc=$?
took="$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
grep -v '^\[rank [01]\] rss:' "$out"
echo "soak: exit status $rc after $took s"
tenth=$((ops / 10 > 0 ? ops / 10 : 1))
verdict=PASS
[[ $rc -eq 0 ]] || verdict=FAIL
for r in 0 1; do
  grep -q "^\[rank $r\] rank $r: ok: $ops ops in " "$out" || { verdict=FAIL; echo "rank $r did not finish"; }
  samples="$(awk -v r="$r" '$1 == "[rank" && $2 == r "]" && $3 == "rss:" { printf "%s%d", (n++ ? " " : ""), $9 }' "$out")"
  at10="$(awk -v r="$r" -v k="$tenth" '$2 == r "]" && $3 == "rss:" && $7 == k { print $9 }' "$out")"
  at100="$(awk -v r="$r" -v k="$ops" '$2 == r "]" && $3 == "rss:" && $7 == k { print $9 }' "$out")"
  if [[ -z "$at10" || -z "$at100" ]]; then
    echo "rank $r: no RSS samples"
    verdict=FAIL
    continue
  fi
  growth="$(awk -v a="$at10" -v b="$at100" 'BEGIN { printf "%.2f", (b - a) * 100 / a }')"
  echo "rank $r: VmRSS at 10% ($tenth ops) $at10 kB, at 100% ($ops ops) $at100 kB:" \
    "growth $growth% (every tenth, kB: $samples)"
  awk -v g="$growth" 'BEGIN { exit !(g < 5) }' || verdict=FAIL
done
echo "soak: $verdict ($ops ops on 2 ranks over $transport in $took s; RSS growth limit 5%)"
[[ "$verdict" == PASS ]]
