# The seed's parameter server: rank 0 holds the parameters; workers compute
# gradients and send them; the server takes them in whatever order they
# come (any-source receive), averages them, and sends fresh parameters back.
#
#   hcomm_run -n 4 -- python3 parameter_server.py
import torch
import torch.distributed as dist
import hcomm

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
world_size = dist.get_world_size()
workers = world_size - 1
target = torch.arange(8, dtype=torch.float32)  # what the parameters should become
params = torch.zeros(8)

for step in range(40):
    if rank == 0:
        total = torch.zeros(8)
        grad = torch.zeros(8)
        for _ in range(workers):
            sender = hcomm.recv(grad, src=None, tag=step)  # any worker, in arrival order
            total += grad
        params -= 0.5 * total / workers
        for w in range(1, world_size):
            hcomm.send(params, dst=w, tag=step)
    else:
        grad = params - target + 0.01 * torch.randn(8)  # a noisy gradient of |p - target|^2 / 2
        hcomm.send(grad, dst=0, tag=step)
        hcomm.recv(params, src=0, tag=step)

if rank == 0:
    err = (params - target).abs().max().item()
    print(f"Server: parameters {params.round(decimals=2).tolist()}, max error {err:.3f}")
    assert err < 0.05, params
dist.barrier()
dist.destroy_process_group()
