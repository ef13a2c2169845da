"""A parameter server with hcomm: rank 0 serves the model, the others train it.

    bazel run //examples/python:parameter_server            # 4 ranks, 60 rounds
    bazel run //examples/python:parameter_server -- --rounds 100 --lr 0.3

The model is linear regression y = X w. Each worker (ranks 1..N-1) holds its
own shard of data generated from the same true weights w*. Every round:
rank 0 broadcasts the current w (hcomm.broadcast); each worker computes the
gradient of half the mean squared error, x^T (x w - y) / n, on its shard
and sends it to rank 0; the server receives the gradients in whatever order
they arrive (hcomm.recv(src=None) returns who sent each one), averages them
and takes an SGD step. At the end the server prints |w - w*| and checks it is small.
"""

import argparse
import sys
import time

import numpy as np

import hcomm

GRAD = 7  # Tag of gradient messages.


def true_weights(d):
    return np.random.default_rng(42).standard_normal(d)


def shard(rank, d, n):
    rng = np.random.default_rng(1000 + rank)
    x = rng.standard_normal((n, d))
    y = x @ true_weights(d) + 0.01 * rng.standard_normal(n)
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--samples", type=int, default=512, help="per worker")
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--print-every", type=int, default=10)
    args = ap.parse_args()

    hcomm.init()
    rank, size = hcomm.get_rank(), hcomm.get_world_size()
    if size < 2:
        print("parameter_server needs at least 2 ranks", file=sys.stderr)
        return 2
    w = np.zeros(args.dim)  # The model; rank 0's copy is the real one.
    grad = np.zeros(args.dim)

    if rank == 0:
        w_star = true_weights(args.dim)
        t0 = time.monotonic()
        for rnd in range(1, args.rounds + 1):
            hcomm.broadcast(w, src=0)
            total = np.zeros(args.dim)
            order = []
            for _ in range(size - 1):
                src = hcomm.recv(grad, src=None, tag=GRAD)  # Any worker, arrival order.
                order.append(src)
                total += grad
            assert sorted(order) == list(range(1, size)), order
            w -= args.lr * total / (size - 1)
            if rnd % args.print_every == 0 or rnd == 1:
                print("round %3d  |w - w*| = %.6f  (gradients arrived from ranks %s)"
                      % (rnd, np.linalg.norm(w - w_star), order), flush=True)
        hcomm.broadcast(w, src=0)  # Final model to everyone.
        err = float(np.linalg.norm(w - w_star))
        print("parameter_server: %d workers, %d rounds in %.2f s; |w - w*| = %.6f "
              "(started at %.3f)" % (size - 1, args.rounds, time.monotonic() - t0, err,
                                     np.linalg.norm(w_star)), flush=True)
        assert err < 0.02, "the model did not converge: |w - w*| = %f" % err
    else:
        x, y = shard(rank, args.dim, args.samples)
        for _ in range(args.rounds):
            hcomm.broadcast(w, src=0)
            grad[...] = x.T @ (x @ w - y) / len(y)
            hcomm.send(grad, dst=0, tag=GRAD)
        hcomm.broadcast(w, src=0)
        mse = float(np.mean((x @ w - y) ** 2))
        print("worker %d: final model's error on my %d samples: mse %.2e"
              % (rank, len(y), mse), flush=True)
    hcomm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
