"""Data-parallel training of an MLP four ways, side by side in one run.

    bazel run //tools:train_bench -- --ranks 4 --steps 30
    (one rank: hcomm_run -n 4 -- train_bench_rank --steps 30 --port P)

Every rank trains the same MLP (--layers Linear layers of --width, so
2 x layers parameter tensors) on its own batch each step, with plain SGD,
from the same initial parameters, in four ways:

  stream     hcomm: each gradient is allreduced (average) on an hcomm.Stream
             as soon as backward has produced it (a hook on each parameter's
             gradient accumulator), so communication overlaps the rest of
             backward and the stream fuses what is queued back to back;
             the optimizer steps after stream.synchronize();
  blocking   hcomm: after backward, one blocking allreduce per tensor;
  ddp_gloo   torch's DistributedDataParallel over the gloo backend;
  ddp_hcomm  the same DDP over hcomm's torch backend (hcomm.torch: a group
             of new_group(backend="hcomm"));
  compute    no communication at all (each rank its own model): the floor
             under the others, measured in the same run.

Rank 0 prints the median step time of each (the slowest rank's, --steps
after --warmup) and the largest difference between the parameters the
four reached after the same steps, and with --json one JSON object per way.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import hcomm
import hcomm.torch  # the backend "hcomm"


def make_model(width, layers):
    torch.manual_seed(0)  # the same initial parameters on every rank and in every way
    mods = []
    for _ in range(layers - 1):
        mods += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    mods.append(torch.nn.Linear(width, width))
    return torch.nn.Sequential(*mods)


def batches(rank, steps, batch, width):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g))
            for _ in range(steps)]


def slowest(times):
    """Each step's slowest rank's time (ms)."""
    t = np.array(times, np.float64)
    hcomm.all_reduce(t, op=hcomm.ReduceOp.MAX)
    return t * 1e3


def sgd(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad


def loss_of(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


class Stream:
    """Gradients allreduced on a stream as backward produces them."""

    def __init__(self, model):
        self.model, self.params = model, list(model.parameters())
        self.stream = hcomm.Stream(priority=1)
        self.accumulators = []  # kept alive: their hooks fire as each gradient is done
        for p in self.params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self.hook_for(p))
            self.accumulators.append(acc)

    def hook_for(self, p):
        def done(*_):
            hcomm.all_reduce(p.grad, op=hcomm.ReduceOp.AVG, stream=self.stream)
        return done

    def step(self, x, y, lr):
        for p in self.params:
            p.grad = None
        loss_of(self.model, x, y).backward()
        self.stream.synchronize()
        sgd(self.params, lr)

    def close(self):
        self.stream.close()


class Blocking:
    """One blocking allreduce per tensor after backward."""

    def __init__(self, model):
        self.model, self.params = model, list(model.parameters())

    def step(self, x, y, lr):
        for p in self.params:
            p.grad = None
        loss_of(self.model, x, y).backward()
        for p in self.params:
            hcomm.all_reduce(p.grad, op=hcomm.ReduceOp.AVG)
        sgd(self.params, lr)

    def close(self):
        pass


class DdpGloo(Blocking):
    """torch's DistributedDataParallel over gloo."""

    def __init__(self, model):
        super().__init__(torch.nn.parallel.DistributedDataParallel(model))

    def step(self, x, y, lr):
        for p in self.params:
            p.grad = None
        loss_of(self.model, x, y).backward()
        sgd(self.params, lr)


class DdpHcomm(DdpGloo):
    """DistributedDataParallel over hcomm's torch backend."""

    group = None  # made in main(), after torch.distributed's init

    def __init__(self, model):  # pylint: disable=super-init-not-called
        Blocking.__init__(self, torch.nn.parallel.DistributedDataParallel(
            model, process_group=DdpHcomm.group))


class Compute(DdpGloo):
    """No communication: each rank its own model (the floor)."""

    def __init__(self, model):  # pylint: disable=super-init-not-called
        self.model, self.params = model, list(model.parameters())


WAYS = (("stream", Stream), ("blocking", Blocking), ("ddp_gloo", DdpGloo), ("ddp_hcomm", DdpHcomm),
        ("compute", Compute))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--port", type=int, required=True, help="a free port for gloo's store")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(1)  # ranks share the host's CPUs
    hcomm.init()
    rank, size = hcomm.get_rank(), hcomm.get_world_size()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port, rank=rank,
                            world_size=size)
    DdpHcomm.group = dist.new_group(backend="hcomm")
    steps = args.warmup + args.steps
    data = batches(rank, steps, args.batch, args.width)
    models = {name: make_model(args.width, args.layers) for name, _ in WAYS}
    ways = {name: cls(models[name]) for name, cls in WAYS}
    # Step by step, every way in turn: a machine whose speed drifts (a VM's
    # CPUs) slows them all alike.
    times = {name: [] for name in ways}
    hcomm.barrier()
    for x, y in data:
        for name, way in ways.items():
            t0 = time.perf_counter()
            way.step(x, y, args.lr)
            times[name].append(time.perf_counter() - t0)
    for way in ways.values():
        way.close()
    results = {name: statistics.median(slowest(t)[args.warmup:]) for name, t in times.items()}
    final = {name: torch.cat([p.detach().reshape(-1) for p in m.parameters()])
             for name, m in models.items()}
    ntensors = len(list(make_model(args.width, args.layers).parameters()))
    diff = max(float((final[a] - final["ddp_gloo"]).abs().max())
               for a in ("stream", "blocking", "ddp_hcomm"))
    if rank == 0:
        for name, ms in results.items():
            row = {"op": "train_mlp", "way": name, "nranks": size, "tensors": ntensors,
                   "params": int(final[name].numel()), "step_ms": ms,
                   "speedup_vs_blocking": results["blocking"] / ms,
                   "speedup_vs_ddp_gloo": results["ddp_gloo"] / ms,
                   "max_param_diff": diff, "steps": args.steps,
                   "compute_floor_ms": results["compute"]}
            if args.json:
                print(json.dumps(row))
            else:
                print("%-9s %8.2f ms/step  (%.2fx blocking, %.2fx ddp_gloo)"
                      % (name, ms, results["blocking"] / ms, results["ddp_gloo"] / ms))
        if not args.json:
            print("%d ranks, %d parameter tensors (%d parameters), %d steps after %d warm-up; "
                  "largest parameter difference between stream, blocking, ddp_hcomm and ddp_gloo: %.2e"
                  % (size, ntensors, final["stream"].numel(), args.steps, args.warmup, diff))
    dist.destroy_process_group()
    hcomm.destroy()
    if diff > 1e-4:
        print("rank %d: the ways reached different parameters (%.2e)" % (rank, diff),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
