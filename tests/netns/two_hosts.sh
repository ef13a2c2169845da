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
# run), work (a temporary folder) and made (the namespaces created), and
# defines setup_network, setup_namespaces_only (the namespaces without the
# veth) and run_jobs_for (below). On
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

# setup_namespaces_only: host b's namespace beside a's, loopback up in
# both, and no link between them: for a caller that joins them its own way
# (tests/netns/delay_test.sh, through tests/netns/delay_wire.cc), then
# gives eth0 on each $subnet.1 and $subnet.2 as setup_network does.
setup_namespaces_only() {
  local h
  ip netns add "$(ns_of b)" || return 1
  made+=("$(ns_of b)")
  for h in "${hosts[@]}"; do
    ip -n "$(ns_of "$h")" link set lo up || return 1
  done
}

setup_network() {
  local h ns i=1
  setup_namespaces_only || return 1
  ip -n "$(ns_of a)" link add eth0 type veth peer name eth0 netns "$(ns_of b)" || return 1
  for h in "${hosts[@]}"; do
    ns="$(ns_of "$h")"
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    i=$((i + 1))
  done
}

# run_jobs_for BENCH SECONDS ITERS: two ranks (rank r on hosts[r]) run
# `BENCH allreduce` (8 B to 256 KiB, ITERS iterations per size, checked)
# as jobs back to back, timeout_ms 120000, until SECONDS have passed; each
# job's results go to $work/job<N>.r<rank>.out. Sets jobs_n and bad (jobs
# with a rank that failed or a wrong result, each shown).
run_jobs_for() {
  local bench="$1" seconds="$2" iters="$3" start tok store r rc ns wrong job_start
  local -a pids
  start="$(now)" jobs_n=0 bad=0
  while awk -v e="$(elapsed "$start")" -v f="$seconds" 'BEGIN { exit !(e < f) }'; do
    jobs_n=$((jobs_n + 1))
    tok="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    store="$subnet.1:$((port + jobs_n))"
    pids=()
    for r in 0 1; do
      ns="$(ns_of "${hosts[r]}")"
      ip netns exec "$ns" env -i PATH=/usr/bin:/bin HCOMM_TIMEOUT_MS=120000 \
        HCOMM_RANK="$r" HCOMM_WORLD_SIZE=2 HCOMM_STORE_ADDR="$store" \
        HCOMM_JOB_TOKEN="$tok" HCOMM_HOST_ID="$ns" \
        "$bench" allreduce -b 8 -e 256K -f 8 -n "$iters" -w 2 -c 1 --json \
        >"$work/job$jobs_n.r$r.out" 2>&1 </dev/null &
      pids[r]=$!
    done
    job_start="$(now)"
    for r in 0 1; do
      rc=0
      wait_pid "${pids[r]}" 150 || rc=$?
      if [[ $rc -ne 0 ]]; then
        bad=$((bad + 1))
        echo "job $jobs_n: rank $r exited $rc"
        cat "$work/job$jobs_n.r$r.out"
      fi
    done
    wrong="$(grep -cE '"wrong":[1-9]' "$work/job$jobs_n.r0.out")"
    [[ "$wrong" -eq 0 ]] || { bad=$((bad + 1)); echo "job $jobs_n: wrong results"; }
    echo "job $jobs_n: $(elapsed "$job_start") s, $(grep -c '"op":"allreduce"' "$work/job$jobs_n.r0.out") sizes"
  done
}
