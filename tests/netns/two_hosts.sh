# Two hosts on one machine, sourced by tests of this package (after
# tests/acceptance/testlib.sh): network namespaces a and b joined by one
# veth (eth0 on each side, $subnet.1 and $subnet.2 /24). The root namespace
# is never touched.
#
#   BED_PREFIX=hcb BED_NAME=compression_bed source "$(runfile tests/netns/two_hosts.sh)"
#   setup_network || fail "could not build the namespaces (see above)"
#   ip netns exec "$(ns_of a)" ...
#
# Sets id, hosts=(a b), subnet, port (a random base the caller offsets per
# run), work (a temporary folder) and made (the namespaces created). On
# exit, pass or fail, every process still running in the background or
# inside the namespaces is killed and the namespaces (with the veth) and
# the work folder are removed. Prints "SKIP: ..." and exits 0 at once when
# a namespace cannot be created here.

id="$BED_PREFIX-$$-$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')"
hosts=(a b)
subnet="10.$((RANDOM % 200 + 20)).$((RANDOM % 250))"
# Below the ephemeral range (32768-60999 in a new namespace): no connection's
# local port can already hold it, as one did in a CI run.
port=$((20000 + RANDOM % 12000))
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/$BED_NAME.XXXXXX")"
made=() # namespaces created so far

cleanup() {
  local ns p
  # Our background processes (ip netns exec execs, so these are what it
  # started), then anything else left inside our namespaces.
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  { wait; } 2>/dev/null
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

ns_of() { echo "$id-$1"; }

# The one check for the environment: can we create a namespace at all?
if ! err="$(ip netns add "$(ns_of a)" 2>&1)"; then
  echo "SKIP: cannot create network namespaces here (ip netns add: $err)"
  exit 0
fi
made+=("$(ns_of a)")

setup_network() {
  local h ns i=1
  ip netns add "$(ns_of b)" || return 1
  made+=("$(ns_of b)")
  ip -n "$(ns_of a)" link add eth0 type veth peer name eth0 netns "$(ns_of b)" || return 1
  for h in "${hosts[@]}"; do
    ns="$(ns_of "$h")"
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    i=$((i + 1))
  done
}
