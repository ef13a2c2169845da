#!/usr/bin/env bash
# Multi-host runs on one machine: three network namespaces play hosts a, b
# and c, each with a veth "cable" (eth0, 10.X.Y.{1,2,3}/24) to a bridge in a
# fourth namespace (the switch). The root namespace is never touched. Ranks
# are started with `ip netns exec HOST env -i HCOMM_... multihost_rank MODE`,
# HCOMM_HOST_ID = the namespace's name, the store at host a's address.
#
#   (a) healthy: 6 ranks, 2 per host: transports (shm to the host-mate, tcp
#       to the rest), p2p (ring 0 B..1 MiB, any-source, every pair) and all
#       nine collectives, every result checked; all ranks exit 0.
#   (b) cut cable: 6 ranks loop over allreduce + p2p ring + alltoall with
#       timeout_ms=5000; host c's cable is unplugged at the switch (its port
#       set down). Every rank must report HCOMM_ERR_PEER_FAILURE or
#       HCOMM_ERR_TIMEOUT, no earlier than the cut and within 20 s of it, and
#       exit within 50 s of it; no rank may report corrupted data.
#       (b2) the same with timeout_ms=60000: now only keepalive / the TCP
#       user timeout can notice, and every rank must get PEER_FAILURE within
#       20 s.
#   (c) dead host: the same loop; both ranks of host b are SIGKILLed. The
#       four survivors must report PEER_FAILURE or TIMEOUT within 10 s and
#       exit within 30 s; no corrupted data.
#   (d) store gone: 4 ranks (a, a, b, c). After init and two checked rounds,
#       the store endpoint (host a's address, store port) is blackholed on
#       every host in both directions by policy-routing rules (a new
#       connection to it fails from every host), while rank 0, which serves
#       it, keeps running; 5 checked rounds and a hcomm_comm_split follow.
#       Then both ends of every store connection, and the store's listening
#       socket, are destroyed with `ss -K` (the library's hang-report thread
#       polls the store every 300 ms over one of them); 5 more checked
#       rounds; no rank may leak descriptors or burn CPU while idle (a store
#       that polled its dead listener would spin); every rank exits 0. This
#       proves the job needs neither the store's reachability nor its
#       connections after init. It proves nothing about losing rank 0's
#       process: that is a peer failure, (c).
#
# Every wait is bounded; readiness comes through files written by the ranks,
# never by sleeping. The namespaces (and with them the veths and the bridge)
# and every process started in them are removed on exit, pass or fail.
# Prints "SKIP: ..." and exits 0 only when `ip netns add` is impossible.
set -uo pipefail
for d in "${TEST_SRCDIR:-}" "${RUNFILES_DIR:-}" "$0.runfiles" "$(dirname "$0")/../.."; do
  if [[ -n "$d" && -f "$d/hcomm/tests/acceptance/testlib.sh" ]]; then
    source "$d/hcomm/tests/acceptance/testlib.sh"
    break
  fi
done
declare -F runfile >/dev/null || { echo "FAIL: testlib.sh not in the runfiles" >&2; exit 1; }

prog="$(runfile tests/netns/multihost_rank)" || fail "multihost_rank not in the runfiles"

id="hc-$$-$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')"
sw="$id-s"
hosts=(a b c)
subnet="10.$((RANDOM % 200 + 20)).$((RANDOM % 250))" # hosts are $subnet.1 .. .3
# Below the ephemeral range (32768-60999 in a new namespace): no connection's
# local port can already hold it, as one did in a CI run.
port=$((20000 + RANDOM % 12000))
store_ip="$subnet.1"
store="$store_ip:$port"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/multihost.XXXXXX")"
made=()  # namespaces created so far
pids=()  # rank processes (ip netns exec execs, so these are the ranks)

cleanup() {
  local ns p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  # Anything else still inside our namespaces was started by this script too.
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  { wait; } 2>/dev/null
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# --- the network --------------------------------------------------------------

# The one check for the environment: can we create a namespace at all?
if ! err="$(ip netns add "$sw" 2>&1)"; then
  echo "SKIP: cannot create network namespaces here (ip netns add: $err)"
  exit 0
fi
made+=("$sw")

ns_of() { echo "$id-$1"; }

setup_network() {
  local h ns i=1
  ip -n "$sw" link set lo up || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  for h in "${hosts[@]}"; do
    ns="$(ns_of "$h")"
    ip netns add "$ns" || return 1
    made+=("$ns")
    ip -n "$sw" link add "p$h" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$sw" link set "p$h" master br0 up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    # Look up the local table after rules of ours (pref < 100), so that (d)
    # can blackhole the store port even towards a local address.
    ip -n "$ns" rule add pref 100 lookup local || return 1
    ip -n "$ns" rule del pref 0 || return 1
    i=$((i + 1))
  done
}
setup_network || fail "could not build the namespaces (see above)"
for h in "${hosts[@]}"; do
  echo "host $h: namespace $(ns_of "$h"), $(ip -n "$(ns_of "$h")" -4 -br addr show eth0)"
done
echo "switch: namespace $sw (bridge br0); store at $store"

# --- ranks --------------------------------------------------------------------

# start_job NAME MODE HOSTMAP TIMEOUT_MS: starts one rank per letter of
# HOSTMAP on that host; rank r's pid is rank_pid[r], its log $dir/rR.log.
start_job() {
  local name="$1" mode="$2" tmo="$4" tok r h
  map="$3"
  dir="$work/$name"
  mkdir -p "$dir"
  tok="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  rank_pid=()
  n=${#map}
  for ((r = 0; r < n; r++)); do
    h="${map:r:1}"
    ip netns exec "$(ns_of "$h")" env -i PATH=/usr/bin:/bin \
      HCOMM_RANK="$r" HCOMM_WORLD_SIZE="$n" HCOMM_STORE_ADDR="$store" \
      HCOMM_JOB_TOKEN="$tok" HCOMM_TIMEOUT_MS="$tmo" HCOMM_HOST_ID="$(ns_of "$h")" \
      "$prog" "$mode" "$map" "$dir" >"$dir/r$r.log" 2>&1 </dev/null &
    rank_pid[r]=$!
    pids+=("$!")
  done
}

show_logs() {
  local r
  for ((r = 0; r < n; r++)); do echo "----- rank $r (host ${map:r:1})"; cat "$dir/r$r.log"; done
}

# wait_ranks DEADLINE: waits for every rank until the epoch second DEADLINE;
# rank_rc[r] = exit status (124: killed because it was still running).
wait_ranks() {
  local deadline="$1" r left
  rank_rc=()
  for ((r = 0; r < n; r++)); do
    left=$((deadline - $(date +%s)))
    ((left > 0)) || left=1
    rank_rc[r]=0
    wait_pid "${rank_pid[r]}" "$left" || rank_rc[r]=$?
  done
}

# wait_files NAME SECONDS: waits for $dir/NAME.R of every rank; fails early
# when a rank has died.
wait_files() {
  local name="$1" deadline=$(($(date +%s) + $2)) r
  for ((r = 0; r < n; r++)); do
    until [[ -e "$dir/$name.$r" ]]; do
      if ! kill -0 "${rank_pid[r]}" 2>/dev/null ||
        [[ "$(awk '{print $3}' "/proc/${rank_pid[r]}/stat" 2>/dev/null)" == Z ]]; then
        show_logs
        fail "rank $r exited before writing $name"
      fi
      if (($(date +%s) >= deadline)); then
        show_logs
        fail "rank $r did not write $name within $2 s"
      fi
      sleep 0.02
    done
  done
}

no_corruption() {
  if grep -q 'CORRUPT' "$dir"/r*.log; then
    show_logs
    fail "$1: a rank received corrupted data: $(grep -h 'CORRUPT' "$dir"/r*.log | head -5)"
  fi
}

# check_broken EVENT T0 LIMIT RANKS...: each listed rank exited 3 after
# printing one "error:" line whose status is PEER_FAILURE or TIMEOUT and
# whose time is after T0 and at most LIMIT s after it. Prints the timings.
check_broken() {
  local event="$1" t0="$2" limit="$3" r line status at detect worst=0
  shift 3
  for r in "$@"; do
    line="$(grep -m1 ': error: ' "$dir/r$r.log")"
    if [[ -z "$line" ]]; then
      show_logs
      fail "$event: rank $r (host ${map:r:1}) reported no failure (exit ${rank_rc[r]})"
    fi
    status="$(sed -n 's/.* returned \(HCOMM_[A-Z_]*\) at .*/\1/p' <<<"$line")"
    at="$(sed -n 's/.* returned HCOMM_[A-Z_]* at \([0-9.]*\) .*/\1/p' <<<"$line")"
    detect="$(elapsed "$t0" "$at")"
    echo "$event: rank $r (host ${map:r:1}) got $status $detect s after it" \
      "[$(sed -n 's/.*error: \(round [0-9]* .*\) returned HCOMM_.*/\1/p' <<<"$line")]:" \
      "$(sed -n 's/.* s after the last success): //p' <<<"$line" | cut -c1-160)"
    case "$status" in
      HCOMM_ERR_PEER_FAILURE | HCOMM_ERR_TIMEOUT) ;;
      *) show_logs; fail "$event: rank $r failed with $status: $line" ;;
    esac
    if awk -v d="$detect" 'BEGIN { exit !(d < 0) }'; then
      show_logs
      fail "$event: rank $r failed $detect s BEFORE the event: $line"
    fi
    if awk -v d="$detect" -v l="$limit" 'BEGIN { exit !(d > l) }'; then
      show_logs
      fail "$event: rank $r took $detect s to notice (limit $limit s)"
    fi
    if [[ "${rank_rc[r]}" -ne 3 ]]; then
      show_logs
      fail "$event: rank $r exited ${rank_rc[r]}, expected 3 (failure reported, then exit)"
    fi
    worst="$(awk -v a="$worst" -v b="$detect" 'BEGIN { print (b > a ? b : a) }')"
  done
  echo "$event: slowest detection $worst s (limit $limit s)"
}

# --- (a) healthy --------------------------------------------------------------
echo "=== (a) healthy: 6 ranks on 3 hosts"
start="$(now)"
start_job healthy healthy aabbcc 30000
wait_ranks $(($(date +%s) + 150))
for ((r = 0; r < n; r++)); do
  if [[ "${rank_rc[r]}" -ne 0 ]]; then
    show_logs
    [[ "${rank_rc[r]}" -eq 124 ]] && fail "(a): rank $r hung (killed after 150 s)"
    fail "(a): rank $r exited ${rank_rc[r]}"
  fi
  grep -qx 'ok: all' "$dir/r$r.log" || { show_logs; fail "(a): rank $r did not finish"; }
done
no_corruption "(a)"
grep -h 'transports:' "$dir"/r*.log
echo "(a) passed in $(elapsed "$start") s"

# --- (b) cut cable ------------------------------------------------------------
# cut_cable LABEL TIMEOUT_MS LIMIT STATUSES: 6 ranks loop; host c's switch
# port goes down; every rank must report one of STATUSES (a regex) within
# LIMIT s and exit within LIMIT + 30 s of the cut. The port comes back up.
cut_cable() {
  local label="$1" tmo="$2" limit="$3" statuses="$4" r
  start_job "cut-$tmo" loop aabbcc "$tmo"
  wait_files running 90
  cut_at="$(now)"
  ip -n "$sw" link set pc down || fail "cannot set the switch port of host c down"
  echo "$label switch port of host c down at $cut_at (timeout_ms=$tmo)"
  wait_ranks $(($(date +%s) + limit + 30))
  for ((r = 0; r < n; r++)); do
    if [[ "${rank_rc[r]}" -eq 124 ]]; then
      show_logs
      fail "$label: rank $r (host ${map:r:1}) still running $((limit + 30)) s after the cut (hang)"
    fi
  done
  no_corruption "$label"
  check_broken "$label cut" "$cut_at" "$limit" 0 1 2 3 4 5
  for ((r = 0; r < n; r++)); do
    grep -m1 ': error: ' "$dir/r$r.log" | grep -Eq " returned ($statuses) at " ||
      { show_logs; fail "$label: rank $r did not fail with $statuses"; }
  done
  echo "$label every rank exited within $(elapsed "$cut_at") s of the cut"
  grep -h 'hcomm_comm_destroy returned' "$dir"/r*.log | sed "s/^/$label /"
  ip -n "$sw" link set pc up || fail "cannot set the switch port of host c up again"
}

echo "=== (b) host c's cable cut at the switch while 6 ranks loop, timeout_ms 5000"
cut_cable "(b)" 5000 20 "HCOMM_ERR_PEER_FAILURE|HCOMM_ERR_TIMEOUT"
# With a long timeout only the transport can notice: keepalive and the TCP
# user timeout (~10 s) must turn the silence into PEER_FAILURE.
echo "=== (b2) the same with timeout_ms 60000: the transport must notice by itself"
cut_cable "(b2)" 60000 20 "HCOMM_ERR_PEER_FAILURE"

# --- (c) dead host ------------------------------------------------------------
echo "=== (c) both ranks of host b SIGKILLed while 6 ranks loop"
start_job kill loop aabbcc 5000
wait_files running 90
kill_at="$(now)"
kill -9 "${rank_pid[2]}" "${rank_pid[3]}"
echo "(c) SIGKILL to ranks 2 and 3 (host b) at $kill_at"
wait_ranks $(($(date +%s) + 30))
for r in 0 1 4 5; do
  if [[ "${rank_rc[r]}" -eq 124 ]]; then
    show_logs
    fail "(c): rank $r (host ${map:r:1}) still running 30 s after the kill (hang)"
  fi
done
for r in 2 3; do
  [[ "${rank_rc[r]}" -eq 137 ]] || fail "(c): killed rank $r exited ${rank_rc[r]}, expected 137"
done
no_corruption "(c)"
check_broken "(c) kill" "$kill_at" 10 0 1 4 5
echo "(c) every survivor exited within $(elapsed "$kill_at") s of the kill"

# --- (d) store gone -----------------------------------------------------------
echo "=== (d) the store becomes unreachable, then loses its sockets; 4 ranks run on"
start_job store store-gone aabc 20000
wait_files ready 120
# Rank 0 still listens on the store port (only for the record).
ip netns exec "$(ns_of a)" ss -Htln "sport = :$port" | sed 's/^/(d) before: /'
for h in "${hosts[@]}"; do
  ip -n "$(ns_of "$h")" rule add pref 10 to "$store_ip/32" ipproto tcp dport "$port" blackhole &&
    ip -n "$(ns_of "$h")" rule add pref 11 from "$store_ip/32" ipproto tcp sport "$port" blackhole ||
    fail "(d): cannot add the blackhole rules on host $h"
done
for h in "${hosts[@]}"; do
  if ip netns exec "$(ns_of "$h")" timeout 5 bash -c "exec 3<>/dev/tcp/$store_ip/$port" \
    2>/dev/null; then
    fail "(d): host $h can still connect to the store at $store"
  fi
done
echo "(d) store $store unreachable from hosts a, b and c (new connections fail)"
touch "$dir/go1"
wait_files done1 120
# Every store connection, both ends, on every host, and the listener.
for h in "${hosts[@]}"; do
  ip netns exec "$(ns_of "$h")" ss -K -tan "src $store or dst $store" |
    awk -v h="$h" 'NR > 1 { print "(d) destroyed on host " h ": " $1, $4, $5 }'
done
if ip netns exec "$(ns_of a)" ss -Htn "src $store or dst $store" | grep -q .; then
  fail "(d): store connections survived ss -K: $(ip netns exec "$(ns_of a)" ss -Htn "src $store")"
fi
touch "$dir/go2"
wait_ranks $(($(date +%s) + 120))
for ((r = 0; r < n; r++)); do
  if [[ "${rank_rc[r]}" -ne 0 ]]; then
    show_logs
    [[ "${rank_rc[r]}" -eq 124 ]] && fail "(d): rank $r hung"
    fail "(d): rank $r exited ${rank_rc[r]}"
  fi
  grep -qx 'ok: all' "$dir/r$r.log" || { show_logs; fail "(d): rank $r did not finish"; }
done
no_corruption "(d)"
grep -h 'idle cpu\| fds with' "$dir"/r*.log | sed 's/^/(d) /'
# The store's absence must not leak descriptors (the hang-report thread
# keeps trying to reach it every 300 ms).
for ((r = 0; r < n; r++)); do
  up="$(sed -n 's/^rank [0-9]*: \([0-9]*\) fds with the store up$/\1/p' "$dir/r$r.log")"
  gone="$(sed -n "s/^rank [0-9]*: \([0-9]*\) fds with the store's sockets gone$/\1/p" "$dir/r$r.log")"
  [[ -n "$up" && -n "$gone" && "$gone" -le "$up" ]] ||
    fail "(d): rank $r had ${up:-?} fds with the store up and ${gone:-?} after it went away"
done
# Nothing may spin once the store's sockets are gone (rank 0 serves it).
idle0="$(sed -n 's/^rank 0: idle cpu \([0-9]*\) ms.*/\1/p' "$dir/r0.log")"
[[ -n "$idle0" && "$idle0" -lt 500 ]] ||
  fail "(d): rank 0 burnt ${idle0:-?} ms of CPU in 1 s idle after its store lost its sockets"
echo "(d) passed: 10 checked rounds and a split ran without the store"

echo "PASS: healthy, cut cable (short and long timeout), dead host, store gone"
