#!/usr/bin/env bash
# hcomm_run's multi-host launch (torchrun's flags) on one machine: two
# network namespaces play hosts a and b, joined by one veth (eth0 on each
# side, 10.X.Y.1/24 and .2; no shaping). The root namespace is never
# touched. On each host one launcher runs
#   ip netns exec HOST env -i PATH=.. HCOMM_JOB_TOKEN=T HCOMM_HOST_ID=HOST
#     hcomm_run --nnodes 2 --node-rank R --master-addr 10.X.Y.1 --master-port P -n 2 -- PROG
# (or, in (g), the same `hcomm_run --hostfile FILE ...` on both)
# (HCOMM_HOST_ID: the namespaces share one hostname, but not their
# loopback or abstract sockets, so each must count as a host of its own).
#
#   (a) environment: PROG prints RANK, WORLD_SIZE, LOCAL_RANK,
#       LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT and
#       the token, with --tag-output=0: exactly the 4 expected lines, and the
#       same HCOMM_JOB_KEY on both hosts.
#   (b) healthy: PROG is multihost_rank healthy aabb (shm to the host-mate,
#       tcp across the veth; p2p and every collective, every result
#       checked): both launchers exit 0, all 4 ranks print "ok: all", and
#       nothing of the job is left in /dev/shm.
#   (c) node-rank mismatch: both launchers say --node-rank 0. Both must
#       fail (not exit 0, not be stopped by their --timeout 60) within 60 s,
#       and a rank must say that another process took its rank.
#   (d) different tokens on the two hosts: both fail within 60 s (host a's
#       ranks by their 8 s init timeout); host b's ranks say the store
#       refused their token.
#   (e) no HCOMM_JOB_TOKEN: hcomm_run refuses at once (exit 2) and says
#       to export the same token on every node.
#   (f) the seed's multi-machine example (examples/python/multi_machine.py)
#       on 2 nodes x 4 ranks: a group per machine, a group of the machines'
#       first ranks, a send across it and an allreduce within each machine;
#       all 8 ranks report their checks.
#   (g) the hostfile mode: both hosts run the very same
#         hcomm_run --hostfile FILE --master-port P -- PROG
#       with FILE listing "10.X.Y.1 slots=1" and "10.X.Y.2:2"; each
#       launcher finds its own line by its eth0 address, so host a runs
#       rank 0 and host b ranks 1 and 2 (uneven slots): every rank's
#       environment is as the file says and multihost_rank's healthy checks
#       pass on all 3. With a hostfile that names neither host, both
#       launchers refuse at once (exit 2): no line names their machine.
#
# Every wait is bounded; the namespaces and every process started in them
# are removed on exit, pass or fail. Prints "SKIP: ..." and exits 0 only
# when `ip netns add` is impossible.
set -uo pipefail
for d in "${TEST_SRCDIR:-}" "${RUNFILES_DIR:-}" "$0.runfiles" "$(dirname "$0")/../.."; do
  if [[ -n "$d" && -f "$d/hcomm/tests/acceptance/testlib.sh" ]]; then
    source "$d/hcomm/tests/acceptance/testlib.sh"
    break
  fi
done
declare -F runfile >/dev/null || { echo "FAIL: testlib.sh not in the runfiles" >&2; exit 1; }

run="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"
prog="$(runfile tests/netns/multihost_rank)" || fail "multihost_rank not in the runfiles"
example="$(runfile examples/python/multi_machine_rank)" ||
  fail "examples/python/multi_machine_rank not in the runfiles"

# Hosts a and b, node R on host ${hosts[R]}; part k's store listens on
# port + k.
two_hosts="$(runfile tests/netns/two_hosts.sh)" || fail "two_hosts.sh not in the runfiles"
BED_PREFIX=hcml BED_NAME=multinode_launch source "$two_hosts"
master="$subnet.1"
setup_network || fail "could not build the namespaces (see above)"
for h in "${hosts[@]}"; do
  echo "host $h: namespace $(ns_of "$h"), $(ip -n "$(ns_of "$h")" -4 -br addr show eth0)"
done

timeout_ms=20000
new_token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# --- launchers ----------------------------------------------------------------

# launch_hosts PART LIMIT TOKEN_A TOKEN_B: one launcher on each host, host
# a's with the arguments in the array args_a, b's with those in args_b,
# waited for up to LIMIT s. An empty token is left out of the launcher's
# environment; the ranks get HCOMM_TIMEOUT_MS=$timeout_ms. Sets dir (host
# h's output in $dir/h.out and .err), node_rc[i] (124: killed at the limit)
# and took[i] (seconds until launcher i ended).
launch_hosts() {
  local part="$1" limit="$2" i h tok deadline left t0
  local toks=("$3" "$4")
  dir="$work/$part"
  mkdir -p "$dir"
  local pid=()
  t0="$(now)"
  for i in 0 1; do
    h="${hosts[i]}"
    tok=()
    [[ -n "${toks[i]}" ]] && tok=(HCOMM_JOB_TOKEN="${toks[i]}")
    local -n host_args="args_$h"
    ip netns exec "$(ns_of "$h")" env -i PATH=/usr/bin:/bin "${tok[@]}" \
      HCOMM_HOST_ID="$(ns_of "$h")" HCOMM_TIMEOUT_MS="$timeout_ms" \
      "$run" "${host_args[@]}" >"$dir/$h.out" 2>"$dir/$h.err" </dev/null &
    pid[i]=$!
    unset -n host_args
  done
  deadline=$(($(date +%s) + limit))
  node_rc=()
  took=()
  for i in 0 1; do
    left=$((deadline - $(date +%s)))
    ((left > 0)) || left=1
    node_rc[i]=0
    wait_pid "${pid[i]}" "$left" || node_rc[i]=$?
    took[i]="$(elapsed "$t0")"
  done
}

# launch_nodes PART LIMIT TOKEN_A TOKEN_B RANK_A RANK_B [HCOMM_RUN ARGS...]:
# launch_hosts with torchrun's flags: node ranks RANK_A and RANK_B, the
# store at host a's address and port + PART.
launch_nodes() {
  local common=(--nnodes 2 --master-addr "$master" --master-port "$((port + $1))")
  args_a=("${common[@]}" --node-rank "$5" "${@:7}")
  args_b=("${common[@]}" --node-rank "$6" "${@:7}")
  launch_hosts "$1" "$2" "$3" "$4"
}

# launch_hostfile PART LIMIT TOKEN FILE [HCOMM_RUN ARGS...]: launch_hosts
# with one command for both hosts, `hcomm_run --hostfile FILE --master-port
# port+PART ARGS...`, and one token.
launch_hostfile() {
  args_a=(--hostfile "$4" --master-port "$((port + $1))" "${@:5}")
  args_b=("${args_a[@]}")
  launch_hosts "$1" "$2" "$3" "$3"
}

show_logs() {
  local h f
  for h in "${hosts[@]}"; do
    for f in out err; do
      [[ -s "$dir/$h.$f" ]] || continue
      echo "----- host $h, hcomm_run's std$f"
      cat "$dir/$h.$f"
    done
  done
}

# --- (a) environment ----------------------------------------------------------
echo "=== (a) the environment of 2 nodes x 2 ranks"
tok="$(new_token)"
launch_nodes 0 30 "$tok" "$tok" 0 1 --tag-output=0 -n 2 -- /bin/sh -c \
  'echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE" \
     "GROUP_RANK=$GROUP_RANK NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT" \
     "token=$HCOMM_JOB_TOKEN"
   echo "key=$HCOMM_JOB_KEY" >&2'
for i in 0 1; do
  [[ "${node_rc[i]}" -eq 0 ]] || { show_logs; fail "(a): host ${hosts[i]}'s launcher exited ${node_rc[i]}"; }
done
expected=""
for r in 0 1 2 3; do
  expected+="RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2"
  expected+=" GROUP_RANK=$((r / 2)) NODE_RANK=$((r / 2)) MASTER_ADDR=$master MASTER_PORT=$port"
  expected+=" token=$tok"$'\n'
done
got="$(cat "$dir/a.out" "$dir/b.out" | sort)"
if [[ "$got" != "$(sort <<<"${expected%$'\n'}")" ]]; then
  show_logs
  fail "(a): the ranks' environment is not as expected; want:"$'\n'"$expected"
fi
keys="$(cat "$dir/a.err" "$dir/b.err" | sort -u)"
[[ "$keys" =~ ^key=[0-9a-f]{16}$ ]] ||
  { show_logs; fail "(a): the hosts' ranks got different or malformed job keys: $keys"; }
sed 's/ token=.*//' "$dir/a.out" "$dir/b.out"
echo "(a) passed: RANK 0..3, WORLD_SIZE 4, GROUP_RANK 0 and 1, one job key"

# --- (b) healthy --------------------------------------------------------------
echo "=== (b) multihost_rank healthy on 2 nodes x 2 ranks"
tok="$(new_token)"
start="$(now)"
launch_nodes 1 180 "$tok" "$tok" 0 1 -n 2 --timeout 150 -- /bin/sh -c \
  'echo "key=$HCOMM_JOB_KEY"; exec "$0" "$@"' "$prog" healthy aabb
for i in 0 1; do
  if [[ "${node_rc[i]}" -ne 0 ]]; then
    show_logs
    [[ "${node_rc[i]}" -eq 124 ]] && fail "(b): host ${hosts[i]}'s launcher hung (killed after 180 s)"
    fail "(b): host ${hosts[i]}'s launcher exited ${node_rc[i]}"
  fi
done
for r in 0 1 2 3; do
  grep -qxF "[rank $r] ok: all" "$dir/${hosts[r / 2]}.out" ||
    { show_logs; fail "(b): rank $r (host ${hosts[r / 2]}) did not print 'ok: all'"; }
done
if grep -q 'FAIL\|CORRUPT' "$dir"/*.out "$dir"/*.err; then
  show_logs
  fail "(b): a rank reported a failure"
fi
grep -h 'transports:' "$dir"/*.out
key="$(sed -n 's/^\[rank 0\] key=//p' "$dir/a.out")"
[[ "$key" =~ ^[0-9a-f]{16}$ ]] || { show_logs; fail "(b): no job key from rank 0: '$key'"; }
left_over="$(ls /dev/shm 2>/dev/null | grep "^hcomm-$key-")"
[[ -z "$left_over" ]] || fail "(b): the job left segments in /dev/shm: $left_over"
echo "(b) passed in $(elapsed "$start") s: both launchers exited 0, every check of the 4 ranks passed"

# --- (c) node-rank mismatch ---------------------------------------------------
echo "=== (c) both launchers say --node-rank 0"
timeout_ms=8000 # (d): host a's ranks wait this long for the ranks that never come
tok="$(new_token)"
launch_nodes 2 90 "$tok" "$tok" 0 0 -n 2 --timeout 60 -- "$prog" healthy aabb
show_logs
for i in 0 1; do
  case "${node_rc[i]}" in
    0) fail "(c): host ${hosts[i]}'s launcher exited 0 with two nodes 0" ;;
    124) fail "(c): host ${hosts[i]}'s launcher ended by its --timeout 60 (or hung): no clear failure" ;;
  esac
  echo "(c) host ${hosts[i]}: hcomm_run exited ${node_rc[i]} after ${took[i]} s"
done
grep -q 'another process joined the store at .* as rank [01] first' "$dir"/*.out "$dir"/*.err ||
  fail "(c): no rank said that another process took its rank"
echo "(c) passed: both launchers failed, saying that two processes claimed one rank"

# --- (d) different tokens -----------------------------------------------------
echo "=== (d) the hosts export different tokens"
launch_nodes 3 90 "$(new_token)" "$(new_token)" 0 1 -n 2 --timeout 60 -- "$prog" healthy aabb
show_logs
for i in 0 1; do
  case "${node_rc[i]}" in
    0) fail "(d): host ${hosts[i]}'s launcher exited 0 with a wrong token" ;;
    124) fail "(d): host ${hosts[i]}'s launcher ended by its --timeout 60 (or hung)" ;;
  esac
  echo "(d) host ${hosts[i]}: hcomm_run exited ${node_rc[i]} after ${took[i]} s"
done
grep -q 'PERMISSION_DENIED\|refused our job token' "$dir/b.out" "$dir/b.err" ||
  fail "(d): host b's ranks did not say that their token was refused"
echo "(d) passed"

# --- (e) no token -------------------------------------------------------------
echo "=== (e) no HCOMM_JOB_TOKEN"
launch_nodes 4 10 "" "" 0 1 -n 2 -- /bin/true
head -qn1 "$dir/a.err" "$dir/b.err"
for i in 0 1; do
  [[ "${node_rc[i]}" -eq 2 ]] ||
    fail "(e): host ${hosts[i]}'s launcher exited ${node_rc[i]}, want 2 (usage error)"
  grep -qF 'export the same HCOMM_JOB_TOKEN on every node' "$dir/${hosts[i]}.err" ||
    fail "(e): host ${hosts[i]}: no message saying to export the same HCOMM_JOB_TOKEN"
done
echo "(e) passed"

# --- (f) the seed's multi-machine example --------------------------------------
echo "=== (f) examples/python/multi_machine.py on 2 nodes x 4 ranks"
tok="$(new_token)"
start="$(now)"
launch_nodes 5 180 "$tok" "$tok" 0 1 -n 4 --timeout 150 -- "$example"
for i in 0 1; do
  if [[ "${node_rc[i]}" -ne 0 ]]; then
    show_logs
    fail "(f): host ${hosts[i]}'s launcher exited ${node_rc[i]}"
  fi
done
for r in 0 1 2 3 4 5 6 7; do
  grep -q "^\[rank $r\] rank $r: machine $((r / 4)) of 2 .* ok$" "$dir/${hosts[r / 4]}.out" ||
    { show_logs; fail "(f): rank $r (host ${hosts[r / 4]}) did not report its checks"; }
done
cat "$dir/a.out" "$dir/b.out"
echo "(f) passed in $(elapsed "$start") s"

# --- (g) one command for both hosts, from a hostfile ---------------------------
echo "=== (g) --hostfile: the same command on both hosts, 1 + 2 ranks"
hostfile="$work/hosts"
printf '%s\n' "# multinode_launch_test's hosts: a is node 0 (the master), b node 1" \
  "$subnet.1 slots=1" "" "$subnet.2:2   # host b" >"$hostfile"
sed 's/^/  | /' "$hostfile"
tok="$(new_token)"
start="$(now)"
launch_hostfile 6 180 "$tok" "$hostfile" --timeout 150 -- /bin/sh -c \
  'echo "env: RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK" \
     "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR" \
     "MASTER_PORT=$MASTER_PORT key=$HCOMM_JOB_KEY"
   exec "$0" "$@"' "$prog" healthy abb
for i in 0 1; do
  if [[ "${node_rc[i]}" -ne 0 ]]; then
    show_logs
    [[ "${node_rc[i]}" -eq 124 ]] && fail "(g): host ${hosts[i]}'s launcher hung (killed after 180 s)"
    fail "(g): host ${hosts[i]}'s launcher exited ${node_rc[i]}"
  fi
done
# Host a holds rank 0, host b ranks 1 and 2 (its LOCAL_RANK 0 and 1).
host_of=(a b b)
local_of=(0 0 1)
for r in 0 1 2; do
  h="${host_of[r]}"
  want="[rank $r] env: RANK=$r WORLD_SIZE=3 LOCAL_RANK=${local_of[r]}"
  want+=" LOCAL_WORLD_SIZE=$((r == 0 ? 1 : 2)) NODE_RANK=$((r == 0 ? 0 : 1))"
  want+=" MASTER_ADDR=$master MASTER_PORT=$((port + 6)) key="
  grep -qF "$want" "$dir/$h.out" ||
    { show_logs; fail "(g): host $h lacks the line of rank $r: $want..."; }
  grep -qxF "[rank $r] ok: all" "$dir/$h.out" ||
    { show_logs; fail "(g): rank $r (host $h) did not print 'ok: all'"; }
done
if grep -q 'FAIL\|CORRUPT' "$dir"/*.out "$dir"/*.err; then
  show_logs
  fail "(g): a rank reported a failure"
fi
keys="$(sed -n 's/^\[rank [012]\] env: .* key=//p' "$dir/a.out" "$dir/b.out" | sort -u)"
[[ "$keys" =~ ^[0-9a-f]{16}$ ]] ||
  { show_logs; fail "(g): the hosts' ranks got different or malformed job keys: $keys"; }
left_over="$(ls /dev/shm 2>/dev/null | grep "^hcomm-$keys-")"
[[ -z "$left_over" ]] || fail "(g): the job left segments in /dev/shm: $left_over"
grep -h 'env:' "$dir/a.out" "$dir/b.out" | sed 's/ key=.*//'
echo "(g) each host found its line; the job passed in $(elapsed "$start") s"
# A hostfile that names neither host: both refuse at once, naming the file.
printf '%s\n' "$subnet.3 slots=2" "$subnet.4 slots=2" >"$work/hosts_other"
launch_hostfile 7 10 "$tok" "$work/hosts_other" -- /bin/true
head -qn1 "$dir/a.err" "$dir/b.err"
for i in 0 1; do
  [[ "${node_rc[i]}" -eq 2 ]] ||
    fail "(g): host ${hosts[i]}'s launcher exited ${node_rc[i]} with a hostfile naming neither host, want 2"
  grep -qF "hcomm_run: $work/hosts_other: no line names this machine" "$dir/${hosts[i]}.err" ||
    fail "(g): host ${hosts[i]}: no message saying that no line of the hostfile names it"
done
echo "(g) passed"

echo "PASS: environment, healthy job, node-rank mismatch, token mismatch, missing token, the multi-machine example, the hostfile"
