"""The rest of torch.distributed's surface over hcomm's collectives: list
forms, all_to_all with split sizes, object collectives, batch_isend_irecv,
monitored_barrier and futures of works.

List and split forms take numpy arrays or CPU torch tensors. They run to
completion before they return (with async_op=True they return a Work that
is already complete): each is more than one call underneath.
"""

import collections
import pickle
import sys
import threading
import time

import numpy as np

from . import _tensors
from ._communicator import ReduceOp
from .errors import HcommError, MismatchError, Status, TimeoutError, _invalid, _message

# monitored_barrier's messages use this tag (documented as reserved).
MONITORED_BARRIER_TAG = 0x7FFFFFF0


class Done:
    """The Work of a call that completed before it returned."""

    def wait(self):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        return future_of(self)

    def __repr__(self):
        return "<hcomm.Work done>"


def _done(async_op):
    return Done() if async_op else None


def future_of(work):
    """A future completed (with None, or the work's error) when `work` ends:
    a torch.futures.Future when torch is loaded, else a
    concurrent.futures.Future. One waiting thread per pending work."""
    torch = sys.modules.get("torch")
    if torch is not None:
        fut = torch.futures.Future()
    else:
        import concurrent.futures
        fut = concurrent.futures.Future()
    ok, fail = (lambda: fut.set_result(None)), fut.set_exception

    def finish():
        try:
            work.wait()
        except BaseException as e:  # handed to whoever waits on the future
            fail(e)
        else:
            ok()

    if work.is_completed():
        finish()
    else:
        threading.Thread(target=finish, name="hcomm-future", daemon=True).start()
    return fut


def _is_torch(t):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(t, torch.Tensor)


def _check_tensor(t, what):
    if not (_is_torch(t) or isinstance(t, np.ndarray)):
        raise _invalid("%s: lists take numpy arrays or CPU torch tensors, not %s"
                       % (what, type(t).__name__))


def _flat_like(t, n):
    """A new contiguous 1-d tensor of t's kind and dtype, n elements."""
    if _is_torch(t):
        import torch
        return torch.empty(n, dtype=t.dtype)
    return np.empty(n, dtype=t.dtype)


def _flatten(t):
    return t.contiguous().reshape(-1) if _is_torch(t) else np.ascontiguousarray(t).reshape(-1)


def _concat(ts):
    if _is_torch(ts[0]):
        import torch
        return torch.cat([t.reshape(-1) for t in ts])
    return np.concatenate([np.ascontiguousarray(t).reshape(-1) for t in ts])


def _copy_into(dst, flat):
    """dst[...] = flat (same number of elements), for either kind."""
    if _is_torch(dst):
        dst.copy_(flat.reshape(dst.shape))
    else:
        np.copyto(dst, flat.reshape(dst.shape))


def _raw(t, writable, what):
    """t's bytes as a 1-d numpy uint8 array over its memory."""
    return np.asarray(memoryview(_tensors.as_buffer(t, writable, what).obj).cast("B"))


def _numel(t):
    return int(t.numel()) if _is_torch(t) else int(t.size)


def _list(ts, n, what):
    if len(ts) != n:
        raise _invalid("%s: the list has %d tensors; the group has %d ranks"
                       % (what, len(ts), n))
    for t in ts:
        _check_tensor(t, what)


def all_gather_list(comm, out, tensor, async_op, stream):
    what = "all_gather"
    if stream is not None:
        raise _invalid("%s: a list of tensors is not taken with stream=" % what)
    _check_tensor(tensor, what)
    _list(out, comm.size, what)
    n = _numel(tensor)
    for t in out:
        if _numel(t) != n:
            raise _invalid("%s: every tensor of the list needs %d elements, as tensor" % (what, n))
    flat = _flat_like(tensor, comm.size * n)
    comm.all_gather(flat, _flatten(tensor))
    for i, t in enumerate(out):
        _copy_into(t, flat[i * n:(i + 1) * n])
    return _done(async_op)


def reduce_scatter_list(comm, out, inp, op, async_op, stream):
    what = "reduce_scatter"
    if stream is not None:
        raise _invalid("%s: a list of tensors is not taken with stream=" % what)
    _check_tensor(out, what)
    _list(inp, comm.size, what)
    n = _numel(out)
    for t in inp:
        if _numel(t) != n:
            raise _invalid("%s: every tensor of the list needs %d elements, as out" % (what, n))
    res = _flat_like(out, n)
    comm.reduce_scatter(res, _concat(inp), op)
    _copy_into(out, res)
    return _done(async_op)


def gather_list(comm, tensor, out, dst, async_op, stream):
    what = "gather"
    if stream is not None:
        raise _invalid("%s: a list of tensors is not taken with stream=" % what)
    from ._communicator import InJob
    _check_tensor(tensor, what)
    root = InJob(dst, comm, "dst").__index__()
    n = _numel(tensor)
    flat = None
    if comm.rank == root:
        _list(out, comm.size, what)
        flat = _flat_like(tensor, comm.size * n)
    comm.gather(_flatten(tensor), flat, root)
    if flat is not None:
        for i, t in enumerate(out):
            _copy_into(t, flat[i * n:(i + 1) * n])
    return _done(async_op)


def scatter_list(comm, out, inp, src, async_op, stream):
    what = "scatter"
    if stream is not None:
        raise _invalid("%s: a list of tensors is not taken with stream=" % what)
    from ._communicator import InJob
    _check_tensor(out, what)
    root = InJob(src, comm, "src").__index__()
    flat = None
    if comm.rank == root:
        _list(inp, comm.size, what)
        flat = _concat(inp)
    res = _flat_like(out, _numel(out))
    comm.scatter(res, flat, root)
    _copy_into(out, res)
    return _done(async_op)


def _exchange(comm, sends, recvs, what):
    """all_to_all of byte blocks of any sizes: sends[j] (uint8 arrays) go to
    rank j, recvs[i] (writable uint8 arrays) are filled from rank i, whose
    block must be exactly that long (MismatchError naming the rank
    otherwise, once every rank is done). Two collectives: the largest block
    (allreduce MAX), then all_to_all of blocks padded to it, each led by its
    length."""
    longest = np.array([max([len(s) for s in sends] + [len(r) for r in recvs] + [0])],
                       dtype=np.int64)
    comm.all_reduce(longest, op=ReduceOp.MAX)
    block = 8 + int(longest[0])
    n = comm.size
    out = np.zeros(n * block, dtype=np.uint8)
    inp = np.zeros(n * block, dtype=np.uint8)
    for j, s in enumerate(sends):
        inp[j * block:j * block + 8] = np.frombuffer(np.int64(len(s)).tobytes(), np.uint8)
        inp[j * block + 8:j * block + 8 + len(s)] = s
    comm.all_to_all(out, inp)
    wrong = []
    for i, r in enumerate(recvs):
        got = int(np.frombuffer(out[i * block:i * block + 8].tobytes(), np.int64)[0])
        if got != len(r):
            wrong.append("rank %d sent %d bytes where %d were expected"
                         % (comm._job_rank(i), got, len(r)))
            continue
        r[:] = out[i * block + 8:i * block + 8 + got]
    if wrong:
        raise MismatchError(_message(Status.ERR_MISMATCH, "%s: %s" % (what, "; ".join(wrong))),
                            Status.ERR_MISMATCH)


def all_to_all_list(comm, out, inp, async_op, stream):
    what = "all_to_all"
    if stream is not None:
        raise _invalid("%s: lists of tensors are not taken with stream=" % what)
    if not isinstance(out, (list, tuple)) or not isinstance(inp, (list, tuple)):
        raise _invalid("%s: out and inp are both lists of tensors, or neither" % what)
    _list(out, comm.size, what)
    _list(inp, comm.size, what)
    for a, b in zip(out, inp):
        if a.dtype != b.dtype:
            raise _invalid("%s: out and inp hold different dtypes (%s, %s)" % (what, a.dtype, b.dtype))
    _exchange(comm, [_raw(t, False, what) for t in inp], [_raw(t, True, what) for t in out], what)
    return _done(async_op)


def _splits(sizes, t, n, what, name):
    rows = int(t.shape[0]) if len(t.shape) else 1
    if sizes is None or len(sizes) == 0:
        if rows % n:
            raise _invalid("%s: %d rows do not split evenly among %d ranks; give %s"
                           % (what, rows, n, name))
        return [rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise _invalid("%s: %s %s must be %d sizes >= 0 adding up to the %d rows"
                       % (what, name, sizes, n, rows))
    return sizes


def all_to_all_single(comm, out, inp, output_split_sizes, input_split_sizes, async_op):
    what = "all_to_all_single"
    _check_tensor(out, what)
    _check_tensor(inp, what)
    if out.dtype != inp.dtype:
        raise _invalid("%s: out and inp hold different dtypes (%s, %s)" % (what, out.dtype, inp.dtype))
    n = comm.size
    ins = _splits(input_split_sizes, inp, n, what, "input_split_sizes")
    outs = _splits(output_split_sizes, out, n, what, "output_split_sizes")
    src, dst = _raw(inp, False, what), _raw(out, True, what)
    row_in = len(src) // max(1, sum(ins)) if sum(ins) else 0
    row_out = len(dst) // max(1, sum(outs)) if sum(outs) else 0
    if ins == [ins[0]] * n and outs == ins and input_split_sizes is None \
            and output_split_sizes is None:
        comm.all_to_all(out, inp)  # even blocks: one call
        return _done(async_op)
    sends, at = [], 0
    for s in ins:
        sends.append(src[at:at + s * row_in])
        at += s * row_in
    recvs, at = [], 0
    for s in outs:
        recvs.append(dst[at:at + s * row_out])
        at += s * row_out
    _exchange(comm, sends, recvs, what)
    return _done(async_op)


P2POp = collections.namedtuple("P2POp", ["op", "tensor", "peer", "group", "tag"])
P2POp.__new__.__defaults__ = (None, 0)
P2POp.__doc__ = """P2POp(op, tensor, peer, group=None, tag=0): one operation of
batch_isend_irecv; op is hcomm.isend or hcomm.irecv (torch.distributed's
isend/irecv are read as those), peer a rank of the job."""


def batch_isend_irecv(ops, isend, irecv):
    if not isinstance(ops, (list, tuple)) or not ops:
        raise _invalid("batch_isend_irecv: p2p_op_list must be a non-empty list of P2POp")
    started = []
    try:
        for i, p in enumerate(ops):
            if not isinstance(p, P2POp) and not all(hasattr(p, a) for a in ("op", "tensor", "peer")):
                raise _invalid("batch_isend_irecv: p2p_op_list[%d] is a %s, not a P2POp"
                               % (i, type(p).__name__))
            name = getattr(p.op, "__name__", "")
            if name not in ("isend", "irecv"):
                raise _invalid("batch_isend_irecv: p2p_op_list[%d].op must be isend or irecv, "
                               "not %r" % (i, p.op))
            call = isend if name == "isend" else irecv
            started.append(call(p.tensor, p.peer, tag=getattr(p, "tag", 0) or 0,
                                group=getattr(p, "group", None)))
    except BaseException:
        for r in started:
            r.close()  # cancelled where nothing reached it yet
        raise
    return started


def _pickled(obj):
    return np.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=np.uint8)


def all_gather_object(comm, object_list, obj):
    what = "all_gather_object"
    if not isinstance(object_list, list) or len(object_list) != comm.size:
        raise _invalid("%s: object_list must be a list of %d (the group's size) entries"
                       % (what, comm.size))
    mine = _pickled(obj)
    sizes = np.zeros(comm.size, dtype=np.int64)
    comm.all_gather(sizes, np.array([len(mine)], dtype=np.int64))
    block = int(sizes.max())
    send = np.zeros(block, dtype=np.uint8)
    send[:len(mine)] = mine
    out = np.zeros(comm.size * block, dtype=np.uint8)
    comm.all_gather(out, send)
    for i in range(comm.size):
        object_list[i] = pickle.loads(out[i * block:i * block + int(sizes[i])].tobytes())


def broadcast_object_list(comm, object_list, src):
    what = "broadcast_object_list"
    if not isinstance(object_list, list):
        raise _invalid("%s: object_list must be a list, not %s" % (what, type(object_list).__name__))
    root = src.__index__()
    data = _pickled(list(object_list)) if comm.rank == root else None
    size = np.array([0 if data is None else len(data)], dtype=np.int64)
    comm.broadcast(size, root)
    if data is None:
        data = np.zeros(int(size[0]), dtype=np.uint8)
    comm.broadcast(data, root)
    objs = pickle.loads(data.tobytes())
    if len(objs) != len(object_list):
        raise _invalid("%s: rank %d's list has %d entries, this rank's %d"
                       % (what, comm._job_rank(root), len(objs), len(object_list)))
    object_list[:] = objs


def monitored_barrier(comm, timeout_ms):
    """Every rank reports to rank 0 of comm (tag MONITORED_BARRIER_TAG); rank
    0 answers each with the list of ranks that did not report by the
    deadline (empty: all did). Raises TimeoutError naming them (in the
    job's numbers) on rank 0 and on every rank that reported."""
    if timeout_ms is None:
        timeout_ms = 300000
    deadline = time.monotonic() + timeout_ms / 1000.0
    tag, n = MONITORED_BARRIER_TAG, comm.size
    answer = np.zeros(n + 1, dtype=np.int64)

    def waited(reqs, until):
        while not all(r.is_completed() for r in reqs):
            if time.monotonic() >= until:
                return False
            time.sleep(0.002)
        return True

    if comm.rank == 0:
        marks = [np.zeros(1, dtype=np.int64) for _ in range(n)]
        reqs = {i: comm.irecv(marks[i], i, tag) for i in range(1, n)}
        waited(list(reqs.values()), deadline)
        missing = [i for i, r in reqs.items() if not r.is_completed()]
        arrived = [i for i in reqs if i not in missing]
        for i in missing:
            reqs[i].close()
        for i in arrived:
            reqs[i].wait()
        answer[0] = len(missing)
        answer[1:1 + len(missing)] = [comm._job_rank(i) for i in missing]
        for i in arrived:
            comm.send(answer, i, tag)
    else:
        comm.send(np.zeros(1, dtype=np.int64), 0, tag)
        req = comm.irecv(answer, 0, tag)
        # Rank 0 answers by the deadline; its answer may take a moment more.
        if not waited([req], deadline + 2.0):
            req.close()
            raise TimeoutError(_message(
                Status.ERR_TIMEOUT,
                "monitored_barrier: rank %d (rank 0 of the group) did not answer within %d ms "
                "and 2 s" % (comm._job_rank(0), timeout_ms)), Status.ERR_TIMEOUT)
        req.wait()
    missing = [int(r) for r in answer[1:1 + int(answer[0])]]
    if missing:
        raise TimeoutError(_message(
            Status.ERR_TIMEOUT,
            "monitored_barrier: rank%s %s did not arrive within %d ms"
            % ("s" if len(missing) > 1 else "", ", ".join(map(str, missing)), timeout_ms)),
            Status.ERR_TIMEOUT)
