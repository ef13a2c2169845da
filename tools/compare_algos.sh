#!/usr/bin/env bash
# Measures hcomm's allreduce algorithms against each other, interleaved:
# every round runs ring, tree and direct in turn on the same sizes, so that a
# machine whose speed drifts treats all three alike. Prints the median time
# per size and algorithm (us). This is how the selector's thresholds
# (algorithms/selector.cc) were set.
#
#   bash tools/compare_algos.sh                      # 2 ranks, TCP, 4 rounds
#   NP=4 TRANSPORTS=tcp ROUNDS=4 LO=256K HI=8M F=2 bash tools/compare_algos.sh
#
# Two ranks are pinned one per CPU (hcomm_run --bind-to core); more are
# placed by hcomm_run's default (pinned round robin where they outnumber the
# CPUs).
set -uo pipefail
cd "$(dirname "$0")/.."
NP="${NP:-2}"
TRANSPORTS="${TRANSPORTS:-tcp}"
ROUNDS="${ROUNDS:-4}"
LO="${LO:-16K}"
HI="${HI:-16M}"
F="${F:-4}"
bazel build --color=no --curses=no //tools:hcomm_bench //tools:hcomm_run >/dev/null 2>&1 ||
  { echo "compare_algos: bazel build failed" >&2; exit 1; }
BIN="$(bazel info bazel-bin 2>/dev/null)/tools"
PIN=()
[ "$NP" = 2 ] && PIN=(--bind-to core)
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  for algo in ring tree direct; do
    # Output goes to a file first: a parser beside the run would take CPU.
    HCOMM_TRANSPORTS="$TRANSPORTS" timeout -k 5 300 "$BIN/hcomm_run" -n "$NP" "${PIN[@]}" -- \
      "$BIN/hcomm_bench" allreduce -a "$algo" -b "$LO" -e "$HI" -f "$F" -n 2000 --runs 3 -c 0 \
      --json 2>/dev/null | grep -o '{.*}' | sed "s/^/$algo /" >>"$OUT"
  done
done
python3 - "$OUT" "$NP" "$TRANSPORTS" "$ROUNDS" <<'PY'
import collections, json, statistics, sys
path, np, transports, rounds = sys.argv[1:5]
times = collections.defaultdict(list)
for line in open(path):
    algo, obj = line.split(" ", 1)
    o = json.loads(obj)
    times[(o["bytes"], algo)].append(o["time_us"])
algos = ("ring", "tree", "direct")
print(f"# allreduce float32 sum, {np} ranks, transports={transports}: median us over {rounds} interleaved rounds")
print("%10s" % "bytes" + "".join("%11s" % a for a in algos) + "   fastest")
for size in sorted({k[0] for k in times}):
    med = {a: statistics.median(times[(size, a)]) for a in algos if times[(size, a)]}
    print("%10d" % size + "".join("%11.1f" % med[a] if a in med else "%11s" % "-" for a in algos)
          + "   " + min(med, key=med.get))
PY
