#!/bin/bash
# Tests of tools/exchange_floor: its report for each way, its check of the
# bytes, its exit statuses.
# Usage: exchange_floor_test.sh PATH_TO_EXCHANGE_FLOOR   (Bazel passes $(location :exchange_floor))
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PATH_TO_EXCHANGE_FLOOR" >&2
  exit 2
fi
FLOOR="$1"
FAILURES=0
fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }

ncpus=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')

# check PROCS KIB WAYS [ARGS...]: a short run, and every line of its report.
check() {
  local procs="$1" kib="$2" ways="$3" out rc
  shift 3
  out=$("$FLOOR" -n "$procs" -k "$kib" -r 3 -i 3 "$@")
  rc=$?
  [ $rc -eq 0 ] || { fail "-n $procs -k $kib $*: exit $rc"; return; }
  local bind="one per CPU"
  [ "$procs" -le "$ncpus" ] || bind="unbound (more processes than CPUs)"
  # 2(N-1)/N of the vector, in whole cache lines.
  local bytes=$(( kib * 1024 * 2 * (procs - 1) / procs / 64 * 64 ))
  local want="exchange_floor: $procs processes, $kib KiB vector,"
  want+=" $bytes bytes to the next process, $bind"
  [ "$(sed -n 1p <<<"$out")" = "$want" ] || fail "-n $procs: first line '$(sed -n 1p <<<"$out")'"
  local i=2 way line
  for way in $ways; do
    line=$(sed -n ${i}p <<<"$out")
    i=$((i + 1))
    [[ "$line" =~ ^$way\ best_us\ ([0-9]+\.[0-9])\ median_us\ ([0-9]+\.[0-9])$ ]] ||
      { fail "-n $procs $*: line '$line', want $way"; continue; }
    # Best no slower than the median; moving bytes takes time, and less
    # than a second.
    awk -v b="${BASH_REMATCH[1]}" -v m="${BASH_REMATCH[2]}" \
      'BEGIN { exit !(b <= m && b > 0 && m < 1000000) }' || fail "-n $procs: '$line'"
  done
  [ "$(wc -l <<<"$out")" -eq $((i - 1)) ] ||
    fail "-n $procs $*: $(wc -l <<<"$out") lines"
}
check 2 64 "shm cma"
check 2 1000 "shm" -m shm -c 64      # chunks that wrap the window many times
check 2 100 "cma" -m cma
check 3 1024 "shm cma"               # runs that do not start on the first buffer
check 4 1 "shm cma"                  # less than a chunk
check 8 300 "shm cma"                # more processes than CPUs here

# Bad arguments: exit 2 with the reason.
for args in "-n 1" "-n 65" "-k 0" "-k x" "-c 2" "-c 8192" "-r 0" "-r 65" "-i 0" "-m tcp" \
  "-x 1" "-n"; do
  # shellcheck disable=SC2086
  err=$("$FLOOR" $args 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 2 ] || fail "arguments '$args': exit $rc, want 2"
  [[ "$err" == exchange_floor:* ]] || fail "arguments '$args': message '$err'"
done

if [ $FAILURES -ne 0 ]; then
  echo "$FAILURES failure(s)" >&2
  exit 1
fi
echo "PASS"
