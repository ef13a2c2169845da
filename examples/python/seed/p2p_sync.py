# The seed's synchronous point-to-point example, as a user writes it:
# torch.distributed starts the job, hcomm moves the tensor.
#
#   hcomm_run -n 2 -- python3 p2p_sync.py
import torch
import torch.distributed as dist
import hcomm

dist.init_process_group(backend="gloo")
rank = dist.get_rank()

tensor = torch.zeros(10)
if rank == 0:
    tensor += 1
    hcomm.send(tensor, dst=1, tag=0)
    print(f"Rank 0 sent data: {tensor}")
elif rank == 1:
    hcomm.recv(tensor, src=0, tag=0)
    print(f"Rank 1 received data: {tensor}")
    assert torch.equal(tensor, torch.ones(10))

dist.barrier()
dist.destroy_process_group()
