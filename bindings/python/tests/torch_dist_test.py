"""hcomm with torch.distributed, 4 ranks through hcomm_run.

- beside gloo: dist.init_process_group("gloo") and then hcomm's calls
  without hcomm.init(): hcomm joins through torch's store (torch's store
  holds MASTER_PORT); torch groups as `group=`; torch's rank rules; the
  RuntimeError a seed script catches.
- the "hcomm" backend (import hcomm.torch): torch.distributed's calls on it,
  groups of new_group(backend="hcomm"), and DistributedDataParallel over
  hcomm ending with the same parameters as the same model over gloo.
- the rest of torch.distributed's surface in hcomm: list forms, split sizes,
  object collectives, batch_isend_irecv, monitored_barrier, get_future.

Skipped, with the message "skipped: python3-torch not installed", when
torch cannot be imported.
"""

import datetime
import os
import subprocess
import sys
import time
import unittest

import numpy as np

try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None

import hcomm

SKIP_MESSAGE = "skipped: python3-torch not installed"
N = 4


def ok(what):
    print("ok: %s" % what, flush=True)


# ---- rank side -----------------------------------------------------------

def beside_gloo():
    dist.init_process_group(backend="gloo")
    R = dist.get_rank()
    # The first hcomm call joins through torch's store, with torch's ranks.
    t = np.full(3, R + 1.0)
    hcomm.all_reduce(t, op=hcomm.ReduceOp.SUM)
    assert t.tolist() == [10.0] * 3, t
    assert hcomm.get_rank() == R and hcomm.get_world_size() == N
    ok("joined through torch's store")

    # torch groups; dst/src/root are ranks of the job (torch's rule).
    even = dist.new_group([0, 2])
    odd = dist.new_group([1, 3])
    mine = even if R % 2 == 0 else odd
    other = odd if R % 2 == 0 else even
    t = torch.full((2,), float(R))
    hcomm.all_reduce(t, group=mine)
    assert t.tolist() == ([2.0, 2.0] if R % 2 == 0 else [4.0, 4.0]), t
    assert hcomm.get_rank(group=mine) == R // 2
    if R == 0:
        hcomm.send(torch.tensor([42.0]), dst=2, group=even)
    elif R == 2:
        b = torch.zeros(1)
        assert hcomm.recv(b, src=None, group=even) == 0 and b.item() == 42.0
    b = torch.tensor([float(R)])
    hcomm.broadcast(b, src=3 if R % 2 else 2, group=mine)
    assert b.item() == (3.0 if R % 2 else 2.0), b
    try:
        hcomm.all_reduce(np.ones(1), group=other)
        raise AssertionError("a non-member's torch group was accepted")
    except hcomm.InvalidArgumentError as e:
        assert "not a member of the group" in str(e), e
    ok("torch groups with job ranks")

    # Groups made after the join are seen as well.
    late = dist.new_group([1, 2, 3])
    if R != 0:
        t = np.ones(1)
        hcomm.all_reduce(t, group=late)
        assert t[0] == 3.0, t
    ok("a torch group made after the join")

    # The seed's FAQ: a receive nobody sends ends in RuntimeError naming the
    # peer and tag.
    hcomm.get_default_group().set_timeout(300)
    if R == 1:
        try:
            hcomm.recv(np.zeros(1), src=0, tag=77)
            raise AssertionError("no timeout")
        except RuntimeError as e:
            s = str(e)
            assert s.startswith("hcomm operation timeout: ") and "rank 0" in s and "tag 77" in s, s
            assert isinstance(e, hcomm.TimeoutError)
    hcomm.get_default_group().set_timeout(30000)
    hcomm.barrier()
    ok("RuntimeError: hcomm operation timeout")
    hcomm.destroy()
    dist.destroy_process_group()


def surface():
    hcomm.init()
    R = hcomm.get_rank()
    assert hcomm.get_backend() == "hcomm"
    # List forms.
    outs = [torch.zeros(2) for _ in range(N)]
    hcomm.all_gather(outs, torch.full((2,), float(R)))
    assert [o[0].item() for o in outs] == [0.0, 1.0, 2.0, 3.0], outs
    out = torch.zeros(2)
    hcomm.reduce_scatter(out, [torch.full((2,), float(i)) for i in range(N)])
    assert out.tolist() == [4.0 * R] * 2, out
    # Uneven all_to_all of lists, then all_to_all_single with split sizes:
    # rank r sends j+1 rows to rank j, each row holding r*10+j.
    ins = [torch.full((j + 1, 2), R * 10.0 + j) for j in range(N)]
    outs = [torch.zeros(R + 1, 2) for _ in range(N)]
    hcomm.all_to_all(outs, ins)
    assert all(o.eq(i * 10.0 + R).all() for i, o in enumerate(outs)), outs
    inp = torch.cat(ins)
    out = torch.zeros(N * (R + 1), 2)
    hcomm.all_to_all_single(out, inp, output_split_sizes=[R + 1] * N,
                            input_split_sizes=[j + 1 for j in range(N)])
    assert torch.equal(out, torch.cat(outs)), out
    try:  # sizes the senders do not send
        hcomm.all_to_all_single(torch.zeros(N * (R + 2), 2), inp, output_split_sizes=[R + 2] * N,
                                input_split_sizes=[j + 1 for j in range(N)])
        raise AssertionError("mismatched split sizes were accepted")
    except hcomm.MismatchError as e:
        assert "sent" in str(e) and "were expected" in str(e), e
    gathered = [torch.zeros(1) for _ in range(N)] if R == 1 else None
    hcomm.gather(torch.tensor([R * 2.0]), gathered, dst=1)
    if R == 1:
        assert [g.item() for g in gathered] == [0.0, 2.0, 4.0, 6.0], gathered
    got = torch.zeros(1)
    hcomm.scatter(got, [torch.tensor([i + 0.5]) for i in range(N)] if R == 2 else None, src=2)
    assert got.item() == R + 0.5, got
    ok("list forms and split sizes")

    objs = [None] * N
    hcomm.all_gather_object(objs, {"rank": R, "name": "r%d" % R})
    assert objs == [{"rank": i, "name": "r%d" % i} for i in range(N)], objs
    lst = [("config", 3), None] if R == 3 else [None, None]
    hcomm.broadcast_object_list(lst, src=3)
    assert lst == [("config", 3), None], lst
    ok("object collectives")

    ops = [hcomm.P2POp(hcomm.isend, torch.tensor([float(R)]), (R + 1) % N),
           hcomm.P2POp(hcomm.irecv, torch.zeros(1), (R - 1) % N)]
    reqs = hcomm.batch_isend_irecv(ops)
    for r in reqs:
        r.wait()
    assert ops[1].tensor.item() == (R - 1) % N and reqs[1].source == (R - 1) % N
    ok("batch_isend_irecv")

    work = hcomm.all_reduce(torch.ones(4), async_op=True)
    fut = work.get_future()
    fut.wait()
    assert fut.done()
    ok("Work.get_future")

    hcomm.monitored_barrier(timeout=datetime.timedelta(seconds=10))
    if R == 1:
        time.sleep(2.0)
    try:
        hcomm.monitored_barrier(timeout=datetime.timedelta(seconds=1))
        raise AssertionError("rank 1 came late, yet the barrier passed")
    except hcomm.TimeoutError as e:
        s = str(e)
        assert ("rank 1 did not arrive" in s) if R != 1 else ("did not answer" in s), s
    hcomm.barrier()  # rank 1 too, after its own timeout
    ok("monitored_barrier names the late rank")
    hcomm.destroy()


def hcomm_backend():
    import hcomm.torch  # noqa: F401  registers "hcomm"
    dist.init_process_group(backend="hcomm")
    R = dist.get_rank()
    assert dist.get_backend() == "hcomm", dist.get_backend()
    t = torch.full((3,), float(R + 1))
    dist.all_reduce(t)
    assert t.tolist() == [10.0] * 3, t
    w = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    w.wait()
    assert t.tolist() == [10.0] * 3, t
    b = torch.arange(4.0) if R == 2 else torch.zeros(4)
    dist.broadcast(b, src=2)
    assert b.tolist() == [0.0, 1.0, 2.0, 3.0], b
    r = torch.tensor([float(R)])
    dist.reduce(r, dst=1, op=dist.ReduceOp.SUM)
    if R == 1:
        assert r.item() == 6.0, r
    outs = [torch.zeros(2) for _ in range(N)]
    dist.all_gather(outs, torch.full((2,), float(R)))
    assert [o[0].item() for o in outs] == [0.0, 1.0, 2.0, 3.0], outs
    flat = torch.zeros(2 * N)
    dist._all_gather_base(flat, torch.full((2,), float(R)))
    assert flat.tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0], flat
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.full((2,), float(i)) for i in range(N)])
    assert out.tolist() == [4.0 * R] * 2, out
    ins = [torch.full((j + 1,), R * 10.0 + j) for j in range(N)]
    out = torch.zeros(N * (R + 1))
    dist.all_to_all_single(out, torch.cat(ins), output_split_sizes=[R + 1] * N,
                           input_split_sizes=[j + 1 for j in range(N)])
    assert out.tolist() == sum([[i * 10.0 + R] * (R + 1) for i in range(N)], []), out
    dist.barrier()
    ok("torch.distributed collectives on hcomm")

    if R == 0:
        dist.send(torch.tensor([7.0]), dst=3, tag=5)
    elif R == 3:
        x = torch.zeros(1)
        assert dist.recv(x, src=None, tag=5) == 0 and x.item() == 7.0, x
    w = dist.isend(torch.tensor([float(R)]), dst=(R + 1) % N)
    x = torch.zeros(1)
    dist.irecv(x, src=(R - 1) % N).wait()
    w.wait()
    assert x.item() == (R - 1) % N, x
    ok("torch.distributed send, recv and any source on hcomm")

    g = dist.new_group([1, 2, 3], backend="hcomm")
    if R != 0:
        t = torch.ones(2)
        dist.all_reduce(t, group=g)
        assert t.tolist() == [3.0, 3.0], t
        b = torch.tensor([float(R)])
        dist.broadcast(b, src=3, group=g)  # the job's rank 3
        assert b.item() == 3.0, b
        # hcomm's own calls take the torch group too.
        t = np.ones(1)
        hcomm.all_reduce(t, group=g)
        assert t[0] == 3.0, t
    ok("new_group(backend='hcomm')")

    # DDP over hcomm against the same model over gloo: the same parameters.
    gloo = dist.new_group(backend="gloo")
    results = []
    for pg in (None, gloo):
        torch.manual_seed(0)
        layers = []
        for _ in range(20):
            layers += [torch.nn.Linear(8, 8), torch.nn.Tanh()]
        model = torch.nn.Sequential(*layers)
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + R)
        for _ in range(8):
            x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 8, generator=gen)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
        results.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    assert len(list(model.parameters())) == 40
    diff = (results[0] - results[1]).abs().max().item()
    assert diff < 1e-6, diff
    ok("DDP over hcomm equals DDP over gloo (max difference %.1e)" % diff)
    dist.destroy_process_group()


# ---- driver side (the Bazel test) -----------------------------------------

def _runfile(rel):
    for d in (os.environ.get("RUNFILES_DIR"), os.environ.get("TEST_SRCDIR")):
        if d and os.path.exists(os.path.join(d, "hcomm", rel)):
            return os.path.join(d, "hcomm", rel)
    raise unittest.SkipTest("%s not in the runfiles" % rel)


def _child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(hcomm.__file__)))
    for k in ("HCOMM_RANK", "HCOMM_WORLD_SIZE", "HCOMM_STORE_ADDR", "HCOMM_JOB_TOKEN",
              "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _run(mode):
    p = subprocess.run(
        [_runfile("tools/hcomm_run"), "-n", str(N), "--timeout", "80", "--", sys.executable,
         os.path.abspath(__file__), mode],
        env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=100,
        text=True)
    print(p.stdout)
    return p.returncode, p.stdout


@unittest.skipIf(torch is None, SKIP_MESSAGE)
class TorchDistributed(unittest.TestCase):
    def check(self, mode, lines):
        rc, out = _run(mode)
        for r in range(N):
            for line in lines:
                self.assertIn("[rank %d] ok: %s" % (r, line), out)
        self.assertEqual(rc, 0, out)

    def test_beside_gloo(self):
        self.check("--beside-gloo", ["joined through torch's store", "torch groups with job ranks",
                                     "a torch group made after the join",
                                     "RuntimeError: hcomm operation timeout"])

    def test_surface(self):
        self.check("--surface", ["list forms and split sizes", "object collectives",
                                 "batch_isend_irecv", "Work.get_future",
                                 "monitored_barrier names the late rank"])

    def test_hcomm_backend(self):
        self.check("--hcomm-backend", ["torch.distributed collectives on hcomm",
                                       "torch.distributed send, recv and any source on hcomm",
                                       "new_group(backend='hcomm')",
                                       "DDP over hcomm equals DDP over gloo"])


if __name__ == "__main__":
    modes = {"--beside-gloo": beside_gloo, "--surface": surface, "--hcomm-backend": hcomm_backend}
    mode = next((m for m in modes if m in sys.argv), None)
    if mode is not None:
        modes[mode]()
    else:
        if torch is None:
            print(SKIP_MESSAGE, file=sys.stderr, flush=True)
        unittest.main()
