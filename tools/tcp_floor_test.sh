#!/bin/bash
# Tests of tools/tcp_floor: its report, its check of the sums, its exit
# statuses.
# Usage: tcp_floor_test.sh PATH_TO_TCP_FLOOR   (Bazel passes $(location :tcp_floor))
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PATH_TO_TCP_FLOOR" >&2
  exit 2
fi
FLOOR="$1"
FAILURES=0
fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }

ncpus=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')

# check PROCS KIB: a short run, and every line of its report.
check() {
  local procs="$1" kib="$2" out rc
  out=$("$FLOOR" -n "$procs" -k "$kib" -r 3 -i 3)
  rc=$?
  [ $rc -eq 0 ] || { fail "-n $procs -k $kib: exit $rc"; return; }
  local bind="one per CPU"
  [ "$procs" -le "$ncpus" ] || bind="unbound (more processes than CPUs)"
  local want="tcp_floor: $procs processes, $kib KiB float32 sum,"
  want+=" halving-doubling over loopback TCP, $bind"
  [ "$(sed -n 1p <<<"$out")" = "$want" ] || fail "-n $procs: first line '$(sed -n 1p <<<"$out")'"
  local line
  line=$(sed -n 2p <<<"$out")
  [[ "$line" =~ ^best_us\ ([0-9]+\.[0-9])\ median_us\ ([0-9]+\.[0-9])$ ]] ||
    { fail "-n $procs: second line '$line'"; return; }
  # Best no slower than the median; an allreduce over sockets takes more
  # than a microsecond and less than a second.
  awk -v b="${BASH_REMATCH[1]}" -v m="${BASH_REMATCH[2]}" \
    'BEGIN { exit !(b <= m && b > 1 && m < 1000000) }' || fail "-n $procs: '$line'"
  [ "$(wc -l <<<"$out")" -eq 2 ] || fail "-n $procs: $(wc -l <<<"$out") lines"
}
check 2 64
check 4 1
check 8 16  # rounds with three partners each, more processes than CPUs here

# -u: an urgent exchange beside a bulk allreduce, on two processes.
out=$("$FLOOR" -u 8 -k 1024 -r 3)
rc=$?
if [ $rc -ne 0 ]; then
  fail "-u 8: exit $rc"
else
  want="tcp_floor: 2 processes, a 8-byte exchange on one loopback TCP connection while a 1024 KiB"
  want+=" float32 sum runs on another, unbound"
  [ "$(sed -n 1p <<<"$out")" = "$want" ] || fail "-u 8: first line '$(sed -n 1p <<<"$out")'"
  line=$(sed -n 2p <<<"$out")
  num='([0-9]+\.[0-9])'
  if [[ "$line" =~ ^urgent_best_us\ $num\ urgent_median_us\ $num\ bulk_alone_us\ $num\ bulk_median_us\ $num$ ]]; then
    awk -v b="${BASH_REMATCH[1]}" -v m="${BASH_REMATCH[2]}" -v a="${BASH_REMATCH[3]}" \
      'BEGIN { exit !(b <= m && b > 1 && m < 1000000 && a > 1) }' || fail "-u 8: '$line'"
  else
    fail "-u 8: second line '$line'"
  fi
  [ "$(wc -l <<<"$out")" -eq 2 ] || fail "-u 8: $(wc -l <<<"$out") lines"
fi

# Bad arguments: exit 2 with the reason.
for args in "-n 1" "-n 3" "-n 6" "-n 128" "-k 0" "-k x" "-r 0" "-r 65" "-i 0" "-x 1" "-n" \
  "-u 0" "-u 70000" "-u 8 -n 4"; do
  # shellcheck disable=SC2086
  err=$("$FLOOR" $args 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 2 ] || fail "arguments '$args': exit $rc, want 2"
  [[ "$err" == tcp_floor:* ]] || fail "arguments '$args': message '$err'"
done

if [ $FAILURES -ne 0 ]; then
  echo "$FAILURES failure(s)" >&2
  exit 1
fi
echo "PASS"
