"""Pipeline parallelism with hcomm: a small numpy MLP split across the ranks.

    bazel run //examples/python:pipeline_parallel            # 4 ranks, 400 steps
    bazel run //examples/python:pipeline_parallel -- --steps 500 --print-every 50

Rank r holds layer r of the network (tanh hidden layers; the last rank's
layer is linear and computes the loss). Each SGD step, activations flow
forward rank 0 -> 1 -> 2 -> 3 with hcomm.send/recv, and gradients flow
backward 3 -> 2 -> 1 -> 0; every rank updates only its own weights. The task
is a synthetic regression y = sin(x . a) + 0.3 x0 x1 that ranks 0 (inputs)
and the last rank (targets) generate from the same seed, so only activations
and gradients cross the wire. The last rank prints the loss every
--print-every steps and checks that it fell.
"""

import argparse
import sys
import time

import numpy as np

import hcomm

FWD, BWD = 1, 2  # Tags: activations forward, gradients backward.


def make_data(n, d, seed=1234):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    a = rng.normal(0.0, 0.5, size=d).astype(np.float32)
    y = np.sin(x @ a) + 0.3 * x[:, 0] * x[:, 1]
    return x, y.astype(np.float32)[:, None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--print-every", type=int, default=25)
    ap.add_argument("--samples", type=int, default=2048)
    args = ap.parse_args()

    hcomm.init()
    rank, size = hcomm.get_rank(), hcomm.get_world_size()
    if size < 2:
        print("pipeline_parallel needs at least 2 ranks", file=sys.stderr)
        return 2
    first, last = rank == 0, rank == size - 1
    d_in = 8
    fan_in = d_in if first else args.hidden
    fan_out = 1 if last else args.hidden

    rng = np.random.default_rng(100 + rank)
    w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
    b = np.zeros(fan_out, np.float32)
    x_all, y_all = make_data(args.samples, d_in) if first or last else (None, None)
    batch_rng = np.random.default_rng(7)  # Same on every rank: same batches.

    h_in = np.empty((args.batch, fan_in), np.float32)     # Activations received.
    g_out = np.empty((args.batch, fan_out), np.float32)   # Gradients received.
    losses = []
    t0 = time.monotonic()
    for step in range(1, args.steps + 1):
        idx = batch_rng.integers(0, args.samples, args.batch)
        # ---- forward
        if first:
            h_in[...] = x_all[idx]
        else:
            hcomm.recv(h_in, src=rank - 1, tag=FWD)
        z = h_in @ w + b
        if last:
            diff = z - y_all[idx]
            loss = float(np.mean(diff ** 2))
            losses.append(loss)
            g_out[...] = 2.0 * diff / args.batch        # dLoss/dz
            dz = g_out
        else:
            h = np.tanh(z)
            hcomm.send(h, dst=rank + 1, tag=FWD)
            # ---- backward (gradient w.r.t. our output comes from the next rank)
            hcomm.recv(g_out, src=rank + 1, tag=BWD)
            dz = g_out * (1.0 - h * h)
        if not first:
            hcomm.send(np.ascontiguousarray(dz @ w.T), dst=rank - 1, tag=BWD)
        w -= args.lr * (h_in.T @ dz)
        b -= args.lr * dz.sum(axis=0)
        if last and (step % args.print_every == 0 or step == 1):
            print("step %4d  loss %.5f" % (step, loss), flush=True)

    hcomm.barrier()
    elapsed = time.monotonic() - t0
    if last:
        k = max(1, min(20, len(losses) // 5))
        start, end = float(np.mean(losses[:k])), float(np.mean(losses[-k:]))
        print("pipeline_parallel: %d stages, %d SGD steps in %.2f s; loss fell from %.4f "
              "to %.4f (%.1fx lower)" % (size, args.steps, elapsed, start, end, start / end),
              flush=True)
        assert end < 0.5 * start, "the loss did not fall: %.4f -> %.4f" % (start, end)
    else:
        print("stage %d: layer %dx%d trained for %d steps" % (rank, fan_in, fan_out, args.steps),
              flush=True)
    hcomm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
