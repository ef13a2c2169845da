#!/usr/bin/env bash
# Link flaps between two hosts (network namespaces joined by a veth,
# tests/netns/two_hosts.sh) fail nothing: while host b's link goes down for
# DOWN_S seconds and up for UP_S, again and again for FLAP_FOR seconds, two
# ranks (one per host) run hcomm_bench allreduce jobs back to back with
# timeout_ms 120000; every job must end well with every result right.
# (Loss: tests/netns/loss_test.sh; delay: tests/netns/delay_test.sh.)
#
#   bazel test //tests/netns:flap_test                          # 2 s down, 3 s up, 12 s
#   bazel test //tests/netns:flap_test --test_env=FLAP_FOR=300  # five minutes
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"
two_hosts="$(runfile tests/netns/two_hosts.sh)" || fail "two_hosts.sh not in the runfiles"
BED_PREFIX=hcf BED_NAME=flap_test source "$two_hosts"
setup_network || fail "could not build the namespaces (see above)"

down_s="${DOWN_S:-2}" up_s="${UP_S:-3}" flap_for="${FLAP_FOR:-12}"
echo "host b's link: down ${down_s} s, up ${up_s} s, for ${flap_for} s; jobs back to back meanwhile"

# The flapping, in the background until the file $work/stop exists.
(
  while [[ ! -e "$work/stop" ]]; do
    sleep "$up_s"
    ip -n "$(ns_of b)" link set eth0 down
    sleep "$down_s"
    ip -n "$(ns_of b)" link set eth0 up
    echo flap >>"$work/flaps"
  done
) &
flapper=$!

start="$(now)"
run_jobs_for "$bench" "$flap_for" 200
touch "$work/stop"
wait "$flapper"
ip -n "$(ns_of b)" link set eth0 up
flaps="$(wc -l <"$work/flaps" 2>/dev/null || echo 0)"
echo "$jobs_n jobs in $(elapsed "$start") s through $flaps flaps: $bad failed"
[[ "$flaps" -ge 1 ]] || fail "no flap happened while the jobs ran"
[[ "$bad" -eq 0 ]] || fail "$bad of $jobs_n jobs failed under link flaps"
echo "PASS"
