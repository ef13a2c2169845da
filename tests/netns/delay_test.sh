#!/usr/bin/env bash
# Added delay between two hosts (network namespaces, tests/netns/two_hosts.sh)
# fails nothing. This kernel has no netem, so the hosts' link is
# tests/netns/delay_wire.cc: a TUN device eth0 in each namespace, joined by
# one process that holds every packet DELAY_MS each way, plus a uniform
# draw in +-DELAY_JITTER_MS (in order; DELAY_REORDER=1 lets the jitter
# reorder packets, as netem's does). First, TCP connects from host a to a
# closed port of host b (each answered by a reset: one round trip) must
# each take at least 2 * (DELAY_MS - DELAY_JITTER_MS): the delay is real.
# Then two ranks (one per host) run hcomm_bench allreduce jobs back to
# back for DELAY_FOR seconds with timeout_ms 120000; every job must end
# well with every result right.
#
#   bazel test //tests/netns:delay_test                              # 20 ms +-5 each way, 12 s
#   bazel test //tests/netns:delay_test --test_env=DELAY_FOR=180     # three minutes
#   bazel test //tests/netns:delay_test --test_env=DELAY_MS=100      # 200 ms round trips
# DELAY_ITERS (default 5): hcomm_bench iterations per size, 8 B to 256 KiB.
# SKIP where namespaces cannot be made or /dev/net/tun is missing.
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"
two_hosts="$(runfile tests/netns/two_hosts.sh)" || fail "two_hosts.sh not in the runfiles"
wire="$(runfile tests/netns/delay_wire)" || fail "delay_wire not in the runfiles"
if [[ ! -c /dev/net/tun ]]; then
  echo "SKIPPED: /dev/net/tun is missing (a kernel without CONFIG_TUN)"
  exit 0
fi

delay_ms="${DELAY_MS:-20}" jitter_ms="${DELAY_JITTER_MS:-5}" delay_for="${DELAY_FOR:-12}"
iters="${DELAY_ITERS:-5}"
[[ "$delay_ms" =~ ^[0-9]+$ && "$jitter_ms" =~ ^[0-9]+$ ]] ||
  fail "DELAY_MS ($delay_ms) and DELAY_JITTER_MS ($jitter_ms) must be whole milliseconds"
((jitter_ms < delay_ms)) ||
  fail "DELAY_JITTER_MS ($jitter_ms) must be below DELAY_MS ($delay_ms), or no delay is certain"
reorder=() order="in order"
if [[ "${DELAY_REORDER:-0}" == 1 ]]; then reorder=(--reorder) order="may reorder"; fi

BED_PREFIX=hcd BED_NAME=delay_test source "$two_hosts"
setup_namespaces_only || fail "could not build the namespaces (see above)"

# The wire runs in the background of this script, so two_hosts.sh's
# cleanup (jobs -p) kills it if the test stops early; its devices vanish
# with it. It runs at nice -10 so that the ranks and whatever else shares
# the CPUs delay its releases less (a late release is extra delay).
nice -n -10 "$wire" --ns-a "$(ns_of a)" --ns-b "$(ns_of b)" --dev-a eth0 --dev-b eth0 \
  --delay-ms "$delay_ms" --jitter-ms "$jitter_ms" "${reorder[@]}" >"$work/wire.out" 2>&1 &
wire_pid=$!
for ((i = 0; i < 500; i++)); do
  grep -qs '^delay_wire: ready' "$work/wire.out" && break
  kill -0 "$wire_pid" 2>/dev/null || break
  sleep 0.02
done
grep -qs '^delay_wire: ready' "$work/wire.out" || { cat "$work/wire.out"; fail "delay_wire did not start"; }
i=1
for h in "${hosts[@]}"; do
  ns="$(ns_of "$h")"
  ip -n "$ns" addr add "$subnet.$i/24" dev eth0 || fail "ip addr add on $ns's eth0"
  ip -n "$ns" link set eth0 mtu 1500 up || fail "ip link set up on $ns's eth0"
  i=$((i + 1))
done
echo "${delay_ms} ms +-${jitter_ms} ms each way ($order) through delay_wire; jobs back to back for ${delay_for} s"

# Round trips: a connect to a port of host b where nothing listens is
# refused by a reset, one round trip after the SYN. Timed inside host a.
rtts="$(timeout 60 ip netns exec "$(ns_of a)" bash -c '
  for i in 1 2 3 4 5; do
    s=$EPOCHREALTIME
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
    e=$EPOCHREALTIME
    echo "$s $e"
  done' rtt "$subnet.2" "$port" | awk '{ printf "%.2f\n", ($2 - $1) * 1000 }')"
[[ "$(wc -l <<<"$rtts")" -eq 5 ]] || fail "the round-trip probes did not finish: '$rtts'"
min_rtt=$((2 * (delay_ms - jitter_ms)))
echo "TCP round trips through the wire (connect refused): $(echo $rtts) ms; at least $min_rtt ms expected"
awk -v m="$min_rtt" '$1 < m { exit 1 }' <<<"$rtts" ||
  fail "a round trip took less than 2 * (DELAY_MS - DELAY_JITTER_MS) = $min_rtt ms: the wire does not delay"

start="$(now)"
run_jobs_for "$bench" "$delay_for" "$iters"
secs="$(elapsed "$start")"

kill -TERM "$wire_pid"
rc=0
wait_pid "$wire_pid" 10 || rc=$?
grep -v '^delay_wire: ready' "$work/wire.out"
[[ "$rc" -eq 0 ]] || { cat "$work/wire.out"; fail "delay_wire exited $rc on SIGTERM"; }
through="$(grep -oE 'total: [0-9]+ packets through' "$work/wire.out" | grep -oE '[0-9]+')"
echo "$jobs_n jobs in $secs s with ${delay_ms} ms delay (+-${jitter_ms}) each way, ${through:-0} packets through the wire: $bad failed"
[[ "${through:-0}" -ge 1 ]] || fail "no packet went through the wire while the jobs ran"
[[ "$bad" -eq 0 ]] || fail "$bad of $jobs_n jobs failed under added delay"
echo "PASS"
