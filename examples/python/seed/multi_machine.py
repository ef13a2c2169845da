# The seed's multi-machine layout: a group inside each machine and a group
# of each machine's first rank; a send across machines and an allreduce
# within each. A machine is 4 ranks, as in the seed.
#
#   hcomm_run -n 8 -- python3 multi_machine.py                  # 2 machines x 4 here
#   hcomm_run --nnodes 2 --node-rank R --master-addr A --master-port P -n 4 -- \
#       python3 multi_machine.py                                # on two real hosts
import torch
import torch.distributed as dist
import hcomm

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
world_size = dist.get_world_size()
ranks_per_machine = 4
num_machines = world_size // ranks_per_machine
machine = rank // ranks_per_machine

# Every rank makes every group (new_group is collective).
intra_groups = [dist.new_group(list(range(m * ranks_per_machine, (m + 1) * ranks_per_machine)))
                for m in range(num_machines)]
intra_machine_group = intra_groups[machine]
inter_machine_group = dist.new_group([m * ranks_per_machine for m in range(num_machines)])

# Across machines: machine 0's first rank sends to machine 1's first rank.
tensor = torch.zeros(4)
if rank == 0:
    tensor += 42
    hcomm.send(tensor, dst=ranks_per_machine, tag=0, group=inter_machine_group)
    print(f"Rank {rank} sent {tensor.tolist()} across machines")
elif rank == ranks_per_machine:
    hcomm.recv(tensor, src=0, tag=0, group=inter_machine_group)
    print(f"Rank {rank} received {tensor.tolist()} from machine 0")
    assert tensor.tolist() == [42.0] * 4

# Within each machine: an allreduce of the ranks' own values.
local = torch.full((4,), float(rank))
hcomm.all_reduce(local, op=hcomm.ReduceOp.SUM, group=intra_machine_group)
expected = sum(range(machine * ranks_per_machine, (machine + 1) * ranks_per_machine))
assert local.tolist() == [float(expected)] * 4, local
print(f"Rank {rank} (machine {machine}): allreduce within the machine = {local[0].item()}")

dist.barrier()
dist.destroy_process_group()
