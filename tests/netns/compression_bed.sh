#!/usr/bin/env bash
# A test bed for wire compression: two hosts joined by a 1 Gbit/s link, on
# one machine. Two network namespaces play hosts a and b; one veth pair is
# the cable (eth0 on each side, 10.X.Y.1/24 and .2), and tc shapes the
# egress of BOTH ends to 1 Gbit/s (a tbf qdisc: rate 1gbit, burst 256kb,
# latency 50ms). The root namespace is never touched. Rank 0 runs on host a
# (which serves the store), rank 1 on host b, started as
# tests/netns/multihost_test.sh starts its ranks: `ip netns exec HOST env -i
# HCOMM_RANK=.. HCOMM_WORLD_SIZE=2 HCOMM_STORE_ADDR=.. HCOMM_JOB_TOKEN=..
# HCOMM_HOST_ID=HOST CMD`. The two ranks are on different hosts, so they
# talk over TCP across the veth, where `compression` fp16/bf16 applies.
# Bytes over the cable are each eth0's tx_bytes (a->b and b->a), read
# before and after every run; they count headers, acknowledgements and the
# store's traffic too (headers once per GSO packet of up to 64 KiB, as the
# veth sees them: less than a wire of 1500-byte frames would carry).
#
#   compression_bed.sh [check]            the quick check (//tests/netns:compression_bed_test,
#       a few seconds): allreduce of 4 MiB float sum with -z none, fp16 and
#       bf16, -c 1: every run must pass its data check (wrong 0; fp16/bf16
#       within the error bound, max_rel_err > 0), nearly all of none's
#       payload must cross the cable, and fp16 and bf16 must move 0.40..0.65
#       of none's bytes. Where tc cannot shape, it says so and runs unshaped.
#   compression_bed.sh measure [SIZES...] allreduce float sum at SIZES (default
#       1M 4M 16M 64M), hcomm_bench --json -z none, fp16, bf16 in turn for
#       each size: a table of times, speed-ups over none, max_rel_err, and the
#       bytes that crossed the cable per run. First the bed's rate (hcomm_bench
#       p2p, 64 MiB one way) and delay (p2p, 8 B one way).
#   compression_bed.sh run -- CMD [ARGS...]  CMD as rank 0 on host a and rank 1
#       on host b (relative paths from the current directory; extra variables
#       with `env VAR=VALUE CMD`); prints each rank's output and the bytes that
#       crossed the cable. Exits with the first failing rank's status; a
#       rank still running after an hour is killed (124).
#
# By hand (root, needs `ip netns`): bazel build //tests/netns:compression_bed_test,
# then bazel-bin/tests/netns/compression_bed_test measure. Knobs: BED_RATE
# (1gbit) and BED_BURST (256kb), tbf's rate and bucket. There is no added
# delay: the delay is the veth's and the stacks' (measure prints it).
#
# Every wait is bounded. The namespaces (and with them the veths and the
# qdiscs) and every process started in them are removed on exit, pass or
# fail. Prints "SKIP: ..." and exits 0 only when `ip netns add` is impossible.
set -uo pipefail
for d in "${TEST_SRCDIR:-}" "${RUNFILES_DIR:-}" "$0.runfiles" "$(dirname "$0")/../.."; do
  if [[ -n "$d" && -f "$d/hcomm/tests/acceptance/testlib.sh" ]]; then
    source "$d/hcomm/tests/acceptance/testlib.sh"
    break
  fi
done
declare -F runfile >/dev/null || { echo "FAIL: testlib.sh not in the runfiles" >&2; exit 1; }
# tc lives in /usr/sbin, which a test's PATH leaves out.
PATH="$PATH:/usr/sbin:/sbin"

usage() {
  echo "usage: $0 [check | measure [SIZES...] | run -- CMD [ARGS...]]" >&2
  exit 2
}
mode="${1:-check}"
case "$mode" in
  check) [[ $# -le 1 ]] || usage ;;
  measure) shift ;;
  run)
    shift
    [[ "${1:-}" == "--" ]] || usage
    shift
    [[ $# -ge 1 ]] || usage
    ;;
  *) usage ;;
esac

rate="${BED_RATE:-1gbit}"
burst="${BED_BURST:-256kb}"
bench=""
if [[ "$mode" != run ]]; then
  bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"
fi

# Hosts a and b, rank r on host ${hosts[r]}; run k's store listens on
# port + k.
two_hosts="$(runfile tests/netns/two_hosts.sh)" || fail "two_hosts.sh not in the runfiles"
BED_PREFIX=hcb BED_NAME=compression_bed source "$two_hosts"

# The shaping, on each end's egress. tbf lets a full bucket (burst) pass
# at the veth's own speed; its queue holds 50 ms at the rate.
shape() {
  local h
  for h in "${hosts[@]}"; do
    tc -n "$(ns_of "$h")" qdisc add dev eth0 root handle 1: tbf rate "$rate" burst "$burst" \
      latency 50ms || return 1
  done
}

setup_network || fail "could not build the namespaces (see above)"
shaped=1
if ! err="$(shape 2>&1)"; then
  # Without shaping the check of bytes and results still means something;
  # a measurement does not.
  [[ "$mode" == check ]] || fail "cannot shape the cable with tc: $err"
  echo "NOTE: cannot shape the cable with tc ($err); the check runs unshaped"
  shaped=0
fi
for h in "${hosts[@]}"; do
  echo "host $h: namespace $(ns_of "$h"), $(ip -n "$(ns_of "$h")" -4 -br addr show eth0)"
done
if ((shaped)); then
  echo "cable: veth, egress of both ends: $(tc -n "$(ns_of a)" qdisc show dev eth0 |
    sed 's/ refcnt [0-9]*//; s/^qdisc //' | paste -sd ';' | sed 's/;/; /g')"
fi

# --- runs ---------------------------------------------------------------------

tx_bytes() { ip netns exec "$(ns_of "$1")" cat /sys/class/net/eth0/statistics/tx_bytes; }

# run_ranks LABEL LIMIT CMD...: CMD as rank 0 on host a and rank 1 on host b,
# waited for up to LIMIT s. Sets dir (rank r's output in $dir/rR.out and
# .err), rank_rc[r] (124: killed at the limit), and bytes_ab / bytes_ba (tx
# bytes of a's and b's eth0 during the run). True when both ranks exit 0.
runs=0
run_ranks() {
  local label="$1" limit="$2" tok r ns a0 b0 deadline left store
  shift 2
  runs=$((runs + 1))
  dir="$work/$runs-$label"
  mkdir -p "$dir"
  tok="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  store="$subnet.1:$((port + runs))"
  if ! a0="$(tx_bytes a)" || ! b0="$(tx_bytes b)"; then
    fail "cannot read the tx counters of eth0"
  fi
  rank_pid=()
  for r in 0 1; do
    ns="$(ns_of "${hosts[r]}")"
    ip netns exec "$ns" env -i PATH=/usr/bin:/bin \
      HCOMM_RANK="$r" HCOMM_WORLD_SIZE=2 HCOMM_STORE_ADDR="$store" \
      HCOMM_JOB_TOKEN="$tok" HCOMM_HOST_ID="$ns" \
      "$@" >"$dir/r$r.out" 2>"$dir/r$r.err" </dev/null &
    rank_pid[r]=$!
  done
  deadline=$(($(date +%s) + limit))
  rank_rc=()
  for r in 0 1; do
    left=$((deadline - $(date +%s)))
    ((left > 0)) || left=1
    rank_rc[r]=0
    wait_pid "${rank_pid[r]}" "$left" || rank_rc[r]=$?
  done
  bytes_ab=$(($(tx_bytes a) - a0))
  bytes_ba=$(($(tx_bytes b) - b0))
  [[ "${rank_rc[0]}" -eq 0 && "${rank_rc[1]}" -eq 0 ]]
}

show_logs() {
  local r f
  for r in 0 1; do
    for f in out err; do
      [[ -s "$dir/r$r.$f" ]] || continue
      echo "----- rank $r (host ${hosts[r]}) std$f"
      cat "$dir/r$r.$f"
    done
  done
}

# jfield JSON KEY: the value of KEY in a one-line JSON object (quotes
# stripped).
jfield() { sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" <<<"$1" | tr -d '"'; }

# bench_run LABEL LIMIT ARGS...: hcomm_bench ARGS --json on the bed; fails
# on a failed run. Sets line (rank 0's last JSON line) and the run_ranks
# variables.
bench_run() {
  local label="$1" limit="$2"
  shift 2
  if ! run_ranks "$label" "$limit" "$bench" "$@" --json; then
    show_logs
    [[ "${rank_rc[0]}" -eq 124 || "${rank_rc[1]}" -eq 124 ]] &&
      fail "$label: hcomm_bench $* did not end within $limit s"
    fail "$label: hcomm_bench $* failed (rank 0 exit ${rank_rc[0]}, rank 1 exit ${rank_rc[1]})"
  fi
  line="$(grep '^{' "$dir/r0.out" | tail -1)"
  [[ -n "$line" ]] || { show_logs; fail "$label: hcomm_bench printed no JSON line"; }
  [[ "$(jfield "$line" wrong)" == 0 ]] || { show_logs; fail "$label: wrong data: $line"; }
  [[ "$(jfield "$line" transport)" == tcp ]] ||
    { show_logs; fail "$label: the ranks did not talk over tcp: $line"; }
}

# allreduce_run LABEL LIMIT SIZE Z [ARGS...]: a checked float sum allreduce
# of SIZE with -z Z. Also sets ops (allreduces in the run: warm-up,
# including the checked one, and timed), payload (bytes those must carry
# over the cable, both ways: a 2-rank allreduce of S bytes moves S each way
# with any algorithm) and wire (bytes that crossed it).
allreduce_run() {
  local label="$1" limit="$2" size="$3" z="$4" warm=10 iters runs_n
  shift 4
  [[ " $* " =~ \ -w\ ([0-9]+) ]] && warm="${BASH_REMATCH[1]}"
  bench_run "$label" "$limit" allreduce -b "$size" -e "$size" -d float -o sum -c 1 -z "$z" "$@"
  [[ "$(jfield "$line" compression)" == "$z" ]] || fail "$label: no \"compression\":\"$z\": $line"
  iters="$(jfield "$line" iters)"
  runs_n="$(jfield "$line" runs)"
  ops=$((runs_n * iters + (warm < iters ? warm : iters)))
  payload=$((2 * ops * $(jfield "$line" bytes)))
  wire=$((bytes_ab + bytes_ba))
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }
mb() { awk -v a="$1" 'BEGIN { printf "%.1f", a / 1e6 }'; }

# --- run: an arbitrary command on the bed -------------------------------------
if [[ "$mode" == run ]]; then
  run_ranks run 3600 "$@"
  for r in 0 1; do
    sed "s/^/[rank $r] /" "$dir/r$r.out"
    sed "s/^/[rank $r] /" "$dir/r$r.err" >&2
  done
  echo "bed: bytes over the cable: a->b $bytes_ab, b->a $bytes_ba, total $((bytes_ab + bytes_ba))"
  for r in 0 1; do
    if [[ "${rank_rc[r]}" -ne 0 ]]; then
      echo "bed: rank $r (host ${hosts[r]}) exited ${rank_rc[r]}" >&2
      exit "${rank_rc[r]}"
    fi
  done
  exit 0
fi

# --- check (the test): 4 MiB allreduce with none, fp16, bf16 ------------------
if [[ "$mode" == check ]]; then
  start="$(now)"
  declare -A wire_of
  for z in none fp16 bf16; do
    allreduce_run "$z" 60 4M "$z" -n 5 -w 1 --runs 2
    wire_of[$z]="$wire"
    rel="$(jfield "$line" max_rel_err)"
    echo "$z: ${ops} allreduces of $(jfield "$line" bytes) B, $(jfield "$line" time_us) us each;" \
      "wrong 0, max_rel_err $rel; cable a->b $bytes_ab B, b->a $bytes_ba B" \
      "($(ratio "$wire" "$payload") of the float32 payload)"
    if [[ "$z" == none ]]; then
      awk -v e="$rel" 'BEGIN { exit !(e != "" && e + 0 == 0) }' ||
        fail "none: max_rel_err $rel, expected 0 (exact): $line"
      # Proof that the data went over the cable and nothing else.
      awk -v w="$wire" -v p="$payload" 'BEGIN { exit !(w >= 0.95 * p) }' ||
        fail "none: only $wire B crossed the cable for a payload of $payload B"
    else
      awk -v e="$rel" 'BEGIN { exit !(e > 0) }' ||
        fail "$z: max_rel_err $rel: the data did not travel as 16-bit floats: $line"
      r="$(ratio "$wire" "${wire_of[none]}")"
      awk -v r="$r" 'BEGIN { exit !(r >= 0.40 && r <= 0.65) }' ||
        fail "$z moved $wire B over the cable, $r of none's ${wire_of[none]} B (want 0.40..0.65)"
      echo "$z: $r of none's bytes over the cable"
    fi
  done
  echo "PASS: fp16 and bf16 within the error bound, about half the bytes of none" \
    "($(elapsed "$start") s)"
  exit 0
fi

# --- measure ------------------------------------------------------------------
sizes=("$@")
((${#sizes[@]} > 0)) || sizes=(1M 4M 16M 64M)

# The bed itself: hcomm p2p ping-pong, one way at a time, no compression.
bench_run rate 120 p2p -b 64M -e 64M -w 1 --runs 3
bed_rate="$(awk -v g="$(jfield "$line" algbw_gbs)" 'BEGIN { printf "%.3f", g * 8 }')"
bench_run delay 60 p2p -b 8 -e 8 --runs 5
bed_delay="$(jfield "$line" time_us)"
echo "bed: tc $rate (tbf burst $burst, latency 50ms)" \
  "on both ends; measured: 64 MiB one way at $bed_rate Gbit/s (hcomm_bench p2p, median" \
  "of 3), 8 B one way in $bed_delay us (p2p, median of 5)"

declare -A t rel wireb opsn payl
for s in "${sizes[@]}"; do
  for z in none fp16 bf16; do
    allreduce_run "$z-$s" 600 "$s" "$z"
    t[$s,$z]="$(jfield "$line" time_us)"
    rel[$s,$z]="$(jfield "$line" max_rel_err)"
    wireb[$s,$z]="$wire"
    opsn[$s,$z]="$ops"
    payl[$s,$z]="$payload"
    echo "  $s -z $z: $(jfield "$line" time_us) us (busbw $(jfield "$line" busbw_gbs) GB/s)," \
      "max_rel_err ${rel[$s,$z]}, $ops allreduces, cable $(mb "$bytes_ab") + $(mb "$bytes_ba") MB"
  done
done

echo
echo "allreduce float sum, 2 ranks over the bed; time = hcomm_bench's median per allreduce;"
echo "speedup = time none / time; max_rel_err = max |got - want| / sum|x_j| (the bound g is"
# g = (1+u)^h (1+2^-24)^(n-1) - 1 with n = h = 2 ranks.
echo "$(awk 'BEGIN { printf "%.3g for fp16, %.3g for bf16",
  (1 + 2^-11)^2 * (1 + 2^-24) - 1, (1 + 2^-8)^2 * (1 + 2^-24) - 1 }')):"
printf "%8s %12s %12s %8s %12s %8s %12s %12s\n" size "none(ms)" "fp16(ms)" speedup "bf16(ms)" \
  speedup "err(fp16)" "err(bf16)"
for s in "${sizes[@]}"; do
  awk -v s="$s" -v n="${t[$s,none]}" -v f="${t[$s,fp16]}" -v b="${t[$s,bf16]}" \
    -v ef="${rel[$s,fp16]}" -v eb="${rel[$s,bf16]}" 'BEGIN {
      printf "%8s %12.2f %12.2f %8.2f %12.2f %8.2f %12.3g %12.3g\n",
        s, n / 1e3, f / 1e3, n / f, b / 1e3, n / b, ef, eb }'
done
echo
echo "bytes over the cable per run (a->b + b->a, all of hcomm_bench's allreduces: warm-up,"
echo "check and timed runs), and as a share of the float32 payload (size x 2 x allreduces):"
printf "%8s %6s %12s %12s %12s %10s %10s %10s\n" size ops "none(MB)" "fp16(MB)" "bf16(MB)" \
  "none/pl" "fp16/pl" "bf16/pl"
for s in "${sizes[@]}"; do
  printf "%8s %6s %12s %12s %12s %10s %10s %10s\n" "$s" "${opsn[$s,none]}" \
    "$(mb "${wireb[$s,none]}")" "$(mb "${wireb[$s,fp16]}")" "$(mb "${wireb[$s,bf16]}")" \
    "$(ratio "${wireb[$s,none]}" "${payl[$s,none]}")" \
    "$(ratio "${wireb[$s,fp16]}" "${payl[$s,fp16]}")" \
    "$(ratio "${wireb[$s,bf16]}" "${payl[$s,bf16]}")"
done
