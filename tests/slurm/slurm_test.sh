#!/usr/bin/env bash
# hcomm under a real Slurm (Debian's slurmctld + slurmd 22.05 and munge) on
# one machine: two network namespaces play compute nodes a and b, joined by
# one veth (eth0 on each side, 10.X.Y.1 and .2 /24, as
# tests/netns/two_hosts.sh builds them; that file is private to its
# package, so the few lines are repeated here).
#
# The cluster, all of it under one temporary folder in /tmp (nothing in
# /etc, no systemd; removed on exit, pass or fail):
#   munged     in the root namespace, with a key made here and a socket of
#              its own (a file, so every namespace reaches it); slurm.conf
#              points at it with AuthInfo=socket=...
#   slurmctld  on host a (SlurmctldHost=a(10.X.Y.1));
#   slurmd     one per host: `slurmd -N a` and `slurmd -N b` (NodeAddr
#              10.X.Y.1 and .2, CPUs=2 each; SlurmdParameters=
#              config_overrides so that the machine's own layout is not
#              checked against it).
# One slurmd per namespace, not one node with oversubscribed CPUs, so that
# tasks 0-1 and 2-3 sit on different hosts and hcomm must use shm within a
# node and tcp across, as on a real cluster.
# A daemon runs "on host H" as `nsenter --net` into H's namespace (not `ip
# netns exec`, which remounts /sys and so hides the cgroup tree that slurmd
# 22.05 reads at start) plus `unshare --uts --mount`: hostname H and a
# private /etc/hosts (bound in that mount namespace only) that resolves a
# and b. The job's tasks inherit all of it, so they see what a cluster
# gives them: their node's hostname, resolvable node names and slurmd's
# SLURM_* variables. Ports: SlurmctldPort and SlurmdPort are a random base
# (+0, +1) inside the new namespaces, where nothing else listens.
#
# The job, an sbatch script as a user would write it (run with --wait):
#   MASTER_ADDR = the first node of SLURM_JOB_NODELIST (scontrol show
#                 hostnames; task 0 runs there), MASTER_PORT = 20000 +
#                 SLURM_JOB_ID % 20000: hcomm has no Slurm default for the
#                 store's address, it reads only HCOMM_STORE_ADDR or
#                 MASTER_ADDR + MASTER_PORT; HCOMM_JOB_TOKEN drawn there
#                 (srun passes the batch script's environment to the tasks);
#   srun -N 2 -n 4 --label /usr/bin/python3 RANK_PROGRAM (the interpreter
#                 the binding is built for): each rank joins with
#                 hcomm.init() (rank and size from SLURM_PROCID and
#                 SLURM_NTASKS: the script checks that no variable that hcomm
#                 reads first is set), prints its rank, size, host and
#                 transport to each peer, and checks allreduces (sum of 1,
#                 1000 and 1M+3 float64, max of 1000 int64) against values
#                 computed here.
# Then a second step, hcomm_run as each node's launcher (srun --nodes=2
# --ntasks-per-node=1 hcomm_run --nnodes $SLURM_NNODES --node-rank
# $SLURM_NODEID --master-addr $MASTER_ADDR --master-port P -n 2), running
# the same rank program.
# Checked per task: Slurm's view (SLURM_PROCID = the --label, SLURM_NTASKS
# 4, tasks 0-1 on node a and 2-3 on b, the job's token of 64 hex digits
# there) equals hcomm's (rank = SLURM_PROCID, size 4), the transports are
# shm to the node-mate and tcp to the other node, and the allreduce checks
# passed; in the hcomm_run step, node n's launcher ran ranks 2n and 2n+1
# with the same links and checks.
#
# Every wait is bounded (munged 5 s, the nodes 15 s, the job 35 s: under a
# minute in all; sbatch --wait polls, so the job takes longer than its
# ranks). Prints "SKIPPED: ..." and exits 0 where Slurm cannot run here:
# not root, a tool missing, no network namespaces, or daemons that do not
# come up within 15 s (their logs are printed). Once both nodes are idle,
# any failure of the job fails the test.
set -uo pipefail
for d in "${TEST_SRCDIR:-}" "${RUNFILES_DIR:-}" "$0.runfiles" "$(dirname "$0")/../.."; do
  if [[ -n "$d" && -f "$d/hcomm/tests/acceptance/testlib.sh" ]]; then
    source "$d/hcomm/tests/acceptance/testlib.sh"
    break
  fi
done
declare -F runfile >/dev/null || { echo "FAIL: testlib.sh not in the runfiles" >&2; exit 1; }

skip() {
  echo "SKIPPED: $*"
  exit 0
}

export PATH="$PATH:/usr/sbin:/sbin"
pymod="$(runfile bindings/python/hcomm/__init__.py)" || fail "the hcomm Python package is not in the runfiles"
pypath="$(dirname "$(dirname "$pymod")")"
hcomm_run="$(runfile tools/hcomm_run)" || fail "hcomm_run not in the runfiles"

# --- can Slurm run here? ------------------------------------------------------
[[ "$(id -u)" -eq 0 ]] || skip "Slurm's daemons need root here (uid $(id -u))"
for tool in munged slurmctld slurmd sbatch srun scontrol sinfo nsenter unshare ip /usr/bin/python3; do
  command -v "$tool" >/dev/null ||
    skip "$tool is not installed (bash tools/setup.sh installs slurmd, slurmctld, slurm-client and munge)"
done

# Nothing of an enclosing Slurm job or launcher may leak into ours.
for v in $(compgen -e); do
  case "$v" in
    SLURM_* | SBATCH_* | SRUN_* | SALLOC_* | HCOMM_* | RANK | WORLD_SIZE | LOCAL_RANK | \
      LOCAL_WORLD_SIZE | MASTER_ADDR | MASTER_PORT | OMPI_COMM_WORLD_* | PMI_*) unset "$v" ;;
  esac
done

# --- hosts a and b -------------------------------------------------------------
id="hcsl-$$-$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')"
hosts=(a b)
subnet="10.$((RANDOM % 200 + 20)).$((RANDOM % 250))"
# Below the ephemeral range (32768-60999 in a new namespace): no connection's
# local port can already hold it, as one did in a CI run.
port=$((20000 + RANDOM % 12000))
# Short on purpose: munged's and slurmstepd's unix sockets live under it,
# and a socket's path must fit in 108 bytes (TEST_TMPDIR's does not).
work="$(mktemp -d /tmp/hcomm-slurm.XXXXXX)"
chmod 755 "$work" # munged wants its socket's folder searchable by all
made=()           # namespaces created so far

ns_of() { echo "$id-$1"; }

# On any exit: our background processes (munged, and the daemons: nsenter
# and unshare exec them, so these are their pids), then anything left in
# our namespaces (slurmstepd, tasks), gently first; then the namespaces and
# the folder.
cleanup() {
  local ns p pids=()
  pids=($(jobs -p))
  for ns in "${made[@]}"; do pids+=($(ip netns pids "$ns" 2>/dev/null)); done
  if ((${#pids[@]})); then
    kill -TERM "${pids[@]}" 2>/dev/null
    for _ in $(seq 20); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.05
    done
    kill -KILL "${pids[@]}" 2>/dev/null
  fi
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  { wait; } 2>/dev/null
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

if ! err="$(ip netns add "$(ns_of a)" 2>&1)"; then
  skip "cannot create network namespaces here (ip netns add: $err)"
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
setup_network || skip "could not build the namespaces (see above)"
addr_a="$subnet.1"
addr_b="$subnet.2"
ctl_port="$port"
node_port=$((port + 1))

conf="$work/slurm.conf"
mkdir -p "$work/munge" "$work/state" "$work/spool/a" "$work/spool/b" "$work/log" "$work/job"
chmod 755 "$work/munge"
printf '127.0.0.1 localhost\n%s a\n%s b\n' "$addr_a" "$addr_b" >"$work/hosts"
: >"$work/plugstack.conf" # none of /etc/slurm/plugstack.conf's plugins

show_logs() {
  local f
  for f in "$work"/munged.log "$work"/log/*; do
    [[ -s "$f" ]] || continue
    echo "----- $(basename "$f") (last 25 lines)"
    tail -n 25 "$f"
  done
}

# on_host H CMD...: CMD on host H, as its daemons run (see the header).
on_host() {
  local h="$1"
  shift
  nsenter --net="/run/netns/$(ns_of "$h")" unshare --uts --mount --propagation private \
    /bin/sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
    sh "$work/hosts" "$h" "$@"
}

# --- munge ----------------------------------------------------------------------
head -c 1024 /dev/urandom >"$work/munge/key"
chmod 400 "$work/munge/key"
munged --foreground --key-file="$work/munge/key" --socket="$work/munge/sock" \
  --pid-file="$work/munge/pid" --seed-file="$work/munge/seed" \
  --log-file="$work/munged.log" >>"$work/munged.log" 2>&1 </dev/null &
if ! wait_file "$work/munge/sock" 5; then
  show_logs
  skip "munged did not come up within 5 s (log above)"
fi

# --- slurm.conf ------------------------------------------------------------------
cat >"$conf" <<EOF
ClusterName=hcomm-test
SlurmctldHost=a($addr_a)
SlurmctldPort=$ctl_port
SlurmdPort=$node_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.%n.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$work/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
MessageTimeout=5
KillWait=2
InactiveLimit=0
NodeName=a NodeAddr=$addr_a CPUs=2 State=UNKNOWN
NodeName=b NodeAddr=$addr_b CPUs=2 State=UNKNOWN
PartitionName=hcomm Nodes=a,b Default=YES MaxTime=2 State=UP
EOF
export SLURM_CONF="$conf"

# --- the daemons -----------------------------------------------------------------
on_host a slurmctld -D -i -f "$conf" >"$work/log/slurmctld.out" 2>&1 </dev/null &
for h in a b; do
  on_host "$h" slurmd -D -N "$h" -f "$conf" >"$work/log/slurmd.$h.out" 2>&1 </dev/null &
done
start="$(now)"
deadline=$(($(date +%s) + 15))
state=""
while :; do
  state="$(on_host a timeout 5 sinfo -h -N -o '%N=%t' 2>/dev/null | sort | tr '\n' ' ')"
  [[ "$state" == "a=idle b=idle " ]] && break
  if (($(date +%s) >= deadline)); then
    show_logs
    skip "the Slurm nodes did not become idle within 15 s (sinfo: '${state:-no answer}'; logs above)"
  fi
  sleep 0.2
done
echo "cluster up in $(elapsed "$start") s: munged; slurmctld on a ($addr_a:$ctl_port);" \
  "slurmd on a ($addr_a) and b ($addr_b), port $node_port"
on_host a timeout 5 sinfo -N -o '%N %t %c %P'

# --- the job ---------------------------------------------------------------------
# Each rank: join from the environment, report, check allreduces.
cat >"$work/job/rank.py" <<'EOF'
import socket
import sys
import hcomm
import numpy as np

comm = hcomm.init()
r, n = hcomm.get_rank(), hcomm.get_world_size()
links = " ".join("%d=%s" % (p, comm.transport(p)) for p in range(n))
print("hcomm: rank %d size %d host %s links %s" % (r, n, socket.gethostname(), links), flush=True)
for count in (1, 1000, (1 << 20) + 3):
    t = np.arange(count, dtype=np.float64) + r + 1
    hcomm.all_reduce(t)
    want = np.arange(count, dtype=np.float64) * n + n * (n + 1) / 2
    if not np.array_equal(t, want):
        bad = int(np.flatnonzero(t != want)[0])
        sys.exit("FAIL: rank %d: allreduce sum of %d float64: element %d is %r, want %r"
                 % (r, count, bad, t[bad], want[bad]))
t = np.full(1000, r * 7, dtype=np.int64)
hcomm.all_reduce(t, op=hcomm.ReduceOp.MAX)
if not (t == (n - 1) * 7).all():
    sys.exit("FAIL: rank %d: allreduce max of 1000 int64 gave %r" % (r, t[:4]))
hcomm.destroy()
print("ok: rank %d allreduce" % r, flush=True)
EOF
# What a user's batch script does; the lines marked "test:" only check.
cat >"$work/job/job.sh" <<'EOF'
#!/bin/bash
#SBATCH --nodes=2 --ntasks=4 --ntasks-per-node=2 --time=1
set -euo pipefail
# hcomm's rank 0 serves the rendezvous store at MASTER_ADDR:MASTER_PORT;
# Slurm places task 0 on the first node of the allocation.
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
# One secret for the whole job: srun passes the environment to every task.
export HCOMM_JOB_TOKEN="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export HCOMM_TIMEOUT_MS=20000
echo "batch: job $SLURM_JOB_ID on $(hostname), nodes $SLURM_JOB_NODELIST, store $MASTER_ADDR:$MASTER_PORT"
# test: nothing that hcomm reads before SLURM_PROCID / SLURM_NTASKS is set.
if env | grep -E '^(HCOMM_RANK|HCOMM_WORLD_SIZE|RANK|WORLD_SIZE|OMPI_COMM_WORLD_(RANK|SIZE)|PMI_(RANK|SIZE))='; then
  echo "batch: FAIL: a variable that hcomm prefers to SLURM_PROCID / SLURM_NTASKS is set"
  exit 1
fi
# test: each task prints Slurm's view of it, then runs the rank program.
srun --label --kill-on-bad-exit=1 /bin/sh -c \
  'echo "slurm: procid=$SLURM_PROCID ntasks=$SLURM_NTASKS node=$SLURMD_NODENAME host=$(hostname) token=${#HCOMM_JOB_TOKEN}"; exec /usr/bin/python3 "$0"' \
  rank.py
# hcomm_run as each node's launcher instead: one task per node, its node
# rank from Slurm, 2 ranks each (RANK and WORLD_SIZE from hcomm_run win
# over SLURM_*). Its own port, as steps that run at once would need.
srun --label --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1 /bin/sh -c \
  'exec "$0" --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" --master-addr "$MASTER_ADDR" \
     --master-port $((MASTER_PORT + 1)) -n 2 --timeout 30 -- /usr/bin/python3 rank.py' \
  "$HCOMM_RUN"
# srun alone, as a user who sets nothing would run it: the store on the
# step's first node (SLURM_STEP_NODELIST), its port from the job and step.
echo "batch: SLURM_STEP_NODELIST=${SLURM_STEP_NODELIST-unset}"
srun --label --kill-on-bad-exit=1 /bin/sh -c \
  'unset MASTER_ADDR MASTER_PORT; /usr/bin/python3 "$0" | sed "s/^/alone: /"' rank.py
EOF
out="$work/job/out"
start="$(now)"
job_rc=0
on_host a timeout -k 3 35 sbatch --wait --quiet --chdir="$work/job" --output="$out" \
  --export="ALL,PYTHONPATH=$pypath,HCOMM_RUN=$hcomm_run" "$work/job/job.sh" || job_rc=$?
took="$(elapsed "$start")"
cat "$out" 2>/dev/null
echo "--- sbatch --wait exited $job_rc after $took s"
if [[ "$job_rc" -ne 0 ]]; then
  on_host a timeout 5 scontrol show job 2>/dev/null | head -n 30
  show_logs
  [[ "$job_rc" -eq 124 || "$job_rc" -eq 137 ]] && fail "the job did not end within 35 s"
  fail "the job failed (sbatch --wait exited $job_rc)"
fi

# --- the checks ------------------------------------------------------------------
for t in 0 1 2 3; do
  node=a mate=$((t ^ 1)) links=""
  ((t >= 2)) && node=b
  for p in 0 1 2 3; do
    if ((p == t)); then links+=" $p=self"; elif ((p == mate)); then links+=" $p=shm"; else links+=" $p=tcp"; fi
  done
  grep -qxF "$t: slurm: procid=$t ntasks=4 node=$node host=$node token=64" "$out" ||
    fail "task $t: no line 'slurm: procid=$t ntasks=4 node=$node host=$node token=64'" \
      "(placed elsewhere, or the batch script's token did not reach it?)"
  grep -qxF "$t: hcomm: rank $t size 4 host $node links${links}" "$out" ||
    fail "task $t (SLURM_PROCID $t on $node): want 'hcomm: rank $t size 4 host $node links${links}'"
  grep -qxF "$t: ok: rank $t allreduce" "$out" || fail "task $t: the allreduce checks did not pass"
  # The hcomm_run step: task n is node n's launcher, its ranks 2n and 2n+1.
  n=$((t / 2))
  grep -qxF "$n: [rank $t] hcomm: rank $t size 4 host $node links${links}" "$out" ||
    fail "hcomm_run step, node $n: want '[rank $t] hcomm: rank $t size 4 host $node links${links}'"
  grep -qxF "$n: [rank $t] ok: rank $t allreduce" "$out" ||
    fail "hcomm_run step, rank $t: the allreduce checks did not pass"
  grep -qxF "$t: alone: ok: rank $t allreduce" "$out" ||
    fail "srun without MASTER_ADDR, task $t: the allreduce checks did not pass"
done
if grep -q 'FAIL' "$out"; then fail "a rank reported a failure"; fi
echo "PASS: sbatch + srun -N 2 -n 4 on slurmctld and 2 slurmd: ranks 0-3 of 4 from" \
  "SLURM_PROCID / SLURM_NTASKS, the store on the first node, shm within a node, tcp across," \
  "allreduces checked; then the same 4 ranks through one hcomm_run per node ($took s for the job)"
