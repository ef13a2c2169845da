"""The communication scheduler on a small data-parallel model: hcomm's three tasks.

    bazel run //examples/python:scheduler                 # 4 ranks, 30 steps
    bazel run //examples/python:scheduler -- --steps 100

Every rank trains the same two-layer numpy network on its own shard of a
regression problem. Each step registers nothing new: the scheduler made at
the start holds three tasks, and scheduler.run() runs them once per step:

  gradient_sync (priority 10)  averages the gradients over the ranks
                               (hcomm.all_reduce on the task's stream);
  param_update  (priority 5)   the SGD step, after gradient_sync;
  logging       (priority 1)   the loss averaged over the ranks, after both.

Tasks of different priorities run on streams of their own; run() returns
{task_id: what the task returned}. At the end every rank checks that its
parameters are the same as rank 0's and that the loss went down.
"""

import argparse
import sys

import numpy as np

import hcomm


def make_shard(rank, n, d):
    rng = np.random.default_rng(100 + rank)
    x = rng.standard_normal((n, d)).astype(np.float32)
    true_w = np.random.default_rng(7).standard_normal((d, 1)).astype(np.float32)
    y = np.tanh(x @ true_w) + 0.05 * rng.standard_normal((n, 1)).astype(np.float32)
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()

    hcomm.init()
    rank, size = hcomm.get_rank(), hcomm.get_world_size()
    x, y = make_shard(rank, 256, 8)
    init = np.random.default_rng(0)  # the same start on every rank
    params = {"w1": init.standard_normal((8, args.hidden)).astype(np.float32) * 0.3,
              "w2": init.standard_normal((args.hidden, 1)).astype(np.float32) * 0.3}
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    state = {"loss": np.zeros(1, np.float32)}

    def forward_backward():
        h = np.tanh(x @ params["w1"])
        out = h @ params["w2"]
        err = out - y
        state["loss"][0] = float((err ** 2).mean())
        d_out = 2 * err / len(x)
        grads["w2"][:] = h.T @ d_out
        grads["w1"][:] = x.T @ ((d_out @ params["w2"].T) * (1 - h ** 2))

    def sync_gradients():
        for g in grads.values():
            hcomm.all_reduce(g, op=hcomm.ReduceOp.AVG)
        return sum(float(np.abs(g).sum()) for g in grads.values())

    def update_parameters():
        for k in params:
            params[k] -= args.lr * grads[k]
        return "updated"

    def log_step():
        hcomm.all_reduce(state["loss"], op=hcomm.ReduceOp.AVG)
        return float(state["loss"][0])

    scheduler = hcomm.CommunicationScheduler()
    scheduler.register_task(task_id="gradient_sync", func=sync_gradients, priority=10)
    scheduler.register_task(task_id="param_update", func=update_parameters, priority=5,
                            depends_on=["gradient_sync"])
    scheduler.register_task(task_id="logging", func=log_step, priority=1,
                            depends_on=["gradient_sync", "param_update"])

    losses = []
    for step in range(args.steps):
        forward_backward()
        results = scheduler.run()
        losses.append(results["logging"])
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print("step %3d  loss %.4f  |grad| %.3f" % (step, results["logging"],
                                                       results["gradient_sync"]), flush=True)
    scheduler.close()

    # Every rank holds rank 0's parameters; the loss went down.
    for k, v in params.items():
        ref = v.copy()
        hcomm.broadcast(ref, src=0)
        if not np.array_equal(ref, v):
            print("rank %d: %s differs from rank 0's" % (rank, k), file=sys.stderr)
            return 1
    if not losses[-1] < losses[0]:
        print("rank %d: the loss did not go down: %.4f -> %.4f" % (rank, losses[0], losses[-1]),
              file=sys.stderr)
        return 1
    if rank == 0:
        print("ok: %d ranks, loss %.4f -> %.4f, parameters equal on every rank"
              % (size, losses[0], losses[-1]))
    hcomm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
