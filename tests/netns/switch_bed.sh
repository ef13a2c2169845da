#!/usr/bin/env bash
# A test bed of two switches: 4 hosts x 2 ranks on one machine, the
# switches joined by one slow link. Network namespaces play the hosts
# (h0..h3) and the switches (sw1, sw2: a bridge br0 in each). Each host
# hangs off its switch by one veth (eth0 on the host, pN on the switch);
# the switches are joined by a veth pair (trunk on each side). One /24:
# host hN is 10.X.Y.(N+1).
#
#        h0 (.1)   h2 (.3)              h1 (.2)   h3 (.4)
#           \       /                      \       /
#        [sw1: br0, switch s1] ==trunk== [sw2: br0, switch s2]
#
# h0 and h2 hang off s1, h1 and h3 off s2, so rank order (node R = host hR,
# ranks 2R and 2R+1) alternates switches: a ring in rank order crosses the
# trunk 4 times (twice each way), the naive layout that the topology-aware
# ring order (docs/topology.md) brings down to twice (once each way).
#
# Shaping (tc tbf, on the egress of both ends of each link; this kernel has
# no netem, so there is NO added delay: the delay is the veths', the
# bridges' and the stacks'): the trunk at BED_SLOW_RATE (200mbit), each
# host link at BED_HOST_RATE (1gbit; "none": unshaped). Both are far below
# what the 2 CPUs move through veths with 8 ranks running, so the links,
# not the CPUs, set the times (docs/performance.md, "Two switches"). tbf:
# burst BED_BURST (1mb, a switch port's buffer: at 256kb the hierarchical
# allreduce, four flows through the trunk at once, ran 1.4x slower at 4 and
# 16 MiB, the ring's one flow each way no slower), queue of 50 ms at the
# rate. The root namespace
# is never touched.
#
# Ranks are started as a multi-host job is (docs/usage.md, "Several hosts";
# tests/netns/multinode_launch_test.sh): on each host hN
#   ip netns exec hN env -i PATH=.. HCOMM_JOB_TOKEN=T HCOMM_HOST_ID=hN
#     HCOMM_SWITCH_ID=s1|s2 hcomm_run --nnodes 4 --node-rank N
#     --master-addr 10.X.Y.1 --master-port P -n 2 --timeout S -- CMD
# (HCOMM_HOST_ID: the namespaces share one hostname, but not their
# loopback or abstract sockets, so each must count as a host of its own.)
#
#   switch_bed.sh [check]      the quick check (//tests/netns:switch_bed_test,
#       under a minute): the measured rates, then a checked 4 MiB float sum
#       allreduce on the 8 ranks with HCOMM_ALGO=ring and HCOMM_DEBUG=INFO:
#       no wrong element, and rank 0's "ranks by switch A | B (s1 | s2)" line
#       has each switch's 4 ranks together (the ring crosses the trunk
#       twice); then the same allreduce with HCOMM_ALGO=hierarchical: no
#       wrong element.
#   switch_bed.sh measure [SIZES...]   allreduce float sum at SIZES (default
#       1M 4M 16M 64M; hcomm_bench -n 20 -w 2 --runs 3, which runs fewer
#       iterations for large sizes: min(20, 5e7 / bytes)) five ways:
#         (a) ring, no switch labels (HCOMM_SWITCH_ID unset: rank order),
#         (b) ring with labels, (c) hierarchical with labels, (d) auto
#         (no algo) with labels, (e) as (d) with HCOMM_SWITCH_LINK_MBIT
#         set to the trunk's rate;
#       a table of time and busbw per size, busbw c/a and c/b, and what
#       rank 0 reported (HCOMM_DEBUG=INFO) for (c), (d), (e). First the
#       rates of the links (hcomm_bench p2p, 64 MiB one way: h0-h2 within
#       s1, h0-h1 across the trunk). About 5 minutes at the default rates.
#   switch_bed.sh run -- CMD [ARGS...]   CMD as 2 ranks on each host (RANK
#       0..7, switch labels set), through hcomm_run as above; relative paths
#       from the current directory, extra variables with `env VAR=VALUE CMD`
#       (BED_SWITCH_IDS=0 leaves the labels out). Prints each host's
#       output; exits with the first failing launcher's status; a job still
#       running after an hour is stopped (124).
#
# By hand (root, needs `ip netns`): bazel build //tests/netns:switch_bed_test,
# then bazel-bin/tests/netns/switch_bed_test measure. Every wait is bounded.
# The namespaces (and with them the veths, bridges and qdiscs) and every
# process started in them are removed on exit, pass or fail. Prints
# "SKIP: ..." and exits 0 only when `ip netns add` is impossible.
set -uo pipefail
for d in "${TEST_SRCDIR:-}" "${RUNFILES_DIR:-}" "$0.runfiles" "$(dirname "$0")/../.."; do
  if [[ -n "$d" && -f "$d/hcomm/tests/acceptance/testlib.sh" ]]; then
    source "$d/hcomm/tests/acceptance/testlib.sh"
    break
  fi
done
declare -F runfile >/dev/null || { echo "FAIL: testlib.sh not in the runfiles" >&2; exit 1; }
# ip and tc live in /usr/sbin, which a test's PATH leaves out.
PATH="$PATH:/usr/sbin:/sbin"

usage() {
  echo "usage: $0 [check | measure [SIZES...] | run -- CMD [ARGS...]]" >&2
  exit 2
}
mode="${1:-check}"
case "$mode" in
  check) [[ $# -le 1 ]] || usage ;;
  measure) shift ;;
  run)
    shift
    [[ "${1:-}" == "--" ]] || usage
    shift
    [[ $# -ge 1 ]] || usage
    ;;
  *) usage ;;
esac

slow_rate="${BED_SLOW_RATE:-200mbit}"
host_rate="${BED_HOST_RATE:-1gbit}"
burst="${BED_BURST:-1mb}"
launcher="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
bench=""
if [[ "$mode" != run ]]; then
  bench="$(runfile tools/hcomm_bench)" || fail "hcomm_bench not in the runfiles"
fi

# --- the bed ------------------------------------------------------------------
# As tests/netns/two_hosts.sh (whose two namespaces are a fixed pair): id,
# subnet, port (a random base; job k's store listens on port + k), work,
# made (the namespaces created) and the cleanup trap.

id="hsw-$$-$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')"
hosts=(h0 h1 h2 h3)
switch_of=(s1 s2 s1 s2) # host hN's switch, also its HCOMM_SWITCH_ID
subnet="10.$((RANDOM % 200 + 20)).$((RANDOM % 250))"
# Below the ephemeral range (32768-60999 in a new namespace): no connection's
# local port can already hold it, as one did in a CI run.
port=$((20000 + RANDOM % 12000))
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/switch_bed.XXXXXX")"
made=()

cleanup() {
  local ns p
  # Our background processes (ip netns exec execs, so these are the
  # launchers), then anything else left inside our namespaces.
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
addr_of() { echo "$subnet.$(($1 + 1))"; } # host hN's address

# The one check for the environment: can we create a namespace at all?
if ! err="$(ip netns add "$(ns_of sw1)" 2>&1)"; then
  echo "SKIP: cannot create network namespaces here (ip netns add: $err)"
  exit 0
fi
made+=("$(ns_of sw1)")

setup_network() {
  local ns sw i
  for ns in sw2 "${hosts[@]}"; do
    ip netns add "$(ns_of "$ns")" || return 1
    made+=("$(ns_of "$ns")")
  done
  for sw in sw1 sw2; do
    ns="$(ns_of "$sw")"
    ip -n "$ns" link set lo up || return 1
    # No STP: the ports forward at once.
    ip -n "$ns" link add br0 type bridge stp_state 0 || return 1
    ip -n "$ns" link set br0 up || return 1
  done
  for i in "${!hosts[@]}"; do
    ns="$(ns_of "${hosts[i]}")"
    sw="$(ns_of "sw${switch_of[i]#s}")"
    ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$sw" || return 1
    ip -n "$sw" link set "p$i" master br0 || return 1
    ip -n "$sw" link set "p$i" up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr add "$(addr_of "$i")/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
  done
  ip -n "$(ns_of sw1)" link add trunk type veth peer name trunk netns "$(ns_of sw2)" || return 1
  for sw in sw1 sw2; do
    ip -n "$(ns_of "$sw")" link set trunk master br0 || return 1
    ip -n "$(ns_of "$sw")" link set trunk up || return 1
  done
}

# tbf on the egress of both ends of every link: a full bucket (burst) passes
# at the veth's own speed, the queue holds 50 ms at the rate.
tbf() { tc -n "$1" qdisc add dev "$2" root handle 1: tbf rate "$3" burst "$burst" latency 50ms; }
shape() {
  local i
  tbf "$(ns_of sw1)" trunk "$slow_rate" || return 1
  tbf "$(ns_of sw2)" trunk "$slow_rate" || return 1
  [[ "$host_rate" == none ]] && return 0
  for i in "${!hosts[@]}"; do
    tbf "$(ns_of "${hosts[i]}")" eth0 "$host_rate" || return 1
    tbf "$(ns_of "sw${switch_of[i]#s}")" "p$i" "$host_rate" || return 1
  done
}

setup_network || fail "could not build the namespaces (see above)"
# Without shaping the check's order and data still mean something; a
# measurement does not.
shaped=1
if ! err="$(shape 2>&1)"; then
  [[ "$mode" == check ]] || fail "cannot shape the links with tc: $err"
  echo "NOTE: cannot shape the links with tc ($err); the check runs unshaped"
  shaped=0
fi
for i in "${!hosts[@]}"; do
  echo "host ${hosts[i]}: switch ${switch_of[i]}, namespace $(ns_of "${hosts[i]}")," \
    "$(ip -n "$(ns_of "${hosts[i]}")" -4 -br addr show eth0 | awk '{print $1, $3}')"
done
if ((shaped)); then
  echo "links: trunk s1-s2 tbf rate $slow_rate, hosts' links" \
    "$([[ "$host_rate" == none ]] && echo unshaped || echo "tbf rate $host_rate")," \
    "both ends of each (burst $burst, latency 50ms); no added delay (no netem here)"
fi

# --- jobs ---------------------------------------------------------------------

new_token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# launch LABEL LIMIT HOSTS LOCAL [VAR=VALUE...] -- CMD...: one hcomm_run
# per host in HOSTS (indices, e.g. "0 1 2 3"; node R on the R-th of them,
# whose address is the master), LOCAL ranks each, the store on port + job
# number; VAR=VALUE go to every rank, and HCOMM_SWITCH_ID the host's
# switch unless labels=0. Waited for up to LIMIT s (the launchers' own
# --timeout is LIMIT - 5). Sets dir (node R's output in $dir/nR.out and
# .err) and node_rc[R] (124: killed at the limit or stopped by --timeout).
# True when every launcher exits 0.
labels=1
jobs_n=0
launch() {
  local label="$1" limit="$2" hs=($3) local_n="$4" tok r h deadline left ok=0
  shift 4
  local vars=()
  while [[ $# -gt 0 && "$1" != -- ]]; do vars+=("$1"); shift; done
  [[ "${1:-}" == -- ]] && shift
  jobs_n=$((jobs_n + 1))
  dir="$work/$jobs_n-$label"
  mkdir -p "$dir"
  tok="$(new_token)"
  local pid=()
  for r in "${!hs[@]}"; do
    h="${hs[r]}"
    local sid=()
    ((labels)) && sid=(HCOMM_SWITCH_ID="${switch_of[h]}")
    ip netns exec "$(ns_of "${hosts[h]}")" env -i PATH=/usr/bin:/bin \
      HCOMM_JOB_TOKEN="$tok" HCOMM_HOST_ID="${hosts[h]}" "${sid[@]}" "${vars[@]}" \
      "$launcher" --nnodes "${#hs[@]}" --node-rank "$r" --master-addr "$(addr_of "${hs[0]}")" \
      --master-port "$((port + jobs_n))" -n "$local_n" --timeout "$((limit > 10 ? limit - 5 : limit))" \
      -- "$@" >"$dir/n$r.out" 2>"$dir/n$r.err" </dev/null &
    pid[r]=$!
  done
  deadline=$(($(date +%s) + limit))
  node_rc=()
  for r in "${!hs[@]}"; do
    left=$((deadline - $(date +%s)))
    ((left > 0)) || left=1
    node_rc[r]=0
    wait_pid "${pid[r]}" "$left" || { node_rc[r]=$?; ok=1; }
  done
  return "$ok"
}

show_logs() {
  local f
  for f in "$dir"/n*.out "$dir"/n*.err; do
    [[ -s "$f" ]] || continue
    echo "----- $(basename "$f")"
    tail -n 40 "$f"
  done
}

# jfield JSON KEY: the value of KEY in a one-line JSON object (quotes
# stripped).
jfield() { sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" <<<"$1" | tr -d '"'; }

# bench LABEL LIMIT HOSTS LOCAL [VAR=VALUE...] -- BENCH ARGS...: hcomm_bench
# ARGS --json as a job (launch); fails on a failed job or a wrong element.
# Sets lines (rank 0's JSON lines, one per size) and launch's variables.
bench() {
  local label="$1" limit="$2" pre=()
  while [[ $# -gt 0 && "$1" != -- ]]; do pre+=("$1"); shift; done
  shift
  if ! launch "${pre[@]}" -- "$bench" "$@" --json; then
    show_logs
    fail "$label: hcomm_bench did not end well (launchers exited ${node_rc[*]}; 124: timed out)"
  fi
  lines="$(sed -n 's/^\[rank 0\] \({.*}\)$/\1/p' "$dir/n0.out")"
  [[ -n "$lines" ]] || { show_logs; fail "$label: hcomm_bench printed no JSON line"; }
  local l
  while read -r l; do
    [[ "$(jfield "$l" wrong)" == 0 ]] || { show_logs; fail "$label: wrong data: $l"; }
  done <<<"$lines"
}

gbit() { awk -v g="$1" 'BEGIN { printf "%.3f", g * 8 }'; }

# The links, with hcomm p2p ping-pong (one way at a time) of SIZE between
# one rank on h0 and one on h2 (one switch: two host links) or h1 (across
# the trunk). Sets rate_in, rate_across (Gbit/s) and delay_* (8 B one way,
# us).
measure_links() {
  local size="$1" runs="$2" h name
  for h in 2 1; do
    [[ $h == 2 ]] && name=in || name=across
    bench "p2p-$name" 120 "0 $h" 1 -- p2p -b "$size" -e "$size" -w 1 --runs "$runs"
    printf -v "rate_$name" '%s' "$(gbit "$(jfield "$lines" algbw_gbs)")"
    bench "delay-$name" 60 "0 $h" 1 -- p2p -b 8 -e 8 --runs 5
    printf -v "delay_$name" '%s' "$(jfield "$lines" time_us)"
  done
  echo "links measured (hcomm_bench p2p, $size one way, median of $runs; 8 B one way, median of 5):"
  echo "  h0-h2 (within switch s1, two host links): $rate_in Gbit/s, 8 B in $delay_in us"
  echo "  h0-h1 (across the trunk s1-s2):           $rate_across Gbit/s, 8 B in $delay_across us"
}

# What rank 0 said (HCOMM_DEBUG=INFO) about the float32 collectives of the
# last job and about the hierarchical choice, without the costs and without
# hcomm_bench's own small ones (sizes in B), in order,
# each once: "allreduce 4 MiB float32 8 ranks -> ring [forced], ranks by
# switch 0 1 4 5 | 2 3 6 7 (s1 | s2)"; "; " between them.
choices() {
  cat "$dir/n0.out" "$dir/n0.err" | sed -n 's/^\[rank 0\] hcomm INFO: //p' |
    grep -E 'float32|ranks -> (flat|hierarchical)' | grep -vE '^[a-z_]+ [0-9]+ B ' |
    sed -E 's/^(.* -> [a-z ]+( \[forced\])?) \([^)]*\)/\1/' | awk '!seen[$0]++' |
    paste -sd';' | sed 's/;/; /g'
}

# The ring order that rank 0 printed for the last job: "0 1 4 5 | 2 3 6 7
# (s1 | s2)" from "... -> ring ..., ranks by switch 0 1 4 5 | 2 3 6 7 (s1 | s2)".
ring_order() {
  sed -n 's/^\[rank 0\] hcomm INFO: allreduce .* -> ring.*, ranks by switch \(.*\)$/\1/p' \
    "$dir/n0.out" "$dir/n0.err" | sort -u
}

# order_ok ORDER: true when ORDER ("0 1 4 5 | 2 3 6 7 (s1 | s2)") names
# each switch once and lists under it exactly that switch's 8 ranks' ones
# (rank r on host h(r / 2)).
order_ok() {
  local ranks="${1% (*}" names="${1##*(}" g r seen=""
  names="${names%)}"
  local groups=() sws=()
  IFS='|' read -ra groups <<<"$ranks"
  IFS='|' read -ra sws <<<"$names"
  [[ ${#groups[@]} -eq 2 && ${#sws[@]} -eq 2 ]] || return 1
  for g in 0 1; do
    local sw="${sws[g]// /}"
    [[ " $seen " != *" $sw "* ]] || return 1
    seen+=" $sw"
    local want="" got=""
    for r in 0 1 2 3 4 5 6 7; do
      [[ "${switch_of[r / 2]}" == "$sw" ]] && want+="$r "
    done
    got="$(tr ' ' '\n' <<<"${groups[g]}" | grep . | sort -n | paste -sd' ') "
    [[ "$got" == "$want" ]] || return 1
  done
}

# --- run: an arbitrary command on the bed -------------------------------------
if [[ "$mode" == run ]]; then
  [[ "${BED_SWITCH_IDS:-1}" == 0 ]] && labels=0
  launch run 3600 "0 1 2 3" 2 -- "$@"
  for r in 0 1 2 3; do
    cat "$dir/n$r.out"
    cat "$dir/n$r.err" >&2
  done
  for r in 0 1 2 3; do
    if [[ "${node_rc[r]}" -ne 0 ]]; then
      echo "bed: host ${hosts[r]}'s hcomm_run exited ${node_rc[r]}" >&2
      exit "${node_rc[r]}"
    fi
  done
  exit 0
fi

# --- check (the test) ---------------------------------------------------------
if [[ "$mode" == check ]]; then
  start="$(now)"
  ((shaped)) && measure_links 16M 1
  check_args=(allreduce -b 4M -e 4M -d float -o sum -c 1 -n 2 -w 1 --runs 1)

  echo "=== ring with switch labels (HCOMM_ALGO=ring)"
  bench ring 90 "0 1 2 3" 2 HCOMM_ALGO=ring HCOMM_DEBUG=INFO -- "${check_args[@]}"
  echo "$lines"
  order="$(ring_order)"
  [[ -n "$order" ]] || { show_logs; fail "ring: rank 0 printed no 'ranks by switch' line"; }
  [[ "$(wc -l <<<"$order")" -eq 1 ]] || fail "ring: rank 0 printed several orders: $order"
  echo "ring order: ranks by switch $order"
  order_ok "$order" ||
    fail "ring: the order '$order' does not keep each switch's ranks together" \
      "(h0, h2 on s1: ranks 0 1 4 5; h1, h3 on s2: ranks 2 3 6 7)"

  echo "=== hierarchical with switch labels (HCOMM_ALGO=hierarchical)"
  bench hierarchical 90 "0 1 2 3" 2 HCOMM_ALGO=hierarchical HCOMM_DEBUG=INFO -- \
    "${check_args[@]}"
  echo "$lines"
  echo "rank 0: $(choices)"
  echo "PASS: the ring keeps each switch's ranks together (crosses the trunk twice)," \
    "ring and hierarchical allreduce correct on 4 hosts x 2 ranks ($(elapsed "$start") s)"
  exit 0
fi

# --- measure ------------------------------------------------------------------
sizes=("$@")
((${#sizes[@]} > 0)) || sizes=(1M 4M 16M 64M)
measure_links 64M 3

# The trunk's rate in Mbit/s, for (e).
slow_mbit="$(awk -v r="$slow_rate" 'BEGIN {
  n = r + 0; u = tolower(substr(r, length(n "") + 1))
  m = u == "kbit" ? 1e-3 : u == "mbit" ? 1 : u == "gbit" ? 1e3 : u == "bit" ? 1e-6 : -1
  if (m < 0) exit 1; printf "%d", n * m }')" || fail "cannot read BED_SLOW_RATE $slow_rate in Mbit/s"
ways=(a b c d e)
declare -A way_name=(
  [a]="ring, no switch labels (rank order): HCOMM_ALGO=ring"
  [b]="ring, switch labels: HCOMM_ALGO=ring"
  [c]="hierarchical, switch labels: HCOMM_ALGO=hierarchical"
  [d]="auto, switch labels: no HCOMM_ALGO"
  [e]="auto, switch labels, the trunk's rate given: HCOMM_SWITCH_LINK_MBIT=$slow_mbit"
)
declare -A t bw choice
for w in "${ways[@]}"; do
  vars=(HCOMM_DEBUG=INFO)
  labels=1
  case "$w" in
    a) labels=0; vars+=(HCOMM_ALGO=ring) ;;
    b) vars+=(HCOMM_ALGO=ring) ;;
    c) vars+=(HCOMM_ALGO=hierarchical) ;;
    e) vars+=(HCOMM_SWITCH_LINK_MBIT="$slow_mbit") ;;
  esac
  start="$(now)"
  for s in "${sizes[@]}"; do
    bench "$w-$s" 600 "0 1 2 3" 2 "${vars[@]}" -- \
      allreduce -b "$s" -e "$s" -d float -o sum -c 1 -n 20 -w 2 --runs 3
    t[$w,$s]="$(jfield "$lines" time_us)"
    bw[$w,$s]="$(jfield "$lines" busbw_gbs)"
    choice[$w,$s]="$(choices)"
    echo "  ($w) $s: ${t[$w,$s]} us, busbw ${bw[$w,$s]} GB/s, $(jfield "$lines" iters) iters x" \
      "$(jfield "$lines" runs) runs"
    echo "      rank 0: ${choice[$w,$s]:-no INFO line}"
  done
  echo "($w) ${way_name[$w]}: $(elapsed "$start") s"
done

echo
echo "allreduce float32 sum, 4 hosts x 2 ranks on two switches (h0 h2 | h1 h3); trunk"
echo "$slow_rate, host links $host_rate (tbf, no added delay); hcomm_bench median time per"
echo "allreduce (ms) and busbw (GB/s, = algbw x 2(n-1)/n):"
for w in "${ways[@]}"; do echo "  ($w) ${way_name[$w]}"; done
{
  printf "size"
  for w in "${ways[@]}"; do printf " %s_ms" "$w"; done
  for w in "${ways[@]}"; do printf " %s_GB/s" "$w"; done
  echo " c/a c/b"
  for s in "${sizes[@]}"; do
    printf "%s" "$s"
    for w in "${ways[@]}"; do printf " %.1f" "$(awk -v x="${t[$w,$s]}" 'BEGIN { print x / 1e3 }')"; done
    for w in "${ways[@]}"; do printf " %.4f" "${bw[$w,$s]}"; done
    awk -v a="${bw[a,$s]}" -v b="${bw[b,$s]}" -v c="${bw[c,$s]}" \
      'BEGIN { printf " %.2f %.2f\n", c / a, c / b }'
  done
} | column -t
echo "(c/a, c/b: busbw of (c) over that of (a), (b) = their time over (c)'s; > 1: (c) faster)"
echo "what rank 0 reported (HCOMM_DEBUG=INFO) for (c), (d) and (e):"
for w in c d e; do
  for s in "${sizes[@]}"; do echo "  ($w) $s: ${choice[$w,$s]}"; done
done
