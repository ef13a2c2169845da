# The seed's asynchronous point-to-point example: isend/irecv return at
# once, the rank computes meanwhile, then waits. torch.distributed runs on
# hcomm itself here (import hcomm.torch registers the backend "hcomm").
#
#   hcomm_run -n 2 -- python3 p2p_async.py
import torch
import torch.distributed as dist
import hcomm
import hcomm.torch

dist.init_process_group(backend="hcomm")
rank = dist.get_rank()

tensor = torch.zeros(1024)
if rank == 0:
    tensor += 2
    req = hcomm.isend(tensor, dst=1, tag=1)
    busy = torch.randn(256, 256) @ torch.randn(256, 256)  # compute while it moves
    req.wait()
    print(f"Rank 0 finished sending (computed {busy.shape} meanwhile)")
else:
    req = hcomm.irecv(tensor, src=0, tag=1)
    busy = torch.randn(256, 256) @ torch.randn(256, 256)
    req.wait()
    print(f"Rank 1 received: sum = {tensor.sum().item()}")
    assert tensor.sum().item() == 2 * 1024

dist.destroy_process_group()
