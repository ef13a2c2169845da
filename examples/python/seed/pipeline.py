# The seed's pipeline parallelism: each rank holds one stage of a model;
# activations go forward with hcomm.send/recv, gradients come back the same
# way, and every stage updates its own weights. The last stage prints the
# loss, which falls.
#
#   hcomm_run -n 4 -- python3 pipeline.py
import torch
import torch.distributed as dist
import hcomm

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
world_size = dist.get_world_size()

torch.manual_seed(rank)
batch, width = 32, 16
stage = torch.nn.Linear(width, width if rank < world_size - 1 else 1)
optimizer = torch.optim.SGD(stage.parameters(), lr=0.05)
data = torch.Generator().manual_seed(0)  # the same stream on the first and last stage
losses = []

for step in range(60):
    x = torch.randn(batch, width, generator=data)
    y = x.sum(dim=1, keepdim=True).sin()
    optimizer.zero_grad()
    if rank == 0:
        inp = x
    else:
        inp = torch.zeros(batch, width)
        hcomm.recv(inp, src=rank - 1, tag=0)
        inp.requires_grad_()
    out = stage(inp)
    if rank < world_size - 1:
        out = torch.tanh(out)
        hcomm.send(out.detach(), dst=rank + 1, tag=0)
        grad = torch.zeros_like(out)
        hcomm.recv(grad, src=rank + 1, tag=1)
        out.backward(grad)
    else:
        loss = torch.nn.functional.mse_loss(out, y)
        loss.backward()
        losses.append(loss.item())
    if rank > 0:
        hcomm.send(inp.grad, dst=rank - 1, tag=1)
    optimizer.step()

if rank == world_size - 1:
    print(f"Rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    assert losses[-1] < losses[0], losses
dist.barrier()
dist.destroy_process_group()
