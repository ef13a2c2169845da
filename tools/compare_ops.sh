#!/usr/bin/env bash
# hcomm's collectives beside Open MPI's on this host, interleaved round by
# round (hcomm_bench against tools/compare_ops_mpi.c, the same sizes and the
# same way of timing), and the median time of each side per op and size.
#
#   bash tools/compare_ops.sh                          # 2 ranks, 3 rounds
#   NP=4 ROUNDS=5 OPS="allgather alltoall" bash tools/compare_ops.sh
#
# Two ranks are pinned one per CPU on both sides; more ranks than CPUs are
# left unpinned on both sides (Open MPI with --oversubscribe). Open MPI runs
# over its shared-memory transport (btl vader,self). HCOMM_* variables in
# the environment reach hcomm's ranks (HCOMM_SHM_COLL=0 measures the message
# path). Needs Open MPI (mpicc.openmpi, mpirun.openmpi): `apt-get install
# openmpi-bin libopenmpi-dev`, or ../shared/peers/run.sh, which installs it.
set -uo pipefail
cd "$(dirname "$0")/.."
NP="${NP:-2}"
ROUNDS="${ROUNDS:-3}"
OPS="${OPS:-broadcast reduce allgather reduce_scatter alltoall gather scatter}"
SIZES="1024 4096 16384 65536 262144 1048576 4194304 16777216"

for tool in mpicc.openmpi mpirun.openmpi; do
  command -v "$tool" >/dev/null ||
    { echo "compare_ops: $tool is missing (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
done
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
mpicc.openmpi -O2 -o "$OUT/mpi" tools/compare_ops_mpi.c ||
  { echo "compare_ops: cannot build tools/compare_ops_mpi.c" >&2; exit 1; }
bazel build --color=no --curses=no //tools:hcomm_bench //tools:hcomm_run >/dev/null 2>&1 ||
  { echo "compare_ops: bazel build failed" >&2; exit 1; }
BIN="$(bazel info bazel-bin 2>/dev/null)/tools"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1
if [ "$NP" -le "$(nproc)" ]; then
  MPI_BIND=(--bind-to core) HCOMM_BIND=core
else
  MPI_BIND=(--oversubscribe --bind-to none) HCOMM_BIND=none
fi
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  for op in $OPS; do
    timeout -k 5 300 mpirun.openmpi --allow-run-as-root -np "$NP" "${MPI_BIND[@]}" \
      --mca btl vader,self "$OUT/mpi" "$op" $SIZES 2>/dev/null |
      awk '{print "ompi", $1, $2, $3}' >>"$OUT/results"
    timeout -k 5 300 "$BIN/hcomm_run" -n "$NP" --bind-to "$HCOMM_BIND" -- \
      "$BIN/hcomm_bench" "$op" -b 1K -e 16M -f 4 --json >"$OUT/one" 2>/dev/null
    grep -o '{.*}' "$OUT/one" | python3 -c '
import json, sys
for line in sys.stdin:
    o = json.loads(line)
    print("hcomm", sys.argv[1], o["bytes"], o["time_us"])' "$op" >>"$OUT/results"
  done
done
python3 - "$OUT/results" "$NP" "$ROUNDS" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    who, op, size, us = line.split()
    times[(op, int(size), who)].append(float(us))
print(f"# {sys.argv[2]} ranks, medians over {sys.argv[3]} interleaved rounds, time in us; "
      "speed-up = Open MPI's time / hcomm's")
print(f"{'op':>15} {'bytes':>9} {'ompi us':>10} {'hcomm us':>10} {'speed-up':>9}")
for op, size in sorted({k[:2] for k in times}):
    o, h = times.get((op, size, "ompi")), times.get((op, size, "hcomm"))
    if not o or not h:
        continue
    mo, mh = statistics.median(o), statistics.median(h)
    print(f"{op:>15} {size:>9} {mo:>10.2f} {mh:>10.2f} {mo / mh:>8.2f}x")
PY
