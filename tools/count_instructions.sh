#!/usr/bin/env bash
# Instructions per call of one hcomm C function, counted by valgrind's
# callgrind on rank 0 of a 2-rank hcomm_bench while rank 1 runs natively.
# Unlike times on a virtual machine, whose CPU placement moves a small
# message's latency by 2x from one second to the next, the count repeats
# (a collective's to the instruction, a receive's within ~2%), so it can
# judge a change of a few percent in a small call. The shared-memory
# collectives' wait for the other rank (ShmCollective::WaitCounters) is left
# out, its count depending on how long that rank took; a receive's looks are
# not (rank 0, the slow one, mostly finds its message at the first look).
#
#   bash tools/count_instructions.sh allreduce -b 8 -e 8     # hcomm_allreduce, shm
#   FN=hcomm_send bash tools/count_instructions.sh p2p -b 8 -e 8
#   FN=hcomm_recv TR=tcp bash tools/count_instructions.sh p2p -b 8 -e 8
#
# FN: the function (default hcomm_<subcommand>); TR: HCOMM_TRANSPORTS
# (default shm); N: iterations (default 20000). Needs valgrind
# (apt-get install valgrind).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -ge 1 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "count_instructions: needs valgrind (apt-get install valgrind)" >&2
  exit 2
fi
SUB="$1"
FN="${FN:-hcomm_$SUB}"
TR="${TR:-shm}"
N="${N:-20000}"
bazel build --color=no --curses=no //tools:hcomm_bench //tools:hcomm_run >/dev/null 2>&1 ||
  { echo "count_instructions: bazel build failed" >&2; exit 1; }
BIN="$(bazel info bazel-bin 2>/dev/null)/tools"
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
cat >"$DIR/rank.sh" <<EOF
#!/usr/bin/env bash
if [ "\$RANK" = 0 ]; then
  exec valgrind --tool=callgrind --callgrind-out-file=$DIR/out "\$@" 2>/dev/null
fi
exec "\$@"
EOF
chmod +x "$DIR/rank.sh"
# Rank 0 runs ~50x slower under valgrind: a long timeout for both.
HCOMM_TRANSPORTS="$TR" HCOMM_TIMEOUT_MS=600000 timeout -k 5 900 "$BIN/hcomm_run" -n 2 \
  --timeout 800 -- "$DIR/rank.sh" "$BIN/hcomm_bench" "$@" -n "$N" -w 0 --runs 1 -c 0 \
  >"$DIR/bench" 2>&1 || { echo "count_instructions: the benchmark failed:" >&2;
                          tail -5 "$DIR/bench" >&2; exit 1; }
callgrind_annotate --inclusive=yes "$DIR/out" >"$DIR/inclusive" 2>/dev/null
[ -n "${KEEP:-}" ] && cp "$DIR/inclusive" "$KEEP" && cp "$DIR/out" "$KEEP.out"
python3 - "$DIR/inclusive" "$FN" "$N" <<'PY'
import re, sys
path, fn, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cost = {}
for line in open(path):
    m = re.match(r'\s*([\d,]+) \([^)]*\)\s+(\S.*?)\s*$', line)
    if m and not m.group(2).startswith('=>'):
        cost.setdefault(m.group(2), int(m.group(1).replace(',', '')))
def name(k):  # "file:ns::Class::Fn(args) [lib]" -> "ns::Class::Fn"
    k = k.split(' [')[0]
    k = k.split(':', 1)[1] if re.match(r'^[^:(]*\.\w+:', k) or k.startswith('???:') else k
    return k.split('(')[0]
total = max((v for k, v in cost.items() if name(k) == fn), default=0)
if total == 0:
    sys.exit('count_instructions: %s was not called' % fn)
wait = max((v for k, v in cost.items() if name(k) == 'hcomm::ShmCollective::WaitCounters'),
           default=0)
print('%s: %.0f instructions per call (%d calls; %.0f per call of waiting left out)'
      % (fn, (total - min(wait, total)) / n, n, wait / n))
PY
