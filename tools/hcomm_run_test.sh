#!/bin/bash
# Tests of the hcomm_run launcher (tools/hcomm_run.cc), run as real processes.
# Usage: hcomm_run_test.sh PATH_TO_HCOMM_RUN   (Bazel passes $(location :hcomm_run))
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PATH_TO_HCOMM_RUN" >&2
  exit 2
fi
RUN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
[ -x "$RUN" ] || { echo "not executable: $RUN" >&2; exit 1; }

TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/hcomm_run_test.XXXXXX")"
SHM_OTHER=""  # a file in /dev/shm that is not the job's, while it exists
trap 'rm -rf "$TMP"; [ -z "$SHM_OTHER" ] || rm -f "$SHM_OTHER"' EXIT
OUT="$TMP/out"
ERR="$TMP/err"
FAILURES=0
CURRENT=""

fail() {
  echo "FAIL [$CURRENT]: $*" >&2
  echo "--- stdout:" >&2; cat "$OUT" >&2 2>/dev/null
  echo "--- stderr:" >&2; cat "$ERR" >&2 2>/dev/null
  FAILURES=$((FAILURES + 1))
}
begin() { CURRENT="$1"; echo "=== $1"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Runs the launcher with stdout/stderr captured; sets RC and ELAPSED_MS.
launch() {
  local t0; t0=$(now_ms)
  "$RUN" "$@" >"$OUT" 2>"$ERR" </dev/null
  RC=$?
  ELAPSED_MS=$(( $(now_ms) - t0 ))
}
expect_rc() { [ "$RC" -eq "$1" ] || fail "exit status $RC, want $1"; }
expect_out_line() { grep -qxF -- "$1" "$OUT" || fail "stdout lacks line: $1"; }
expect_err_line() { grep -qxF -- "$1" "$ERR" || fail "stderr lacks line: $1"; }
expect_faster_than() { [ "$ELAPSED_MS" -lt "$1" ] || fail "took ${ELAPSED_MS} ms, want < $1 ms"; }

# Whether process $1 exists and has not ended (a zombie has ended: only
# whoever adopted it has yet to reap it).
alive() {
  kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# Waits until the processes whose pids are in the given files are gone (they
# may be grandchildren still being reaped by init), at most 3 s.
expect_gone() {
  local f pid i
  for f in "$@"; do
    [ -s "$f" ] || { fail "pid file $f missing"; continue; }
    pid=$(cat "$f")
    for i in $(seq 1 60); do
      alive "$pid" || break
      sleep 0.05
    done
    if alive "$pid"; then
      fail "process $pid ($f) still alive"
      kill -9 "$pid" 2>/dev/null
    fi
  done
}

# ---------------------------------------------------------------------------
begin "environment of 3 ranks"
unset HCOMM_JOB_TOKEN
launch -n 3 -- /bin/sh -c \
  'echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE addr=$MASTER_ADDR"
   echo "port=$MASTER_PORT"; echo "toklen=${#HCOMM_JOB_TOKEN}"; echo "token=$HCOMM_JOB_TOKEN"
   echo "hcomm_rank=${HCOMM_RANK-unset}"
   echo "to stderr $RANK" >&2'
expect_rc 0
for r in 0 1 2; do
  expect_out_line "[rank $r] rank=$r world=3 local=$r lws=3 addr=127.0.0.1"
  expect_out_line "[rank $r] toklen=64"
  expect_out_line "[rank $r] hcomm_rank=unset"
  expect_err_line "[rank $r] to stderr $r"
done
[ "$(grep -c '^\[rank [0-2]\] ' "$OUT")" -eq 15 ] || fail "want 15 prefixed stdout lines"
grep -q 'to stderr' "$OUT" && fail "stderr line on stdout"
ports=$(sed -n 's/^\[rank [0-2]\] port=//p' "$OUT" | sort -u)
[ "$(echo "$ports" | wc -l)" -eq 1 ] && [ -n "$ports" ] || fail "ports differ or missing: $ports"
[ "$ports" -ge 1 ] 2>/dev/null && [ "$ports" -le 65535 ] || fail "bad port: $ports"
tokens=$(sed -n 's/^\[rank [0-2]\] token=//p' "$OUT" | sort -u)
[ "$(echo "$tokens" | wc -l)" -eq 1 ] || fail "tokens differ across ranks"
echo "$tokens" | grep -qxE '[0-9a-f]{64}' || fail "token is not 64 hex chars: $tokens"
first_token=$tokens

begin "fresh token per job"
launch -n 1 -- /bin/sh -c 'echo "token=$HCOMM_JOB_TOKEN"'
expect_rc 0
grep -qxF "[rank 0] token=$first_token" "$OUT" && fail "token reused across jobs"

begin "HCOMM_JOB_KEY: 16 hex digits, the same on every rank, fresh per launch"
HCOMM_JOB_KEY=0123456789abcdef launch -n 3 -- /bin/sh -c 'echo "key=$HCOMM_JOB_KEY"'
expect_rc 0
keys=$(sed -n 's/^\[rank [0-2]\] key=//p' "$OUT" | sort -u)
[ "$(echo "$keys" | wc -l)" -eq 1 ] || fail "keys differ across ranks: $keys"
echo "$keys" | grep -qxE '[0-9a-f]{16}' || fail "key is not 16 hex chars: $keys"
[ "$keys" != 0123456789abcdef ] || fail "inherited HCOMM_JOB_KEY kept"
first_key=$keys
# An inherited token is kept; the key is fresh all the same.
HCOMM_JOB_TOKEN=sekrit launch -n 1 -- /bin/sh -c 'echo "key=$HCOMM_JOB_KEY"'
expect_rc 0
grep -qxE '\[rank 0\] key=[0-9a-f]{16}' "$OUT" || fail "second launch: no 16 hex char key"
grep -qxF "[rank 0] key=$first_key" "$OUT" && fail "key reused across launches"

begin "inherited token, --port, inherited HCOMM_RANK dropped"
HCOMM_JOB_TOKEN=sekrit HCOMM_RANK=7 RANK=9 launch -n 2 --port 23456 -- /bin/sh -c \
  'echo "$RANK $HCOMM_JOB_TOKEN $MASTER_PORT ${HCOMM_RANK-unset}"'
expect_rc 0
expect_out_line "[rank 0] 0 sekrit 23456 unset"
expect_out_line "[rank 1] 1 sekrit 23456 unset"

begin "--bind-to core pins rank r to the r-th allowed CPU; none leaves them all"
ncpu=$(env -u OMP_NUM_THREADS nproc)
launch -n 3 --bind-to core -- /bin/sh -c 'echo "cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
expect_rc 0
mapfile -t allowed < <(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' | while IFS=- read a b; do seq "$a" "${b:-$a}"; done)
for r in 0 1 2; do
  expect_out_line "[rank $r] cpus=${allowed[$((r % ${#allowed[@]}))]}"
done
# nproc obeys OMP_NUM_THREADS, which the launcher sets to 1: leave it out.
launch -n 1 --bind-to none -- /bin/sh -c 'echo "n=$(env -u OMP_NUM_THREADS nproc)"'
expect_rc 0
expect_out_line "[rank 0] n=$ncpu"
launch -n 1 --bind-to socket -- /bin/true
expect_rc 2

begin "by default, ranks are pinned only where they outnumber the allowed CPUs"
mylist=$(grep Cpus_allowed_list /proc/$$/status | cut -f2)
over=$((${#allowed[@]} + 1))
launch -n "$over" -- /bin/sh -c 'echo "cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
expect_rc 0
for ((r = 0; r < over; r++)); do
  expect_out_line "[rank $r] cpus=${allowed[$((r % ${#allowed[@]}))]}"
done
launch -n "$over" --bind-to none -- /bin/sh -c \
  'echo "cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
expect_rc 0
expect_out_line "[rank $((over - 1))] cpus=$mylist"
launch -n "${#allowed[@]}" -- /bin/sh -c \
  'echo "cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
expect_rc 0
expect_out_line "[rank 0] cpus=$mylist"

begin "arguments passed verbatim"
launch -n 1 -- /bin/sh -c 'printf "<%s>\n" "$@"' sh "a b" "" '$HOME'
expect_rc 0
expect_out_line '[rank 0] <a b>'
expect_out_line '[rank 0] <>'
expect_out_line '[rank 0] <$HOME>'

begin "line without trailing newline"
launch -n 1 -- printf 'first\nlast without newline'
expect_rc 0
printf '[rank 0] first\n[rank 0] last without newline\n' | cmp -s - "$OUT" ||
  fail "unexpected stdout"
launch -n 1 -- /bin/sh -c 'printf "err tail" >&2'
expect_rc 0
printf '[rank 0] err tail\n' | cmp -s - "$ERR" || fail "unexpected stderr"

begin "lines of many ranks never interleave"
launch -n 4 -- /bin/sh -c \
  'pad=$(printf "%0200d" 0); i=0; while [ $i -lt 2000 ]; do echo "line $i $pad"; i=$((i+1)); done'
expect_rc 0
[ "$(wc -l <"$OUT")" -eq 8000 ] || fail "want 8000 lines, got $(wc -l <"$OUT")"
bad=$(grep -cvE '^\[rank [0-3]\] line [0-9]+ 0{200}$' "$OUT")
[ "$bad" -eq 0 ] || fail "$bad malformed lines"
for r in 0 1 2 3; do
  [ "$(grep -c "^\[rank $r\] " "$OUT")" -eq 2000 ] || fail "rank $r: want 2000 lines"
done

begin "one rank fails, the others are stopped"
rm -f "$TMP"/pid.*
# Ranks 0 and 2 record their pids (rank 2: a background grandchild too) and
# sleep; rank 1 waits for those files, then exits 3.
launch -n 3 -- /bin/bash -c '
  d='"$TMP"'
  case $RANK in
    1) for i in $(seq 1 400); do
         [ -s $d/pid.0 ] && [ -s $d/pid.2 ] && [ -s $d/pid.2b ] && break; sleep 0.02
       done
       echo "rank 1 giving up" >&2; exit 3 ;;
    0) echo $$ > $d/pid.0.tmp; mv $d/pid.0.tmp $d/pid.0; exec sleep 60 ;;
    2) sleep 60 & echo $! > $d/pid.2b.tmp; mv $d/pid.2b.tmp $d/pid.2b
       echo $$ > $d/pid.2.tmp; mv $d/pid.2.tmp $d/pid.2; wait ;;
  esac'
expect_rc 3
expect_faster_than 10000
expect_err_line "hcomm_run: rank 1 exited with status 3"
expect_err_line "[rank 1] rank 1 giving up"
expect_gone "$TMP/pid.0" "$TMP/pid.2" "$TMP/pid.2b"

begin "a rank that ignores SIGTERM gets SIGKILL after the grace"
rm -f "$TMP"/pid.*
launch -n 2 -- /bin/bash -c '
  d='"$TMP"'
  if [ $RANK = 0 ]; then
    for i in $(seq 1 400); do [ -s $d/pid.1 ] && break; sleep 0.02; done; exit 5
  fi
  trap "" TERM; echo $$ > $d/pid.1.tmp; mv $d/pid.1.tmp $d/pid.1
  while true; do sleep 0.1; done'
expect_rc 5
[ "$ELAPSED_MS" -ge 2500 ] || fail "SIGKILL came before the 3 s grace (${ELAPSED_MS} ms)"
expect_faster_than 10000
expect_gone "$TMP/pid.1"

begin "rank killed by SIGKILL"
launch -n 2 -- /bin/sh -c 'if [ "$RANK" = 0 ]; then kill -9 $$; fi; exec sleep 60'
expect_rc 137
expect_faster_than 10000
expect_err_line "hcomm_run: rank 0 was killed by signal SIGKILL"

begin "--timeout"
launch --timeout 1 -n 3 -- /bin/sh -c 'if [ "$RANK" = 1 ]; then exit 0; fi; exec sleep 60'
expect_rc 124
expect_faster_than 6000
expect_err_line "hcomm_run: timeout after 1 s; ranks still running: 0,2"

begin "--timeout holds while nobody reads the launcher's output"
# Ranks print 2 MB into a pipe whose reader sleeps 20 s: the launcher must
# still stop them at 1 s and exit within its 2 s drain grace, not block on
# its stdout until the reader wakes.
t0=$(now_ms)
{ "$RUN" --timeout 1 -n 2 -- /bin/sh -c \
    'head -c 2000000 /dev/zero | tr "\0" a | fold -w 100; exec sleep 60' \
    2>"$ERR" </dev/null; echo "$? $(( $(now_ms) - t0 ))" > "$TMP/blocked.rc"; } |
  { sleep 20; cat > /dev/null; } &
reader=$!
for i in $(seq 1 500); do [ -s "$TMP/blocked.rc" ] && break; sleep 0.02; done
read -r RC ELAPSED_MS < "$TMP/blocked.rc" 2>/dev/null || { RC=-1; ELAPSED_MS=99999; }
kill "$reader" 2>/dev/null; pkill -P "$reader" 2>/dev/null; wait "$reader" 2>/dev/null
expect_rc 124
expect_faster_than 8000
: > "$OUT"

begin "a slow reader still gets every line"
"$RUN" -n 2 -- /bin/sh -c 'head -c 1000000 /dev/zero | tr "\0" a | fold -w 100; echo' \
  2>"$ERR" </dev/null | { sleep 2; cat; } > "$OUT"
[ "$(grep -c '^\[rank [01]\] a\{100\}$' "$OUT")" -eq 20000 ] ||
  fail "$(wc -l < "$OUT") lines arrived, want 20000 whole ones"

begin "--timeout not reached"
launch --timeout 30 -n 2 -- true
expect_rc 0
expect_faster_than 5000

# Starts a 2-rank launcher in the background (its pid in $launcher) whose
# ranks write their pids to $TMP/pid.R and sleep; returns once both have.
start_sleeping_ranks() {
  rm -f "$TMP"/pid.*
  "$RUN" -n 2 -- /bin/sh -c \
    'echo $$ > '"$TMP"'/pid.$RANK.tmp; mv '"$TMP"'/pid.$RANK.tmp '"$TMP"'/pid.$RANK; exec sleep 60' \
    >"$OUT" 2>"$ERR" </dev/null &
  launcher=$!
  for i in $(seq 1 400); do [ -s "$TMP/pid.0" ] && [ -s "$TMP/pid.1" ] && break; sleep 0.02; done
}

begin "SIGTERM to the launcher is forwarded"
start_sleeping_ranks
t0=$(now_ms)
kill -TERM "$launcher"
wait "$launcher"
RC=$?
ELAPSED_MS=$(( $(now_ms) - t0 ))
expect_rc 143
expect_faster_than 5000
grep -q 'got SIGTERM' "$ERR" || fail "no message about SIGTERM"
expect_gone "$TMP/pid.0" "$TMP/pid.1"

begin "SIGKILL to the launcher kills the ranks too"
start_sleeping_ranks
kill -KILL "$launcher"
{ wait "$launcher"; } 2>/dev/null  # no "Killed" notice from bash
RC=$?
expect_rc 137
expect_gone "$TMP/pid.0" "$TMP/pid.1"

begin "the job's segments are removed from /dev/shm after the ranks end"
if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
  echo "SKIP: no writable /dev/shm"
else
  SHM_OTHER="/dev/shm/hcomm-ch-hcomm_run_test-$$-$RANDOM"
  echo other >"$SHM_OTHER"
  mkdir "$TMP/target"
  touch "$TMP/target/file"
  # Rank 0 leaves what a rank stopped during init leaves (a ring segment, a
  # collective one; a symbolic link too, which must go without what it
  # points to), then ends: with status 1, by SIGKILL, or by --timeout.
  for how in 'exit 1' 'kill -9 $$' 'exec sleep 60'; do
    timeout_arg=()
    [ "$how" = 'exec sleep 60' ] && timeout_arg=(--timeout 2)
    launch -n 2 "${timeout_arg[@]}" -- /bin/sh -c '
      k=$HCOMM_JOB_KEY
      if [ "$RANK" = 0 ]; then
        : >/dev/shm/hcomm-$k-7; : >/dev/shm/hcomm-$k-c3; ln -s '"$TMP"'/target /dev/shm/hcomm-$k-l
        echo "key=$k"; '"$how"'
      fi
      exec sleep 60'
    case $how in
      exit*) expect_rc 1 ;;
      kill*) expect_rc 137 ;;
      *) expect_rc 124 ;;
    esac
    key=$(sed -n 's/^\[rank 0\] key=//p' "$OUT")
    echo "$key" | grep -qxE '[0-9a-f]{16}' || fail "$how: no 16 hex char key: '$key'"
    for name in 7 c3 l; do
      [ -e "/dev/shm/hcomm-$key-$name" ] || [ -L "/dev/shm/hcomm-$key-$name" ] &&
        fail "$how: /dev/shm/hcomm-$key-$name left behind"
    done
    [ -f "$TMP/target/file" ] || fail "$how: the symbolic link was followed"
    [ "$(cat "$SHM_OTHER" 2>/dev/null)" = other ] || fail "$how: $SHM_OTHER was touched"
    rm -f "/dev/shm/hcomm-$key-7" "/dev/shm/hcomm-$key-c3" "/dev/shm/hcomm-$key-l"
  done
  rm -f "$SHM_OTHER"
  SHM_OTHER=""
fi

begin "a script without #! runs under /bin/sh"
printf 'echo "sh says $RANK $1"\n' > "$TMP/noshebang"
chmod +x "$TMP/noshebang"
launch -n 2 -- "$TMP/noshebang" hi
expect_rc 0
expect_out_line "[rank 1] sh says 1 hi"

begin "exec failure is a failing rank"
printf '#!/no/such/interpreter\n' >"$TMP/noexec_format"  # execve: ENOENT
chmod +x "$TMP/noexec_format"
launch -n 2 -- "$TMP/noexec_format"
expect_rc 127
grep -q "^\[rank [01]\] hcomm_run: rank [01]: cannot execute '$TMP/noexec_format': " "$ERR" ||
  fail "no exec error message"
grep -qE '^hcomm_run: rank [01] exited with status 127$' "$ERR" || fail "no failure report"

begin "one node of a multi-node job: torchrun's variables, global rank numbers"
HCOMM_JOB_TOKEN=sekrit GROUP_RANK=7 NODE_RANK=7 launch --nnodes 3 --node-rank 1 \
  --master-addr 10.1.2.3 --master-port 29555 -n 2 -- /bin/sh -c \
  'echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE group=$GROUP_RANK"
   echo "node=$NODE_RANK addr=$MASTER_ADDR port=$MASTER_PORT token=$HCOMM_JOB_TOKEN"
   echo "key=$HCOMM_JOB_KEY"'
expect_rc 0
for r in 2 3; do
  expect_out_line "[rank $r] rank=$r world=6 local=$((r - 2)) lws=2 group=1"
  expect_out_line "[rank $r] node=1 addr=10.1.2.3 port=29555 token=sekrit"
done
[ "$(grep -c '^\[rank [23]\] ' "$OUT")" -eq 6 ] || fail "want 6 lines of ranks 2 and 3"
mkeys=$(sed -n 's/^\[rank [23]\] key=//p' "$OUT" | sort -u)
[ "$(echo "$mkeys" | wc -l)" -eq 1 ] || fail "keys differ across ranks: $mkeys"
echo "$mkeys" | grep -qxE '[0-9a-f]{16}' || fail "key is not 16 hex chars: $mkeys"
# "--opt=value" forms and --nproc-per-node; node 0 (RANK 0, 1) of the same
# job gets the same key: it is derived from the token and the port.
HCOMM_JOB_TOKEN=sekrit launch --nnodes=3 --node-rank=0 --master-addr=10.1.2.3 --port=29555 \
  --nproc-per-node=2 -- /bin/sh -c 'echo "rank=$RANK world=$WORLD_SIZE key=$HCOMM_JOB_KEY"'
expect_rc 0
expect_out_line "[rank 0] rank=0 world=6 key=$mkeys"
expect_out_line "[rank 1] rank=1 world=6 key=$mkeys"
# Another port or token: another key.
for variant in "sekrit 29556" "other 29555"; do
  set -- $variant
  HCOMM_JOB_TOKEN=$1 launch --nnodes 2 --master-addr 10.1.2.3 --master-port "$2" -n 1 -- \
    /bin/sh -c 'echo "key=$HCOMM_JOB_KEY"'
  expect_rc 0
  grep -qxE '\[rank 0\] key=[0-9a-f]{16}' "$OUT" || fail "token $1 port $2: no 16 hex char key"
  grep -qxF "[rank 0] key=$mkeys" "$OUT" && fail "token $1 port $2: the same key as sekrit 29555"
done
set --

begin "single node: GROUP_RANK, NODE_RANK, OMP_NUM_THREADS"
launch -n 2 -- /bin/sh -c 'echo "group=$GROUP_RANK node=$NODE_RANK omp=$OMP_NUM_THREADS"'
expect_rc 0
expect_out_line "[rank 1] group=0 node=0 omp=1"
OMP_NUM_THREADS=4 launch -n 1 -- /bin/sh -c 'echo "omp=$OMP_NUM_THREADS"'
expect_rc 0
expect_out_line "[rank 0] omp=4"

begin "-nN, --nproc, --nproc-per-node; PROG without --; PROG's options are its own"
for form in "-n2" "--nproc 2" "--nproc=2" "--nproc-per-node 2"; do
  # shellcheck disable=SC2086  # word splitting intended
  launch $form -- /bin/sh -c 'echo "world=$WORLD_SIZE"'
  expect_rc 0
  expect_out_line "[rank 1] world=2"
done
launch -n 1 /bin/echo -n --timeout x
expect_rc 0
printf '[rank 0] --timeout x\n' | cmp -s - "$OUT" || fail "PROG's arguments were not passed on"

begin "--tag-output=0: the ranks' lines as they are"
launch -n 2 --tag-output=0 -- /bin/sh -c 'echo "{\"rank\": $RANK}"; echo "err $RANK" >&2'
expect_rc 0
expect_out_line '{"rank": 0}'
expect_out_line '{"rank": 1}'
[ "$(wc -l <"$OUT")" -eq 2 ] || fail "want 2 stdout lines"
expect_err_line "err 0"
expect_err_line "err 1"
launch -n 1 --tag-output 1 -- /bin/echo tagged
expect_rc 0
expect_out_line "[rank 0] tagged"
# The launcher's own messages keep their "hcomm_run: " and global numbers.
HCOMM_JOB_TOKEN=sekrit launch --tag-output=0 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 \
  --master-port 29555 -n 2 -- /bin/sh -c 'echo "rank $RANK out"; [ "$LOCAL_RANK" = 0 ] || exit 3'
expect_rc 3
expect_out_line "rank 3 out"
expect_err_line "hcomm_run: rank 3 exited with status 3"
HCOMM_JOB_TOKEN=sekrit launch --timeout 1 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 \
  --master-port 29555 -n 2 -- /bin/sh -c 'exec sleep 60'
expect_rc 124
expect_err_line "hcomm_run: timeout after 1 s; ranks still running: 2,3"

begin "multi-node usage errors say what is missing"
multi="--nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --master-port 29555 -n 1 -- true"
# shellcheck disable=SC2086
env -u HCOMM_JOB_TOKEN "$RUN" $multi >"$OUT" 2>"$ERR" </dev/null
RC=$?
expect_rc 2
grep -q '^hcomm_run: --nnodes 2: HCOMM_JOB_TOKEN is not set (or empty); every node must use' \
  "$ERR" || fail "no message about HCOMM_JOB_TOKEN"
grep -qF 'export HCOMM_JOB_TOKEN=$(openssl rand -hex 32)' "$ERR" || fail "no example"
# shellcheck disable=SC2086
HCOMM_JOB_TOKEN= launch $multi
expect_rc 2
grep -q 'HCOMM_JOB_TOKEN is not set (or empty)' "$ERR" || fail "empty token accepted"
HCOMM_JOB_TOKEN=t launch --nnodes 2 --master-port 29555 -n 1 -- true
expect_rc 2
grep -q '^hcomm_run: --nnodes 2 needs --master-addr' "$ERR" || fail "no message about --master-addr"
HCOMM_JOB_TOKEN=t launch --nnodes 2 --master-addr 10.1.2.3 -n 1 -- true
expect_rc 2
grep -q '^hcomm_run: --nnodes 2 needs --master-port' "$ERR" || fail "no message about --master-port"
HCOMM_JOB_TOKEN=t launch --nnodes 2 --node-rank 2 --master-addr a --master-port 1 -n 1 -- true
expect_rc 2
expect_err_line "hcomm_run: --node-rank 2 is out of range for --nnodes 2 (0 to 1)"
launch --master 1 -n 1 -- true
expect_rc 2
grep -qF "hcomm_run: ambiguous option '--master' (--master-addr, --master-port," "$ERR" ||
  fail "no message about an ambiguous option"
launch --tag-output=yes -n 1 -- true
expect_rc 2
expect_err_line "hcomm_run: --tag-output needs 0 or 1, got 'yes'"
launch --master-port 0 -n 1 -- true
expect_rc 2
expect_err_line "hcomm_run: --master-port needs an integer from 1 to 65535, got '0'"

begin "--hostfile: this machine's line gives its node rank and ranks"
# 127.0.0.1 is on this machine's loopback; 203.0.113.x (TEST-NET-3) is not.
printf '# one host\n127.0.0.1 slots=2\n' >"$TMP/hosts1"
launch --hostfile "$TMP/hosts1" -- /bin/sh -c \
  'echo "rank=$RANK world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE node=$NODE_RANK addr=$MASTER_ADDR"'
expect_rc 0
expect_out_line "[rank 0] rank=0 world=2 lws=2 node=0 addr=127.0.0.1"
expect_out_line "[rank 1] rank=1 world=2 lws=2 node=0 addr=127.0.0.1"
# Uneven slots: node 0 holds ranks 0-1, this machine (node 1) 2-4, node 2 rank 5.
printf '203.0.113.1 slots=2\n\n127.0.0.1:3   # this machine\n203.0.113.3\n' >"$TMP/hosts3"
HCOMM_JOB_TOKEN=sekrit launch --hostfile "$TMP/hosts3" --master-port 29555 -- /bin/sh -c \
  'echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE node=$NODE_RANK"
   echo "addr=$MASTER_ADDR port=$MASTER_PORT"'
expect_rc 0
for r in 2 3 4; do
  expect_out_line "[rank $r] rank=$r world=6 local=$((r - 2)) lws=3 node=1"
  expect_out_line "[rank $r] addr=203.0.113.1 port=29555"
done
[ "$(grep -c '^\[rank [234]\] ' "$OUT")" -eq 6 ] || fail "want 6 lines of ranks 2, 3 and 4"
# --node-rank overrides the match.
HCOMM_JOB_TOKEN=sekrit launch --hostfile "$TMP/hosts3" --node-rank 2 --port 29555 -- \
  /bin/sh -c 'echo "rank=$RANK world=$WORLD_SIZE node=$NODE_RANK"'
expect_rc 0
expect_out_line "[rank 5] rank=5 world=6 node=2"

begin "--hostfile usage errors name the file and line"
printf '203.0.113.1\n203.0.113.2 slots=2\n' >"$TMP/hosts_other"
HCOMM_JOB_TOKEN=t launch --hostfile "$TMP/hosts_other" --master-port 29555 -- true
expect_rc 2
grep -q "^hcomm_run: $TMP/hosts_other: no line names this machine (its names: .*127\.0\.0\.1" \
  "$ERR" || fail "no message saying that no line names this machine"
printf '127.0.0.1\n203.0.113.1\n203.0.113.1:2\n' >"$TMP/hosts_twice"
HCOMM_JOB_TOKEN=t launch --hostfile "$TMP/hosts_twice" --master-port 29555 -- true
expect_rc 2
grep -qF "hcomm_run: $TMP/hosts_twice:3: host '203.0.113.1' is listed twice (also on line 2)" \
  "$ERR" || fail "no message about the host listed twice"
HCOMM_JOB_TOKEN=t launch --hostfile "$TMP/hosts3" --nnodes 3 --master-port 29555 -- true
expect_rc 2
grep -q '^hcomm_run: --hostfile and --nnodes conflict' "$ERR" || fail "no message about --nnodes"
env -u HCOMM_JOB_TOKEN "$RUN" --hostfile "$TMP/hosts3" --master-port 29555 -- true \
  >"$OUT" 2>"$ERR" </dev/null
RC=$?
expect_rc 2
grep -qF "hcomm_run: --hostfile $TMP/hosts3 (3 hosts): HCOMM_JOB_TOKEN is not set" "$ERR" ||
  fail "no message about HCOMM_JOB_TOKEN"
grep -q '^usage: hcomm_run' "$ERR" || fail "no usage message"

begin "usage errors"
touch "$TMP/not_executable"
chmod -x "$TMP/not_executable"
for args in "" "-- true" "-n 0 -- true" "-n 1025 -- true" "-n abc -- true" "-n 2" "-n 2 --" \
            "-n 2 -- /nonexistent/prog" "-n 2 -- no_such_program_hcomm_xyz" \
            "-n 2 -- $TMP/not_executable" "-n 2 -- $TMP" "--bogus -n 2 -- true" \
            "-n 2 --timeout 0 -- true" "-n 2 --timeout x -- true" "-n 2 --port 70000 -- true" \
            "-n" "--nproc" "--timeout" "-n 1 --timeout" "--help=x" "-x -n 1 -- true" \
            "--nnodes 0 -n 1 -- true" "--nnodes x -n 1 -- true" "--nnodes 65537 -n 1 -- true" \
            "--node-rank -1 -n 1 -- true" "--node-rank 1 -n 1 -- true" "--nnodes 2 -n 1 -- true" \
            "--nnodes 2 --master-addr a --master-port 5 -n 1 -- true" "--master-addr= -n 1 -- true" \
            "--tag-output 2 -n 1 -- true" "--tag-output" "--nproc-per-node 0 -- true" \
            "--master-port x -n 1 -- true" "--hostfile -- true" "--hostfile= -- true" \
            "--hostfile /nonexistent/hosts -- true"; do
  # shellcheck disable=SC2086  # word splitting intended
  launch $args
  [ "$RC" -eq 2 ] || fail "'hcomm_run $args': exit status $RC, want 2"
  grep -q '^usage: hcomm_run' "$ERR" || fail "'hcomm_run $args': no usage message"
  [ -s "$OUT" ] && fail "'hcomm_run $args': wrote to stdout"
done
launch -n 1024 -- true
expect_rc 0

begin "--help"
launch --help
expect_rc 0
grep -q '^usage: hcomm_run -n N' "$OUT" || fail "--help prints no usage"
grep -q '^  --hostfile FILE ' "$OUT" || fail "--help does not list --hostfile"

echo
if [ "$FAILURES" -ne 0 ]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all checks passed"
