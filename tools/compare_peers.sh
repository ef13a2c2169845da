#!/usr/bin/env bash
# Measures hcomm beside Open MPI and Gloo on this machine, interleaved:
# every round runs each peer and then hcomm on the same scenario and size,
# so that a machine whose speed drifts (shared VMs do) treats both alike.
# Prints, per scenario and size, the median over rounds of each side's time
# and bandwidth, hcomm's speed-up (the ratio of the medians) and the median
# of the rounds' own ratios ("paired").
#
# PAIRED=1 (the default) runs one size per run, so that the two runs of a
# pair start a second or two apart: this VM's CPUs change speed for a few
# seconds at a time (4x for a 1 MiB TCP message, alike for every library),
# and a whole sweep of sizes per run lets one side's sizes meet a slow spell
# that the other's missed. PAIRED=0 sweeps all sizes in one run per side:
# faster, and noisier.
#
#   bash tools/compare_peers.sh                  # 3 rounds, all scenarios
#   ROUNDS=5 SIZES=8,4K,256K,4M,16M,64M bash tools/compare_peers.sh
#   ONLY=p2p_shm,allreduce2_shm bash tools/compare_peers.sh
#   PAIRED=0 bash tools/compare_peers.sh         # one size sweep per run
#
# Scenarios (peers: Open MPI, and MPICH for the shm 2-rank ones): p2p_shm p2p_tcp allreduce2_shm allreduce2_tcp allreduce4_shm
# allreduce4_tcp gloo2 gloo4 (Gloo's ring allreduce over loopback TCP against
# hcomm's default transports). Two-rank runs are pinned one rank per CPU on
# both sides (Open MPI binds by default; hcomm_run --bind-to core). Four
# ranks on two CPUs run as each launcher places them by default: Open MPI
# leaves them unbound when oversubscribed, hcomm_run pins them round robin
# (--bind-to auto); Open MPI also runs them bound (ompi-bound,
# --bind-to core:overload-allowed), and "best" takes its faster mode.
#
# Needs the peer harnesses built by ../shared/peers/run.sh (run it once),
# and Open MPI / Gloo installed (the same script installs them).
set -uo pipefail
cd "$(dirname "$0")/.."
PEERS="${PEERS:-$(cd .. && pwd)/shared/peers}"
# run.sh builds beside itself, or under $TMPDIR/hcomm-peers where it may not write.
PB="$PEERS/build"
[ -d "$PB" ] || PB="${TMPDIR:-/tmp}/hcomm-peers/build"
ROUNDS="${ROUNDS:-3}"
PAIRED="${PAIRED:-1}"
SIZES="${SIZES:-8,4K,256K,1M,4M,16M,64M}"
ONLY="${ONLY:-p2p_shm,p2p_tcp,allreduce2_shm,allreduce2_tcp,allreduce4_shm,allreduce4_tcp,gloo2,gloo4}"
RUNS=5
T=25  # target ms per timed run of the peers' harness

for b in mpi_bench_ompi gloo_bench; do
  if [ ! -x "$PB/$b" ]; then
    echo "compare_peers: $PB/$b is missing; run $PEERS/run.sh once first" >&2
    exit 2
  fi
done
bazel build --color=no --curses=no //tools:hcomm_bench //tools:hcomm_run //tools:core_probe \
  //tools:exchange_floor \
  >/dev/null 2>&1 ||
  { echo "compare_peers: bazel build failed" >&2; exit 1; }
BIN="$(bazel info bazel-bin 2>/dev/null)/tools"

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1
MR=(mpirun.openmpi --allow-run-as-root)
SM=(--mca btl vader,self)
TCP=(--mca btl tcp,self --mca btl_tcp_if_include lo)
OMPI_BOUND=(--bind-to core:overload-allowed)
# Set by run_round for the sizes of one run: the peers' arguments, and
# hcomm_bench's range (it sweeps powers of two from LO to HI; the sizes
# asked for are kept), up to 20000 iterations per timed run (the bench caps
# a run at about 5e7 bytes), like the peers' 25 ms runs.
PEER_ARGS=()
LO=
HI=
PAIRED_SIZES=  # the sizes of the run in progress
ROUND=0

want() { [[ ",$ONLY," == *",$1,"* ]]; }

# Waits (up to 10 s) until the last run's processes are gone: mpirun's
# helpers outlive the ranks' output by a moment and would share the CPUs
# with whatever runs next.
settle() {
  local i
  for i in $(seq 50); do
    pgrep -f 'orted|prted|hydra_pmi_proxy|mpiexec|mpi_bench_|gloo_bench|hcomm_bench' >/dev/null || break
    sleep 0.2
  done
  sleep 0.3
}

# What the machine was like around each run, in $OUT/conditions as
# "SCENARIO NAME HANDOVER_NS STEAL_PCT": core_probe's one-way cache-line
# hand-over between CPUs 0 and 1 just before the run (this VM's host places
# the two virtual CPUs anew every few seconds: about 30 ns as two threads of
# one core, 60-70 behind one L3 cache, 250-300 behind two), and the share of
# the run's CPU time that the host took away (steal, from /proc/stat).
TICK_MS=$(( 1000 / $(getconf CLK_TCK) ))
NCPU=$(nproc)
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }
before_run() {
  HANDOVER=$("$BIN/core_probe" 2>/dev/null | awk '{print $6}')
  STEAL0=$(steal_ticks)
  T0=$(date +%s%N)
}
after_run() {  # after_run SCENARIO NAME
  local dt=$(( ($(date +%s%N) - T0) / 1000000 )) ds=$(( $(steal_ticks) - STEAL0 ))
  awk -v s="$1" -v n="$2" -v h="${HANDOVER:-nan}" -v st=$(( ds * TICK_MS )) -v dt="$dt" -v c="$NCPU" \
    'BEGIN { printf "%s %s %s %.2f\n", s, n, h, (dt > 0 ? 100 * st / (dt * c) : 0) }' \
    >>"$OUT/conditions"
}

# peer SCENARIO NAME CMD...: RESULT lines -> "SCENARIO NAME BYTES TIME BUSBW"
peer() {
  local sc="$1" name="$2"; shift 2
  settle
  before_run
  timeout -k 5 300 "$@" >"$OUT/one" 2>/dev/null
  after_run "$sc" "$name"
  awk -v s="$sc" -v n="$name" -v r="$ROUND" '/^RESULT/ {print s, n, $5, $6, $10, r}' "$OUT/one" \
    >>"$OUT/results"
}
# hcomm SCENARIO NP ENV... -- ARGS...: hcomm_bench --json -> same shape,
# filed under $WHO (default hcomm)
hcomm() {
  local sc="$1" np="$2"; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  settle
  before_run
  # Output goes to a file first: a parser starting beside the run would take
  # CPU from it.
  env "${envs[@]}" timeout -k 5 300 "$BIN/hcomm_run" -n "$np" "${RUN_OPTS[@]}" -- \
    "$BIN/hcomm_bench" "$@" -b "$LO" -e "$HI" -f 2 -n 20000 --runs "$RUNS" --json \
    >"$OUT/one" 2>/dev/null
  after_run "$sc" "${WHO:-hcomm}"
  grep -o '{.*}' "$OUT/one" | python3 -c '
import json, sys
for line in sys.stdin:
    o = json.loads(line)
    print(sys.argv[1], sys.argv[3], o["bytes"], o["time_us"], o["busbw_gbs"], sys.argv[2])' \
    "$sc" "$ROUND" "${WHO:-hcomm}" >>"$OUT/results"
}
# floor SCENARIO NP: the memory's floor under an allreduce on the same ranks
# and CPUs (hcomm_bench copy: every rank copies its vector to its output at
# once, no communication; any allreduce reads the one and writes the other),
# with memcpy and with non-temporal stores (copy_stream), which write past
# the caches without reading the output first: the lower of the two counts.
floor() {
  WHO=floor hcomm "$1" "$2" -- copy -c 0
  WHO=floor-stream hcomm "$1" "$2" -- copy_stream -c 0
  xfloor "$1"
}
# xfloor SCENARIO: the exchange's floor (tools/exchange_floor): two
# processes, one per CPU, move to each other what a rank of a 2-rank
# allreduce must take in from the other (the vector's size), through shared
# memory and by cross-memory attach; the faster median counts. Ranks on one
# CPU pass each other data through its cache, so with 4 ranks on 2 CPUs
# what must cross between the CPUs is still one vector each way: the same
# floor. Sizes of 1 KiB and more.
xfloor() {
  local sc="$1" kib line shm cma
  for kib in $(python3 -c 'import sys
for s in sys.argv[1].split(","):
    s = s.strip().upper(); m = {"K": 1, "M": 1024, "G": 1 << 20}.get(s[-1:], 0)
    print((int(s[:-1]) * m) if m else int(s) // 1024)' "$PAIRED_SIZES"); do
    [ "$kib" -ge 1 ] || continue
    settle
    before_run
    # Where cross-memory attach is refused (ptrace rules), shared memory alone.
    timeout -k 5 300 "$BIN/exchange_floor" -n 2 -k "$kib" -r "$RUNS" >"$OUT/one" 2>/dev/null ||
      timeout -k 5 300 "$BIN/exchange_floor" -n 2 -k "$kib" -r "$RUNS" -m shm >"$OUT/one" \
        2>/dev/null
    after_run "$sc" xfloor
    shm=$(awk '$1 == "shm" {print $5}' "$OUT/one")
    cma=$(awk '$1 == "cma" {print $5}' "$OUT/one")
    line=$(awk -v a="${shm:-}" -v b="${cma:-}" 'BEGIN {
      if (a == "" && b == "") exit; t = (a == "" ? b : (b == "" ? a : (a + 0 < b + 0 ? a : b)));
      print t }')
    [ -n "$line" ] && echo "$sc xfloor $((kib * 1024)) $line 0 $ROUND" >>"$OUT/results"
  done
}

# run_round SIZES: every scenario asked for, over SIZES (comma-separated).
run_round() {
  PAIRED_SIZES="$1"
  PEER_ARGS=(-s "$1" -r "$RUNS" -t "$T")
  LO=$(echo "$1" | cut -d, -f1)
  HI=$(echo "$1" | tr ',' '\n' | tail -1)
  RUN_OPTS=(--bind-to core)
  if want p2p_shm; then
    peer p2p_shm ompi "${MR[@]}" -np 2 "${SM[@]}" "$PB/mpi_bench_ompi" -m pingpong "${PEER_ARGS[@]}" -c x
    [ -x "$PB/mpi_bench_mpich" ] && peer p2p_shm mpich mpirun.mpich -np 2 -bind-to core \
      "$PB/mpi_bench_mpich" -m pingpong "${PEER_ARGS[@]}" -c x
    hcomm p2p_shm 2 HCOMM_TRANSPORTS=shm -- p2p
  fi
  if want p2p_tcp; then
    peer p2p_tcp ompi "${MR[@]}" -np 2 "${TCP[@]}" "$PB/mpi_bench_ompi" -m pingpong "${PEER_ARGS[@]}" -c x
    hcomm p2p_tcp 2 HCOMM_TRANSPORTS=tcp -- p2p
  fi
  if want allreduce2_shm; then
    peer allreduce2_shm ompi "${MR[@]}" -np 2 "${SM[@]}" "$PB/mpi_bench_ompi" -m allreduce "${PEER_ARGS[@]}" -c x
    [ -x "$PB/mpi_bench_mpich" ] && peer allreduce2_shm mpich mpirun.mpich -np 2 -bind-to core \
      "$PB/mpi_bench_mpich" -m allreduce "${PEER_ARGS[@]}" -c x
    hcomm allreduce2_shm 2 HCOMM_TRANSPORTS=shm -- allreduce -c 0
    floor allreduce2_shm 2
  fi
  if want allreduce2_tcp; then
    peer allreduce2_tcp ompi "${MR[@]}" -np 2 "${TCP[@]}" "$PB/mpi_bench_ompi" -m allreduce "${PEER_ARGS[@]}" -c x
    hcomm allreduce2_tcp 2 HCOMM_TRANSPORTS=tcp -- allreduce -c 0
  fi
  if want gloo2; then
    peer gloo2 gloo "$PB/gloo_bench" -n 2 -p 0 "${PEER_ARGS[@]}" -a ring -c x
    hcomm gloo2 2 HCOMM_TRANSPORTS=shm,tcp -- allreduce -c 0
    floor gloo2 2
  fi
  RUN_OPTS=()
  if want allreduce4_shm; then
    peer allreduce4_shm ompi "${MR[@]}" -np 4 --oversubscribe "${SM[@]}" "$PB/mpi_bench_ompi" -m allreduce "${PEER_ARGS[@]}" -c x
    peer allreduce4_shm ompi-bound "${MR[@]}" -np 4 --oversubscribe "${OMPI_BOUND[@]}" "${SM[@]}" \
      "$PB/mpi_bench_ompi" -m allreduce "${PEER_ARGS[@]}" -c x
    hcomm allreduce4_shm 4 HCOMM_TRANSPORTS=shm -- allreduce -c 0
    floor allreduce4_shm 4
  fi
  if want allreduce4_tcp; then
    peer allreduce4_tcp ompi "${MR[@]}" -np 4 --oversubscribe "${TCP[@]}" "$PB/mpi_bench_ompi" -m allreduce "${PEER_ARGS[@]}" -c x
    peer allreduce4_tcp ompi-bound "${MR[@]}" -np 4 --oversubscribe "${OMPI_BOUND[@]}" "${TCP[@]}" \
      "$PB/mpi_bench_ompi" -m allreduce "${PEER_ARGS[@]}" -c x
    hcomm allreduce4_tcp 4 HCOMM_TRANSPORTS=tcp -- allreduce -c 0
  fi
  if want gloo4; then
    peer gloo4 gloo "$PB/gloo_bench" -n 4 -p 0 "${PEER_ARGS[@]}" -a ring -c x
    hcomm gloo4 4 HCOMM_TRANSPORTS=shm,tcp -- allreduce -c 0
    floor gloo4 4
  fi
}

for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  ROUND=$round
  if [ "$PAIRED" = 1 ]; then
    for size in ${SIZES//,/ }; do run_round "$size"; done
  else
    run_round "$SIZES"
  fi
done

python3 - "$OUT/results" "$SIZES" "$ROUNDS" "$OUT/conditions" "$PAIRED" <<'EOF'
import collections, statistics, sys
path, sizes, rounds, cond_path, paired = sys.argv[1:6]
def parse(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if mult > 1 else s) * mult
want = [parse(s) for s in sizes.split(",")]
data = collections.defaultdict(list)
for line in open(path):
    sc, who, b, t, bw, rnd = line.split()
    data[(sc, who, int(b))].append((float(t), float(bw), int(rnd)))
scenarios = []
for sc, _, _ in data:
    if sc not in scenarios:
        scenarios.append(sc)
print(f"# medians over {rounds} interleaved rounds, "
      + ("each size a run of its own" if paired == "1" else "all sizes in one run per side")
      + "; time in us (p2p: one way), "
      "bw = busbw in GB/s (p2p: bytes / one-way time); best = the fastest peer at that size; "
      "speed-up = the peer's median time / hcomm's; paired = the median over rounds of that "
      "round's peer time / hcomm time; "
      "min = the best round of each (this VM's two CPUs are placed anew every few seconds, "
      "which moves small-message latency by 2x for every library); "
      "conditions: per run in round order, CPU 0-1 hand-over ns (core_probe) / steal % "
      "(over 8 runs: how many found the CPUs far apart, hand-over over 150 ns); "
      "floor = hcomm_bench copy or copy_stream (the faster median) on the same ranks and "
      "CPUs (each rank copies its vector to its output, all at once: what memory alone "
      "takes); xchg = tools/exchange_floor -n 2 (two processes, one per CPU, move a "
      "vector to each other through shared memory or by cross-memory attach, the faster "
      "median: what the exchange between the CPUs alone takes); any allreduce takes at "
      "least the larger of the two (the bound), so peer/bound = the most any library could "
      "be faster than that peer in that run")
conditions = collections.defaultdict(list)
for line in open(cond_path):
    sc, who, ns, steal = line.split()
    conditions[(sc, who)].append((float(ns), float(steal)))
def describe(runs):
    if len(runs) <= 8:
        return " ".join(f"{ns:.0f}/{steal:.1f}" for ns, steal in runs)
    far = sum(1 for ns, _ in runs if ns > 150)
    return (f"{far} of {len(runs)} runs far, steal up to "
            f"{max(steal for _, steal in runs):.1f}%")
for sc in scenarios:
    peers = sorted({who for (s, who, _) in data
                    if s == sc and who not in ("hcomm", "floor", "floor-stream", "xfloor")})
    has_floor = any(s == sc and who == "floor" for (s, who, _) in data)
    print(f"\n== {sc} (peers: {', '.join(peers)})")
    for who in peers + ["hcomm"] + (["floor", "floor-stream", "xfloor"] if has_floor else []):
        print(f"   conditions {who:>10}: {describe(conditions.get((sc, who), []))}")
    print(f"{'size':>10} {'best':>10} {'peer us':>10} {'hcomm us':>10} {'peer bw':>9} "
          f"{'hcomm bw':>9} {'speed-up':>9} {'paired':>8}   {'min: peer':>10} {'hcomm':>9}"
          + (f"   {'floor us':>9} {'xchg us':>9} {'peer/bound':>10}" if has_floor else ""))
    for b in want:
        h = data.get((sc, "hcomm", b))
        best = None
        for who in peers:
            p = data.get((sc, who, b))
            if not p:
                continue
            t = statistics.median(x[0] for x in p)
            if best is None or t < best[1]:
                best = (who, t, statistics.median(x[1] for x in p), min(x[0] for x in p),
                        {x[2]: x[0] for x in p})
        if not h or best is None:
            continue
        ht, hb = statistics.median(x[0] for x in h), statistics.median(x[1] for x in h)
        label = f"{b >> 20}M" if b >= 1 << 20 else (f"{b >> 10}K" if b >= 1 << 10 else str(b))
        hmin = min(x[0] for x in h)
        ratios = [best[4][r] / t for t, _, r in h if r in best[4] and t > 0]
        pr = f"{statistics.median(ratios):7.2f}x" if ratios else f"{'-':>8}"
        floors = [statistics.median(x[0] for x in f)
                  for f in (data.get((sc, "floor", b)), data.get((sc, "floor-stream", b))) if f]
        ft = min(floors) if floors else None
        xf = data.get((sc, "xfloor", b))
        xt = statistics.median(x[0] for x in xf) if xf else None
        bound = max(t for t in (ft, xt) if t) if ft or xt else None
        fl = ""
        if bound:
            fl = (f"   {ft:9.3f}" if ft else f"   {'-':>9}") + \
                 (f" {xt:9.3f}" if xt else f" {'-':>9}") + f" {best[1] / bound:9.2f}x"
        print(f"{label:>10} {best[0]:>10} {best[1]:10.3f} {ht:10.3f} {best[2]:9.3f} {hb:9.3f} "
              f"{best[1] / ht:8.2f}x {pr}   {best[3]:10.3f} {hmin:9.3f}{fl}")
EOF
