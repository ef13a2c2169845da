"""The seed's multi-machine layout: machines of several ranks, a group per machine
and a group of the machines' first ranks.

    bazel run //examples/python:multi_machine              # 4 ranks: 2 machines x 2
    HCOMM_NP=8 bazel run //examples/python:multi_machine   # the seed's 2 machines x 4

On two real hosts, one launcher per host (hcomm_run's torchrun-style flags;
the same HCOMM_JOB_TOKEN on both):

    export HCOMM_JOB_TOKEN=<the same secret on both hosts>
    hcomm_run --nnodes 2 --node-rank 0 --master-addr HOST_A --master-port 29500 -n 4 -- \\
        python3 multi_machine.py                           # on HOST_A
    hcomm_run --nnodes 2 --node-rank 1 --master-addr HOST_A --master-port 29500 -n 4 -- \\
        python3 multi_machine.py                           # on HOST_B

A machine is LOCAL_WORLD_SIZE consecutive ranks (hcomm_run sets it; or
--ranks-per-machine). Every rank makes every machine's intra_machine_group
(new_group is collective: ranks outside a group get
hcomm.GroupMember.NON_GROUP_MEMBER) and the
inter_machine_group of each machine's first rank. Then:

- across inter_machine_group, machine 0's first rank sends a vector to the
  first rank of every other machine (dst and src are ranks of the job, as in
  torch.distributed, whatever the group);
- within each intra_machine_group, an allreduce of the ranks' own values.

Each rank checks what it got and prints one line.
"""

import argparse
import os
import sys

import numpy as np

import hcomm

TAG = 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks-per-machine", type=int,
                    default=int(os.environ.get("LOCAL_WORLD_SIZE", "2")))
    ap.add_argument("--size", type=int, default=1 << 16, help="elements sent across machines")
    args = ap.parse_args()

    hcomm.init()
    rank, world = hcomm.get_rank(), hcomm.get_world_size()
    per = args.ranks_per_machine
    if per < 1 or world % per != 0:
        print(f"rank {rank}: {world} ranks do not make machines of {per}", file=sys.stderr)
        return 2
    machines = world // per
    machine = rank // per

    # Collective over the whole job: every rank makes every group.
    intra_groups = [hcomm.new_group(list(range(m * per, (m + 1) * per))) for m in range(machines)]
    intra_machine_group = intra_groups[machine]
    inter_machine_group = hcomm.new_group([m * per for m in range(machines)])

    # Across machines: machine 0's leader sends to every other leader.
    leader = inter_machine_group is not hcomm.GroupMember.NON_GROUP_MEMBER
    if leader:
        if machine == 0:
            payload = np.arange(args.size, dtype=np.float32)
            for m in range(1, machines):  # dst: the leader's rank in the job
                hcomm.send(payload, dst=m * per, tag=TAG, group=inter_machine_group)
        else:
            got = np.zeros(args.size, dtype=np.float32)
            hcomm.recv(got, src=0, tag=TAG, group=inter_machine_group)
            if not np.array_equal(got, np.arange(args.size, dtype=np.float32)):
                print(f"rank {rank}: wrong data from machine 0", file=sys.stderr)
                return 1

    # Within each machine: the sum of its ranks' values.
    value = np.full(4, rank + 1, dtype=np.int64)
    hcomm.all_reduce(value, op=hcomm.ReduceOp.SUM, group=intra_machine_group)
    want = sum(r + 1 for r in range(machine * per, (machine + 1) * per))
    if not (value == want).all():
        print(f"rank {rank}: machine {machine} allreduce gave {value[0]}, want {want}",
              file=sys.stderr)
        return 1

    role = "leader" if leader else "worker"
    print(f"rank {rank}: machine {machine} of {machines} ({role}): "
          f"{'sent' if machine == 0 and role == 'leader' else 'received' if role == 'leader' else 'no'} "
          f"cross-machine vector, machine allreduce {value[0]} ok")
    hcomm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
