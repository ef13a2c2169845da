#!/usr/bin/env bash
# Packet loss between two hosts (network namespaces joined by a veth,
# tests/netns/two_hosts.sh) fails nothing: an nftables rule in host b drops
# LOSS_PERMILLE of every thousand TCP segments it sends or receives (chosen
# at random by the kernel, numgen), while two ranks (one per host) run
# hcomm_bench allreduce jobs back to back for LOSS_FOR seconds with
# timeout_ms 120000; every job must end well with every result right.
# (Loss only; added delay: tests/netns/delay_test.sh, through a userspace
# wire, as this kernel has no netem.)
#
#   bazel test //tests/netns:loss_test                                   # 3%, 12 s
#   bazel test //tests/netns:loss_test --test_env=LOSS_FOR=300           # five minutes
#   bazel test //tests/netns:loss_test --test_env=LOSS_PERMILLE=50       # 5%
# LOSS_ITERS (default 20): hcomm_bench iterations per size, 8 B to 256 KiB.
# SKIP where namespaces cannot be made or nft (Debian's nftables) is missing.
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"
two_hosts="$(runfile tests/netns/two_hosts.sh)" || fail "two_hosts.sh not in the runfiles"
nft="$(command -v nft || echo /usr/sbin/nft)"  # Bazel's PATH has no sbin
if [[ ! -x "$nft" ]]; then
  echo "SKIPPED: nft is missing (bash tools/setup.sh installs Debian's nftables)"
  exit 0
fi
BED_PREFIX=hcl BED_NAME=loss_test source "$two_hosts"
setup_network || fail "could not build the namespaces (see above)"

permille="${LOSS_PERMILLE:-30}" loss_for="${LOSS_FOR:-12}"
nb="$(ns_of b)"
# Drops in both directions at host b, TCP only (the store's and the ranks'
# connections), each segment on its own draw.
ip netns exec "$nb" "$nft" -f - <<NFT || fail "nft refused the loss rules"
table inet hcomm_loss {
  chain in {
    type filter hook input priority 0;
    meta l4proto tcp numgen random mod 1000 < $permille counter drop
  }
  chain out {
    type filter hook output priority 0;
    meta l4proto tcp numgen random mod 1000 < $permille counter drop
  }
}
NFT
echo "host b drops ${permille}/1000 of its TCP segments both ways; jobs back to back for ${loss_for} s"

start="$(now)"
run_jobs_for "$bench" "$loss_for" "${LOSS_ITERS:-20}"
dropped="$(ip netns exec "$nb" "$nft" list table inet hcomm_loss | grep -oE 'packets [0-9]+' |
           awk '{s += $2} END {print s + 0}')"
echo "$jobs_n jobs in $(elapsed "$start") s with ${permille}/1000 loss, $dropped segments dropped: $bad failed"
[[ "$dropped" -ge 1 ]] || fail "no segment was dropped while the jobs ran"
[[ "$bad" -eq 0 ]] || fail "$bad of $jobs_n jobs failed under packet loss"
echo "PASS"
