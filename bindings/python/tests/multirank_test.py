"""Multi-process tests of the Python binding: 4 ranks started by hcomm_run.

Run by Bazel, this file is the driver (unittest): it starts itself as 4
ranks (`hcomm_run -n 4 -- python3 multirank_test.py --worker`), each of
which runs every check in CHECKS in order and prints "ok: NAME"; there is
one test method per check. Five further runs start their ranks by hand
(HCOMM_RANK/HCOMM_WORLD_SIZE/HCOMM_STORE_ADDR/HCOMM_JOB_TOKEN): a peer that
exits mid-job (PeerFailureError), a rank with the wrong job token
(PermissionDeniedError), a communicator destroyed while a thread is
blocked in its barrier, HCOMM_CHECK_COLLECTIVES set on rank 0 only, and
set_compression over TCP (where FP16/BF16 apply).
"""

import builtins
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

import hcomm

N = 4
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


# ---- worker side (one rank) ----------------------------------------------

R = None  # This rank.


@check
def send_recv():
    peer = R ^ 1  # Pairs (0,1), (2,3).
    a = np.full(16, R, np.int64)
    b = np.zeros(16, np.int64)
    if R % 2 == 0:
        hcomm.send(a, dst=peer, tag=1)
        src = hcomm.recv(b, src=peer, tag=1)
    else:
        src = hcomm.recv(b, src=peer, tag=1)
        hcomm.send(a, dst=peer, tag=1)
    assert src == peer, src
    assert (b == peer).all(), b


@check
def transports():
    names = [hcomm.get_default_group().transport(p) for p in range(N)]
    assert names[R] == "self", names
    assert all(names[p] in ("shm", "tcp") for p in range(N) if p != R), names


@check
def isend_irecv():
    reqs, bufs = [], {}
    for p in range(N):
        if p != R:
            bufs[p] = np.zeros(1000, np.float32)
            reqs.append(hcomm.irecv(bufs[p], src=p, tag=2))
    sends = [hcomm.isend(np.full(1000, R + 0.5, np.float32), dst=p, tag=2)
             for p in range(N) if p != R]
    for r in sends:
        assert r.wait() is True
    hcomm.wait_all(reqs)
    for r in reqs:
        assert r.is_completed()
        assert r.count == 1000 and r.tag == 2
        assert (bufs[r.source] == r.source + 0.5).all()


@check
def any_source():
    if R == 0:
        seen = set()
        for _ in range(N - 1):
            b = np.zeros(4, np.int32)
            src = hcomm.recv(b, src=None, tag=3)
            assert (b == src * 10).all(), (src, b)
            seen.add(src)
        assert seen == {1, 2, 3}, seen
        b = bytearray(8)  # Any tag too.
        r = hcomm.irecv(b, src=None, tag=None)
        r.wait()
        assert r.source == 2 and r.tag == 33 and bytes(b[:5]) == b"hello", (r.source, r.tag)
    else:
        hcomm.send(np.full(4, R * 10, np.int32), dst=0, tag=3)
        if R == 2:
            hcomm.send(b"hello", dst=0, tag=33)


@check
def all_reduce_every_op():
    expect = {
        hcomm.ReduceOp.SUM: 10, hcomm.ReduceOp.PROD: 24, hcomm.ReduceOp.MIN: 1,
        hcomm.ReduceOp.MAX: 4, hcomm.ReduceOp.AVG: 2.5,
    }
    for op, want in expect.items():
        for dtype in (np.float64, np.float32, np.float16):
            t = np.full(37, R + 1, dtype)
            hcomm.all_reduce(t, op=op)
            assert (t == want).all(), (op, dtype, t[:3])
        t = np.full(5, R + 1, np.int32)
        hcomm.all_reduce(t, op=op)
        assert (t == int(want)).all(), (op, t)  # AVG of ints truncates: 2.
    big = np.arange(300000, dtype=np.float32) * (R + 1)  # Large: ring/tree paths.
    hcomm.all_reduce(big)
    assert np.allclose(big, np.arange(300000, dtype=np.float32) * 10)
    a = np.full(3, R, np.int64)
    req = hcomm.all_reduce(a, op=hcomm.ReduceOp.MAX, async_op=True)
    req.wait()
    assert (a == N - 1).all()


@check
def broadcast():
    t = np.arange(10, dtype=np.float64) if R == 2 else np.zeros(10)
    hcomm.broadcast(t, src=2)
    assert (t == np.arange(10)).all(), t


@check
def reduce():
    t = np.full(6, R + 1, np.int64)
    hcomm.reduce(t, dst=1, op=hcomm.ReduceOp.SUM)
    assert (t == (10 if R == 1 else R + 1)).all(), t


@check
def all_gather():
    t = np.array([R, R * 2, R * 3], np.int32)
    out = np.zeros(3 * N, np.int32)
    hcomm.all_gather(out, t)
    assert out.tolist() == [v for r in range(N) for v in (r, r * 2, r * 3)], out
    inplace = np.zeros(2 * N)
    inplace[2 * R:2 * R + 2] = R + 0.25
    hcomm.all_gather(inplace, inplace[2 * R:2 * R + 2])
    assert inplace.tolist() == [r + 0.25 for r in range(N) for _ in range(2)], inplace


@check
def reduce_scatter():
    inp = np.arange(2 * N, dtype=np.float32) + R  # Block r: [2r + R, 2r + 1 + R].
    out = np.zeros(2, np.float32)
    hcomm.reduce_scatter(out, inp, op=hcomm.ReduceOp.SUM)
    assert out.tolist() == [4 * 2 * R + 6, 4 * (2 * R + 1) + 6], out


@check
def all_to_all():
    inp = np.array([R * 100 + j for j in range(N)], np.int64)
    out = np.zeros(N, np.int64)
    hcomm.all_to_all(out, inp)
    assert out.tolist() == [i * 100 + R for i in range(N)], out


@check
def gather_scatter():
    out = np.zeros(N, np.int32) if R == 3 else None
    hcomm.gather(np.array([R + 7], np.int32), out, dst=3)
    if R == 3:
        assert out.tolist() == [7, 8, 9, 10], out
    piece = np.zeros(2, np.float64)
    inp = np.arange(2 * N, dtype=np.float64) if R == 0 else None
    hcomm.scatter(piece, inp, src=0)
    assert piece.tolist() == [2 * R, 2 * R + 1], piece


@check
def barrier():
    for _ in range(3):
        hcomm.barrier()


@check
def new_group():
    g = hcomm.new_group(ranks=[0, 2])
    if R in (1, 3):
        # Not None (which would mean the whole job): a sentinel that raises.
        assert g is hcomm.GroupMember.NON_GROUP_MEMBER, g
        for use in (lambda: hcomm.all_reduce(np.ones(1), group=g),
                    lambda: hcomm.get_rank(group=g)):
            try:
                use()
                raise AssertionError("a non-member's group was accepted")
            except hcomm.InvalidArgumentError as e:
                assert "not a member of the group" in str(e), e
    else:
        assert hcomm.get_world_size(group=g) == 2
        assert hcomm.get_rank(group=g) == R // 2
        t = np.array([R + 1.0])
        hcomm.all_reduce(t, op=hcomm.ReduceOp.SUM, group=g)
        assert t[0] == 4.0, t
        b = np.zeros(1)
        # dst, src and root are ranks of the job whatever the group
        # (torch.distributed's rule); recv tells the sender's job rank.
        if R == 0:
            hcomm.send(np.array([42.0]), dst=2, group=g)
            try:
                hcomm.send(np.array([1.0]), dst=1, group=g)
                raise AssertionError("a send to a non-member was accepted")
            except hcomm.InvalidArgumentError as e:
                assert "dst 1" in str(e) and "job ranks [0, 2]" in str(e), e
        else:
            assert hcomm.recv(b, src=None, group=g) == 0
            assert b[0] == 42.0
            r = hcomm.irecv(b, src=0, group=g)
            r.wait()
            assert r.source == 0, r.source
        if R == 0:
            hcomm.isend(np.array([7.0]), dst=2, group=g).wait()
        t = np.array([float(R)])
        hcomm.broadcast(t, src=2, group=g)
        assert t[0] == 2.0, t
        hcomm.barrier(group=g)
        g.destroy()
    odd_even = hcomm.split(R % 2, key=-R)  # Ordered by key: descending world rank.
    assert odd_even.size == 2 and odd_even.rank == (0 if R >= 2 else 1), odd_even
    assert odd_even.job_ranks == ([2, 0] if R % 2 == 0 else [3, 1]), odd_even.job_ranks
    t = np.array([float(R)])
    hcomm.broadcast(t, src=R % 2, group=odd_even)  # the job's rank 0 or 1: group rank 1
    assert t[0] == R % 2, t
    t = np.array([R], np.int32)
    hcomm.all_reduce(t, group=odd_even)
    assert t[0] == (2 if R % 2 == 0 else 4), t
    odd_even.destroy()
    hcomm.barrier()


@check
def group_abort():
    """Rank 3 aborts a group of every rank while one of its threads waits in
    the group's all_reduce: that call raises AbortedError; the others' calls
    on the group raise PeerFailureError at once; the world goes on."""
    g = hcomm.new_group(ranks=list(range(N)))
    hcomm.barrier()  # Every rank's new_group has returned.
    t = np.ones(4, np.float32)
    if R == 3:
        got = {}

        def reduce():
            try:
                g.all_reduce(t)
            except hcomm.HcommError as e:
                got["e"] = e

        th = threading.Thread(target=reduce)
        th.start()
        time.sleep(0.2)
        g.abort()
        th.join(10)
        assert not th.is_alive(), "all_reduce still waits after abort()"
        assert isinstance(got.get("e"), hcomm.AbortedError), got
        for p in range(N - 1):
            hcomm.send(np.zeros(1), dst=p, tag=77)
    else:
        hcomm.recv(np.zeros(1), src=3, tag=77)  # Sent after the abort.
        t0 = time.monotonic()
        try:
            g.all_reduce(t)
            raise AssertionError("all_reduce on the aborted group did not raise")
        except hcomm.PeerFailureError as e:
            assert "aborted the communicator" in str(e), e
        assert time.monotonic() - t0 < 10
    g.destroy()
    w = np.array([1], np.int32)
    hcomm.all_reduce(w)
    assert w[0] == N, w


@check
def refused_on_one_rank():
    """Rank 2 alone passes a read-only array to all_reduce: it raises
    InvalidArgumentError, the others' call raises MismatchError naming rank
    2, and the calls after it still pair up (the refusal took its turn in
    the library too)."""
    t = np.array([R + 1], np.int32)
    if R == 2:
        t.flags.writeable = False
    try:
        hcomm.all_reduce(t)
        raise AssertionError("all_reduce did not raise")
    except hcomm.InvalidArgumentError as e:
        assert R == 2 and "read-only" in str(e), (R, e)
    except hcomm.MismatchError as e:
        assert R != 2 and "rank 2 rejected its call" in str(e), (R, e)
    for k in range(3):
        w = np.array([100 * k + R], np.int32)
        hcomm.all_reduce(w)
        assert w[0] == 100 * k * N + N * (N - 1) // 2, (k, w)
    # So does a call that raises on its way to the library: an argument the
    # method does not take (TypeError), a released memoryview (refused).
    odd = {1: "kwarg", N - 1: "released"}.get(R)
    t = np.array([R + 1], np.int32)
    try:
        if odd == "kwarg":
            hcomm.get_default_group().all_reduce(t, opp=hcomm.ReduceOp.MAX)
        elif odd == "released":
            mv = memoryview(t)
            mv.release()
            hcomm.all_reduce(mv)
        else:
            hcomm.all_reduce(t)
        raise AssertionError("all_reduce did not raise")
    except TypeError as e:
        assert odd == "kwarg" and "opp" in str(e), (R, e)
    except hcomm.InvalidArgumentError as e:
        assert odd == "released" and "released" in str(e), (R, e)
    except hcomm.MismatchError as e:
        # Rank 1 or rank N-1, whichever's word came first.
        assert odd is None and "rejected its call" in str(e), (R, e)
    for k in range(3):
        w = np.array([100 * k + R], np.int32)
        hcomm.all_reduce(w)
        assert w[0] == 100 * k * N + N * (N - 1) // 2, (k, w)


@check
def async_collectives():
    """Every collective takes async_op=True and returns at once; they run in
    the order called on every rank; a collective called without it while
    some are pending waits its turn; a refusal of one rank's async call
    (here: a read-only array) also waits its turn; destroy() lets pending
    ones finish."""
    if R == 3:
        time.sleep(0.3)  # The others' queues wait for rank 3 meanwhile.
    b = np.arange(8, dtype=np.float64) if R == 1 else np.zeros(8)
    r = np.full(4, R + 1, np.int64)
    g = np.zeros(2 * N, np.int32)
    rs = np.zeros(2, np.float32)
    a2a = np.zeros(N, np.int64)
    ga = np.zeros(N, np.int32) if R == 0 else None
    sc = np.zeros(3, np.uint8)
    works = [
        hcomm.broadcast(b, src=1, async_op=True),
        hcomm.reduce(r, dst=2, async_op=True),
        hcomm.all_gather(g, np.full(2, R, np.int32), async_op=True),
        hcomm.reduce_scatter(rs, np.full(2 * N, R + 1, np.float32), async_op=True),
        hcomm.all_to_all(a2a, np.arange(N, dtype=np.int64) + 10 * R, async_op=True),
        hcomm.gather(np.array([R], np.int32), out=ga, dst=0, async_op=True),
        hcomm.scatter(sc, np.arange(3 * N, dtype=np.uint8) if R == 3 else None, src=3,
                      async_op=True),
        hcomm.barrier(async_op=True),
    ]
    m = np.full(3, R, np.int64)
    works.append(hcomm.all_reduce(m, op=hcomm.ReduceOp.MAX, async_op=True))
    if R != 3:  # Still waiting for rank 3: queued behind the others.
        assert all(isinstance(w, hcomm.Work) for w in works), works
        assert not works[7].is_completed()  # the barrier needs rank 3
    s = np.full(2, R + 1, np.float32)
    hcomm.all_reduce(s)  # Waits for the async ones, then runs.
    assert (s == 10).all(), s
    assert all(w.is_completed() for w in works), works
    hcomm.wait_all(works)
    assert all(w.wait() for w in works)
    assert (b == np.arange(8)).all(), b
    assert (r == (10 if R == 2 else R + 1)).all(), r
    assert (g == np.repeat(np.arange(N), 2)).all(), g
    assert (rs == 10).all(), rs
    assert (a2a == np.arange(N) * 10 + R).all(), a2a
    assert R != 0 or (ga == np.arange(N)).all(), ga
    assert (sc == np.arange(3 * R, 3 * R + 3)).all(), sc
    assert (m == N - 1).all(), m
    # Nothing pending: all_reduce's async form is a Request over iallreduce.
    q = hcomm.all_reduce(np.ones(2, np.int32), async_op=True)
    assert isinstance(q, hcomm.Request) and q.wait(), q
    # Rank 0 refuses its call (read-only) while its queue is busy: the
    # refusal takes its turn after the queued ones, as the call would have.
    if R == 3:
        time.sleep(0.3)
    first = hcomm.barrier(async_op=True)
    t = np.array([R + 1], np.int32)
    if R == 0:
        t.flags.writeable = False
        try:
            hcomm.all_reduce(t, async_op=True)
            raise AssertionError("a read-only all_reduce did not raise")
        except hcomm.InvalidArgumentError as e:
            assert "read-only" in str(e), e
    else:
        w = hcomm.all_reduce(t, async_op=True)
        try:
            w.wait()
            raise AssertionError("all_reduce with rank 0 refusing did not raise")
        except hcomm.MismatchError as e:
            assert "rank 0 rejected its call" in str(e), e
    assert first.wait()
    # A group destroyed with an async collective pending runs it first.
    grp = hcomm.new_group(list(range(N)))
    if R == 3:
        time.sleep(0.3)
    x = np.full(4, R + 1, np.float64)
    w = grp.all_gather(np.zeros(4 * N), x, async_op=True)
    y = np.full(4, R + 1, np.float64)
    v = grp.broadcast(y, src=0, async_op=True)
    grp.destroy()
    assert w.is_completed() and v.is_completed() and v.wait(), (w, v)
    assert (y == 1).all(), y
    try:
        grp.barrier(async_op=True)
        raise AssertionError("barrier on a destroyed group did not raise")
    except hcomm.InvalidArgumentError:
        pass
    t = np.array([R], np.int32)
    hcomm.all_reduce(t)
    assert t[0] == N * (N - 1) // 2, t


@check
def stream_seed_usage():
    """The seed's stream snippet as written: leaving the block synchronizes."""
    t = np.full(1000, R + 1, np.float32)
    with hcomm.Stream() as s:
        work = hcomm.all_reduce(t, stream=s)
        assert isinstance(work, hcomm.Work)
    assert work.is_completed()
    work.wait()
    assert (t == N * (N + 1) / 2).all(), t[:4]
    assert s.closed
    try:
        hcomm.all_reduce(t, stream=s)
        raise AssertionError("a closed stream took an operation")
    except hcomm.InvalidArgumentError as e:
        assert "closed" in str(e), e


@check
def streams_every_kind_and_priorities():
    hi, lo = hcomm.Stream(priority=10), hcomm.Stream(priority=0)
    try:
        a = np.arange(8, dtype=np.int64) * (R + 1)
        b = np.full(4, R if R == 1 else -1, np.int32)
        g = np.zeros(N * 3, np.float64)
        rs_in = np.arange(N * 2, dtype=np.int32) + R
        rs = np.zeros(2, np.int32)
        a2a_in = np.arange(N, dtype=np.int32) + 100 * R
        a2a = np.zeros(N, np.int32)
        works = [hcomm.all_reduce(a, op=hcomm.ReduceOp.SUM, stream=hi),
                 hcomm.broadcast(b, src=1, stream=lo),
                 hcomm.all_gather(g, np.full(3, R, np.float64), stream=lo),
                 hcomm.reduce_scatter(rs, rs_in, stream=hi),
                 hcomm.all_to_all(a2a, a2a_in, stream=lo),
                 hcomm.barrier(stream=hi)]
        peer_out, peer_in = (R + 1) % N, (R + N - 1) % N
        got = np.zeros(1, np.int32)
        works.append(hcomm.send(np.array([R], np.int32), dst=peer_out, tag=4, stream=lo))
        works.append(hcomm.recv(got, src=peer_in, tag=4, stream=lo))
        for w in works:
            w.wait()
        assert (a == np.arange(8) * N * (N + 1) // 2).all(), a
        assert (b == 1).all(), b
        assert (g == np.repeat(np.arange(N), 3)).all(), g
        want_rs = [sum(2 * R + j + r for r in range(N)) for j in range(2)]
        assert list(rs) == want_rs, (rs, want_rs)
        assert list(a2a) == [100 * r + R for r in range(N)], a2a
        assert got[0] == peer_in, got
        hi.synchronize()
        lo.synchronize()
        assert hi.query() and lo.query()
    finally:
        hi.close()
        lo.close()


@check
def stream_events_and_contexts():
    a, b = hcomm.Stream(), hcomm.Stream()
    try:
        x = np.ones(1 << 16, np.float32)
        y = np.zeros_like(x)
        hcomm.all_reduce(x, stream=a)
        e = hcomm.Event()
        e.record(a)
        b.wait_event(e)
        b.all_gather(np.zeros(N * x.size, np.float32), x)  # reads x after a's allreduce
        y[:] = 0
        e2 = hcomm.Event()
        hcomm.all_reduce(x, stream=b)
        e2.record(b)
        e2.synchronize()
        assert e.query() and e2.query()
        assert (x == N * N).all(), x[:4]
        # A stream's recv never takes a blocking send of the same peer and tag.
        if R == 0:
            on_stream = np.zeros(1, np.int32)
            blocking = np.zeros(1, np.int32)
            w = hcomm.recv(on_stream, src=1, tag=7, stream=a)
            hcomm.recv(blocking, src=1, tag=7)
            w.wait()
            assert blocking[0] == 100 and on_stream[0] == 200, (blocking, on_stream)
        elif R == 1:
            hcomm.send(np.array([100], np.int32), dst=0, tag=7)
            hcomm.send(np.array([200], np.int32), dst=0, tag=7, stream=a).wait()
        a.synchronize()
        b.synchronize()
    finally:
        a.close()
        b.close()


@check
def stream_refusal_and_sticky_error():
    """Rank 2 alone queues a read-only array: it raises InvalidArgumentError
    at once; the others' stream fails with MismatchError at synchronize
    (and the Work of every later operation says so); after that the stream
    works again."""
    s = hcomm.Stream()
    try:
        t = np.array([R + 1], np.int32)
        if R == 2:
            t.flags.writeable = False
        try:
            w1 = hcomm.all_reduce(t, stream=s)
        except hcomm.InvalidArgumentError as e:
            assert R == 2 and "read-only" in str(e), (R, e)
            w1 = None
        u = np.array([R], np.int32)
        w2 = hcomm.all_reduce(u, stream=s)
        if R != 2:
            for w in (w1, w2):
                try:
                    w.wait()
                    raise AssertionError("a Work after the failure did not raise")
                except hcomm.MismatchError as e:
                    assert "rank 2" in str(e), e
        try:
            s.synchronize()
            assert R == 2, "synchronize did not raise on rank %d" % R
        except hcomm.MismatchError:
            pass
        hcomm.barrier()
        v = np.array([R + 1], np.int32)
        hcomm.all_reduce(v, stream=s).wait()
        assert v[0] == N * (N + 1) // 2, v
        s.synchronize()
    finally:
        s.close()


@check
def stream_fuses_many_small():
    with hcomm.Stream() as s:
        ts = [np.full(64, R + k, np.float32) for k in range(500)]
        works = [hcomm.all_reduce(t, stream=s) for t in ts]
    for k, t in enumerate(ts):
        assert works[k].is_completed()
        assert (t == N * k + N * (N - 1) / 2).all(), (k, t[:2])


@check
def scheduler_seed_tasks():
    """The seed's three tasks on a small numpy model: gradient sync
    (priority 10), the parameter update after it, logging after both."""
    rng = np.random.default_rng(R)
    weights = np.ones(64, np.float32)
    grads = rng.standard_normal(64).astype(np.float32)
    log = []

    def sync_gradients():
        hcomm.all_reduce(grads, op=hcomm.ReduceOp.AVG)  # on the task's stream, blocking
        assert hcomm.current_stream() is not None
        return float(grads.sum())

    def update_parameters():
        weights[:] -= 0.1 * grads
        return float(weights[0])

    def log_step():
        log.append((float(grads[0]), float(weights[0])))
        return len(log)

    scheduler = hcomm.CommunicationScheduler()
    scheduler.register_task(task_id="gradient_sync", func=sync_gradients, priority=10)
    scheduler.register_task(task_id="param_update", func=update_parameters, priority=5,
                            depends_on=["gradient_sync"])
    scheduler.register_task(task_id="logging", func=log_step, priority=1,
                            depends_on=["gradient_sync", "param_update"])
    results = scheduler.run()
    assert set(results) == {"gradient_sync", "param_update", "logging"}, results
    assert results["logging"] == 1
    # Every rank has the same averaged gradients and weights.
    check = weights.copy()
    hcomm.all_reduce(check, op=hcomm.ReduceOp.MAX)
    assert np.allclose(check, weights), (check[:3], weights[:3])
    assert log == [(float(grads[0]), float(weights[0]))]
    assert hcomm.current_stream() is None
    scheduler.close()


@check
def scheduler_custom_policy_and_mismatch():
    class LowestFirst(hcomm.Scheduler):
        def schedule(self, tasks):
            return sorted(tasks, key=lambda t: t.priority)

    started = []

    def task(name):
        def run():
            started.append(name)
            hcomm.barrier()
            return name
        return run

    # The same custom policy everywhere: it decides the order.
    hcomm.set_scheduler(LowestFirst())
    try:
        sched = hcomm.CommunicationScheduler()
        for name, prio in (("a", 9), ("b", 1), ("c", 5)):
            sched.register_task(task_id=name, func=task(name), priority=prio,
                                depends_on=[] if name != "c" else ["a"])
        assert sched.run() == {"a": "a", "b": "b", "c": "c"}
        sched.close()
    finally:
        hcomm.set_scheduler(None)
    # Rank 1 alone orders them its own way: MismatchError naming both tasks
    # on every rank, and nothing runs.
    started.clear()
    sched = hcomm.CommunicationScheduler(policy=LowestFirst() if R == 1 else None)
    sched.register_task(task_id="urgent", func=task("urgent"), priority=9)
    sched.register_task(task_id="bulk", func=task("bulk"), priority=1)
    try:
        sched.run()
        raise AssertionError("run() did not raise")
    except hcomm.MismatchError as e:
        assert "task 'urgent' (priority 9) where rank 1 starts task 'bulk' (priority 1)" in str(e), e
    assert started == []
    sched.close()


@check
def scheduler_errors_name_tasks():
    sched = hcomm.CommunicationScheduler()
    ran = []
    sched.register_task(task_id="bad", func=lambda: 1 / 0, priority=2)
    sched.register_task(task_id="after_bad", func=lambda: ran.append("after_bad"), priority=2,
                        depends_on=["bad"])
    sched.register_task(task_id="free", func=lambda: ran.append("free") or "free", priority=1)
    try:
        sched.run()
        raise AssertionError("run() did not raise")
    except ZeroDivisionError as e:
        note = " ".join(getattr(e, "__notes__", []))
        assert "task 'bad' (priority 2) failed" in note, note
        assert "not run, as they depend on a failed task: 'after_bad'" in note, note
    assert ran == ["free"], ran
    try:
        sched.register_task(task_id="free", func=lambda: 0)
        raise AssertionError("a duplicate id was taken")
    except hcomm.InvalidArgumentError as e:
        assert "'free' is registered twice" in str(e), e
    sched.close()
    cyc = hcomm.CommunicationScheduler()
    cyc.register_task(task_id="x", func=lambda: 0, depends_on=["y"])
    cyc.register_task(task_id="y", func=lambda: 0, depends_on="x")
    try:
        cyc.run()
        raise AssertionError("a cycle ran")
    except hcomm.InvalidArgumentError as e:
        assert "cycle: 'x' -> 'y' -> 'x'" in str(e), e
    cyc.close()


@check
def exceptions():
    try:
        hcomm.send(np.zeros(1), dst=N)
        raise AssertionError("send to rank %d did not raise" % N)
    except hcomm.InvalidArgumentError as e:
        assert e.status == 1 and "out of range" in str(e), e
    if R == 0:
        hcomm.get_default_group().set_timeout(300)
        t0 = time.monotonic()
        try:
            hcomm.recv(np.zeros(2), src=1, tag=4242)  # Nobody sends it.
            raise AssertionError("recv did not time out")
        except builtins.TimeoutError as e:
            assert isinstance(e, hcomm.TimeoutError) and isinstance(e, hcomm.HcommError), e
            assert e.status == 4 and "4242" in str(e), e
            assert time.monotonic() - t0 < 10
        finally:
            hcomm.get_default_group().set_timeout(30000)
    hcomm.barrier()


def _ends_at_ctrl_c(call):
    """Sends this rank SIGINT in 0.3 s and checks that `call` (which would
    wait 30 s) ends with KeyboardInterrupt within 5 s."""
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    try:
        call()
        raise AssertionError("%s returned" % call)
    except KeyboardInterrupt:
        pass
    finally:
        timer.join()
    assert time.monotonic() - t0 < 5, time.monotonic() - t0


@check
def ctrl_c_ends_a_collective():
    # Rank 0 alone calls an allreduce of a group of every rank: Ctrl-C ends
    # it long before its 30 s timeout (in the shared-memory segment, or over
    # TCP, whichever the run uses), and the job goes on.
    g = hcomm.new_group(list(range(N)))
    if R == 0:
        g.set_timeout(30000)
        _ends_at_ctrl_c(lambda: g.all_reduce(np.ones(1 << 16, np.float32)))
    hcomm.barrier()
    g.destroy()
    hcomm.barrier()


@check
def ctrl_c_ends_a_wait_behind_an_iallreduce():
    # Rank 0 alone starts an iallreduce of a group and then calls a blocking
    # barrier there, which waits for the iallreduce first (in Request.wait):
    # Ctrl-C ends that long before the 30 s timeout; abort() ends the rest.
    g = hcomm.new_group(list(range(N)))
    if R == 0:
        g.set_timeout(30000)
        req = g.all_reduce(np.ones(4, np.float32), async_op=True)
        assert isinstance(req, hcomm.Request), req
        _ends_at_ctrl_c(g.barrier)
        assert not req.is_completed()
        g.abort()
        try:
            req.wait()
            raise AssertionError("the aborted iallreduce succeeded")
        except hcomm.AbortedError:
            pass
    hcomm.barrier()
    g.destroy()
    hcomm.barrier()


@check
def shared_memory_channel():
    name = "pymulti-" + os.environ.get("HCOMM_JOB_KEY", str(os.getppid()))
    if R == 0:
        ch = hcomm.SharedMemoryChannel(name, 1 << 16, create=True)
        hcomm.barrier()  # Created before anyone opens it.
        got = sorted(ch.read(timeout_ms=10000) for _ in range(N - 1))
        assert got == [b"from rank %d" % r for r in range(1, N)], got
        hcomm.barrier()
        ch.close()
    else:
        hcomm.barrier()
        with hcomm.SharedMemoryChannel(name, 0) as ch:
            ch.write(b"from rank %d" % R)
        hcomm.barrier()


@check
def forked_child():
    """A child forked after init (as a worker pool forks) is refused the
    parent's group, and its normal exit (atexit destroys what the program
    left) leaves the parent's job and channel alone."""
    name = "pyfork-%d-" % R + os.environ.get("HCOMM_JOB_KEY", str(os.getppid()))
    ch = hcomm.SharedMemoryChannel(name, 1 << 12, create=True)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert hcomm.get_rank() == R
            try:
                hcomm.all_reduce(np.ones(4, np.float32))
                print("FAIL: forked_child: all_reduce in the child worked", flush=True)
            except hcomm.InvalidArgumentError as e:
                assert "fork" in str(e), e
                ch.write(b"from the child")
                code = 0
        finally:
            sys.stdout.flush()
            if code:
                os._exit(code)
        sys.exit(0)  # Through atexit, which destroys the inherited group.
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert ch.read(timeout_ms=5000) == b"from the child"
    with hcomm.SharedMemoryChannel(name, 0):  # The child's close left the name.
        pass
    ch.close()
    t = np.array([R + 1], np.int64)
    hcomm.all_reduce(t)
    assert t[0] == N * (N + 1) // 2, t


def worker():
    global R
    hcomm.init(timeout_ms=30000)
    R = hcomm.get_rank()
    assert hcomm.get_world_size() == N
    for fn in CHECKS:
        fn()
        print("ok:", fn.__name__, flush=True)
    hcomm.destroy()
    # destroy() then init() at once, twice: a rank back before rank 0 has
    # closed the old store waits for the new one.
    for k in range(2):
        hcomm.init(timeout_ms=30000)
        t = np.array([k + R], np.int64)
        hcomm.all_reduce(t)
        assert t[0] == k * N + N * (N - 1) // 2, (k, t)
        hcomm.destroy()
    print("ok: init again right after destroy", flush=True)
    print("ok: all", flush=True)


def peer_failure_worker():
    """Rank 1 leaves without destroy; rank 0's pending recv sees it."""
    hcomm.init(timeout_ms=20000)
    hcomm.barrier()
    if hcomm.get_rank() == 1:
        os._exit(0)
    try:
        hcomm.recv(np.zeros(4), src=1, tag=5)
        print("recv returned")
        sys.exit(1)
    except hcomm.PeerFailureError as e:
        assert e.status == 5
        print("ok: PeerFailureError:", e, flush=True)
    hcomm.destroy()


def shrink_worker():
    """4 ranks; rank 2 is SIGKILLed once the others are past the warm-up (each
    tells it so): the survivors' all_reduce raises PeerFailureError, and
    hcomm.shrink() gives them a communicator of 3 ranks in their old order,
    whose all_reduce sums the survivors and which outlives the old one."""
    comm = hcomm.init(timeout_ms=10000)
    r = comm.rank
    comm.all_reduce(np.ones(4))
    if r != 2:
        comm.send(np.ones(1, dtype=np.int32), dst=2, tag=99)
    else:
        for src in (0, 1, 3):
            comm.recv(np.zeros(1, dtype=np.int32), src=src, tag=99)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        comm.all_reduce(np.ones(4))
        print("FAIL: all_reduce worked with rank 2 dead", flush=True)
        sys.exit(1)
    except hcomm.PeerFailureError as e:
        print("ok: PeerFailureError:", e, flush=True)
    new = hcomm.shrink()
    assert (new.rank, new.size) == ({0: 0, 1: 1, 3: 2}[r], 3), (new.rank, new.size)
    t = np.full(1000, r + 1, dtype=np.int64)
    new.all_reduce(t)
    assert (t == 1 + 2 + 4).all(), t[:4]
    hcomm.destroy()  # the old default group; the shrunk one stays
    new.barrier()
    again = new.shrink()  # no failure now: a copy of every rank
    assert again.size == 3 and again.rank == new.rank
    print("ok: shrink to 3 ranks, all_reduce", int(t[0]), flush=True)
    again.destroy()
    new.destroy()


def destroy_during_barrier_worker():
    """Rank 0: a thread blocks in barrier() (rank 1 never enters it) while the
    main thread destroys the communicator: destroy() waits for the barrier
    until abort() ends it. Rank 1 waits in a recv that rank 0's abort ends."""
    comm = hcomm.init(timeout_ms=20000)
    if comm.rank == 1:
        try:
            comm.recv(np.zeros(1), src=0, tag=9)  # Nobody sends it.
        except (hcomm.PeerFailureError, hcomm.AbortedError):
            pass
        hcomm.destroy()
        return
    got = {}

    def barrier():
        try:
            comm.barrier()
        except hcomm.HcommError as e:
            got["barrier"] = e

    def until(predicate):
        deadline = time.monotonic() + 10
        while not predicate():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.001)

    barrier_thread = threading.Thread(target=barrier)
    barrier_thread.start()
    until(lambda: comm._use.busy)
    destroy_thread = threading.Thread(target=hcomm.destroy)
    destroy_thread.start()
    until(lambda: comm.closed)
    try:
        comm.barrier()
        raise AssertionError("a barrier begun after destroy() did not raise")
    except hcomm.InvalidArgumentError as e:
        assert "destroyed" in str(e), e
    assert destroy_thread.is_alive(), "destroy() did not wait for the barrier"
    comm.abort()
    barrier_thread.join(10)
    destroy_thread.join(10)
    assert not destroy_thread.is_alive(), "destroy() still waits after abort()"
    assert isinstance(got.get("barrier"), hcomm.AbortedError), got
    print("ok: the barrier ended with AbortedError", flush=True)


def check_follows_rank_0_worker():
    """HCOMM_CHECK_COLLECTIVES=1 on rank 0 only, over TCP: rank 1 follows
    rank 0 (and says so on stderr), so a broadcast where each rank takes
    itself for the root fails on both with MismatchError instead of
    returning on both."""
    comm = hcomm.init(timeout_ms=20000)
    try:
        comm.broadcast(np.zeros(4, np.int32), src=comm.rank)
        print("broadcast returned", flush=True)
        sys.exit(1)
    except hcomm.MismatchError as e:
        assert "root 0" in str(e) and "root 1" in str(e), e
        print("ok: MismatchError:", e, flush=True)
    hcomm.destroy()


def compression_over_tcp_worker():
    """Two ranks over TCP, where FP16/BF16 do apply: every compression kind
    and back to NONE; a float32 all_reduce under FP16 lands within 1e-3
    (relative) of the exact sum, and DELTA sends stay exact."""
    C = hcomm.CompressionType
    comm = hcomm.init(timeout_ms=20000)
    rank, peer = comm.rank, 1 - comm.rank
    assert comm.transport(peer) == "tcp", comm.transport(peer)
    xs = [np.random.default_rng(100 + r).uniform(0.5, 2.0, 4099).astype(np.float32)
          for r in range(2)]
    exact = xs[0].astype(np.float64) + xs[1].astype(np.float64)
    hcomm.set_compression(C.FP16)
    t = xs[rank].copy()
    hcomm.all_reduce(t)
    err = float(np.max(np.abs(t - exact) / exact))
    assert err <= 1e-3, "FP16 all_reduce: relative error %g" % err
    print("ok: FP16 all_reduce within %.2g of the exact sum" % err, flush=True)
    for kind in (C.FP16 | C.DELTA, C.BF16 | C.DELTA, C.DELTA, C.BF16, C.NONE):
        hcomm.set_compression(kind)
        a = np.arange(1000, dtype=np.float64) + rank
        for step in range(2):  # the second message of the same size: a delta
            a[step] += 0.5
            b = np.zeros_like(a)
            if rank == 0:
                hcomm.send(a, dst=peer, tag=70)
                hcomm.recv(b, src=peer, tag=70)
            else:
                hcomm.recv(b, src=peer, tag=70)
                hcomm.send(a, dst=peer, tag=70)
            want = np.arange(1000, dtype=np.float64) + peer
            want[:step + 1] += 0.5
            assert (b == want).all(), (kind, step)
        t = np.full(64, rank + 1, np.float32)  # small integers: exact in every format
        hcomm.all_reduce(t)
        assert (t == 3).all(), (kind, t[:4])
    t = xs[rank].copy()
    hcomm.all_reduce(t)  # NONE again
    assert np.array_equal(t, (xs[0] + xs[1])), "NONE all_reduce is not exact"
    print("ok: every compression kind, then NONE", flush=True)
    try:
        hcomm.set_compression(C.FP16 | C.BF16)
        print("FP16|BF16 was accepted", flush=True)
        sys.exit(1)
    except hcomm.InvalidArgumentError as e:
        assert "kind" in str(e), e
        print("ok: InvalidArgumentError:", e, flush=True)
    hcomm.destroy()


def bad_token_worker():
    try:
        hcomm.init(timeout_ms=3000)
    except hcomm.PermissionDeniedError as e:
        print("ok: PermissionDeniedError:", e, flush=True)
        return
    except hcomm.HcommError as e:
        print("ok: %s: %s" % (type(e).__name__, e), flush=True)
        return
    print("init succeeded", flush=True)
    sys.exit(1)


# ---- driver side (the Bazel test) -----------------------------------------

def _runfile(rel):
    for d in (os.environ.get("RUNFILES_DIR"), os.environ.get("TEST_SRCDIR")):
        if d and os.path.exists(os.path.join(d, "hcomm", rel)):
            return os.path.join(d, "hcomm", rel)
    raise unittest.SkipTest("%s not in the runfiles" % rel)


def _child_env():
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(hcomm.__file__)))
    env["PYTHONPATH"] = pkg_root
    for k in ("HCOMM_RANK", "HCOMM_WORLD_SIZE", "HCOMM_STORE_ADDR", "HCOMM_JOB_TOKEN",
              "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FourRanks(unittest.TestCase):
    output = ""
    returncode = None

    @classmethod
    def setUpClass(cls):
        launcher = _runfile("tools/hcomm_run")
        t0 = time.monotonic()
        p = subprocess.run(
            [launcher, "-n", str(N), "--timeout", "50", "--", sys.executable,
             os.path.abspath(__file__), "--worker"],
            env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=70, text=True)
        cls.output, cls.returncode = p.stdout, p.returncode
        print(cls.output)
        print("4-rank run: exit %d in %.1f s" % (p.returncode, time.monotonic() - t0))

    def assert_all_ranks(self, line):
        for r in range(N):
            self.assertIn("[rank %d] %s\n" % (r, line), self.output,
                          "rank %d did not print %r" % (r, line))

    def test_exit_status(self):
        self.assertEqual(self.returncode, 0, self.output)
        self.assert_all_ranks("ok: all")


def _add_check_test(name):
    def test(self):
        self.assert_all_ranks("ok: " + name)
    test.__name__ = "test_" + name
    setattr(FourRanks, test.__name__, test)


for _fn in CHECKS:
    _add_check_test(_fn.__name__)


def _start_by_hand(mode, tokens, extra_env=None):
    port = _free_port()
    procs = []
    for rank, token in enumerate(tokens):
        env = _child_env()
        env.update(HCOMM_RANK=str(rank), HCOMM_WORLD_SIZE=str(len(tokens)),
                   HCOMM_STORE_ADDR="127.0.0.1:%d" % port, HCOMM_JOB_TOKEN=token)
        env.update((extra_env or [{}] * len(tokens))[rank])
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), mode], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append((p.returncode, out))
    for rank, (rc, out) in enumerate(outs):
        print("%s rank %d exited %s:\n%s" % (mode, rank, rc, out))
    return outs


class Failures(unittest.TestCase):
    def test_peer_failure(self):
        outs = _start_by_hand("--peer-failure", ["t0ken-a", "t0ken-a"])
        self.assertEqual(outs[0][0], 0, outs)
        self.assertIn("ok: PeerFailureError", outs[0][1])

    def test_shrink_after_a_rank_is_killed(self):
        outs = _start_by_hand("--shrink", ["t0ken-s"] * 4)
        self.assertEqual([rc for rc, _ in outs], [0, 0, -signal.SIGKILL, 0], outs)
        for r in (0, 1, 3):
            self.assertIn("ok: shrink to 3 ranks, all_reduce 7", outs[r][1])

    def test_destroy_during_barrier(self):
        outs = _start_by_hand("--destroy-during-barrier", ["t0ken-b", "t0ken-b"])
        self.assertEqual([rc for rc, _ in outs], [0, 0], outs)
        self.assertIn("ok: the barrier ended with AbortedError", outs[0][1])

    def test_check_collectives_follows_rank_0(self):
        outs = _start_by_hand(
            "--check-follows-rank-0", ["t0ken-c", "t0ken-c"],
            [{"HCOMM_CHECK_COLLECTIVES": "1", "HCOMM_TRANSPORTS": "tcp"},
             {"HCOMM_TRANSPORTS": "tcp"}])
        self.assertEqual([rc for rc, _ in outs], [0, 0], outs)
        for _, out in outs:
            self.assertIn("ok: MismatchError", out)
        self.assertIn("HCOMM_CHECK_COLLECTIVES is unset (or not 1) here but 1 on rank 0",
                      outs[1][1])

    def test_wrong_job_token(self):
        outs = _start_by_hand("--bad-token", ["right-token", "wrong-token"])
        self.assertEqual([rc for rc, _ in outs], [0, 0], outs)
        self.assertIn("ok: PermissionDeniedError", outs[1][1], outs)


class TwoRanksOverTcp(unittest.TestCase):
    def test_compression_over_tcp(self):
        outs = _start_by_hand("--compression-over-tcp", ["t0ken-d", "t0ken-d"],
                              [{"HCOMM_TRANSPORTS": "tcp"}, {"HCOMM_TRANSPORTS": "tcp"}])
        self.assertEqual([rc for rc, _ in outs], [0, 0], outs)
        for _, out in outs:
            self.assertIn("ok: FP16 all_reduce within", out)
            self.assertIn("ok: every compression kind, then NONE", out)
            self.assertIn("ok: InvalidArgumentError: hcomm operation invalid argument: set_compression: kind", out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    elif "--peer-failure" in sys.argv:
        peer_failure_worker()
    elif "--shrink" in sys.argv:
        shrink_worker()
    elif "--destroy-during-barrier" in sys.argv:
        destroy_during_barrier_worker()
    elif "--bad-token" in sys.argv:
        bad_token_worker()
    elif "--check-follows-rank-0" in sys.argv:
        check_follows_rank_0_worker()
    elif "--compression-over-tcp" in sys.argv:
        compression_over_tcp_worker()
    else:
        unittest.main(verbosity=2)
