"""hcomm as a torch.distributed backend.

    import torch.distributed as dist
    import hcomm.torch                      # registers the backend "hcomm"
    dist.init_process_group(backend="hcomm")
    model = torch.nn.parallel.DistributedDataParallel(model)

The default group joins hcomm through the store torch hands the backend
(one published address and token; no second port) and is hcomm's default
group, so hcomm.* calls and torch's share one job. Groups of
dist.new_group(..., backend="hcomm") are hcomm groups (made by the same
collective call, see hcomm._torch_join).

Each operation starts on the calling thread, in call order, and returns a
torch Work made from a torch future; one thread per process group waits
for the operations in order and completes their futures, so DDP's
callbacks run there. Supported: allreduce (SUM, PRODUCT, MIN, MAX, AVG),
broadcast, reduce, allgather (lists and _allgather_base), reduce_scatter
(lists and _reduce_scatter_base), alltoall and alltoall_base (with split
sizes), gather, scatter, barrier, send, recv and recv_anysource, on CPU
tensors of hcomm's dtypes.
"""

import queue
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

import hcomm
from . import _extras, _torch_join
from ._communicator import ReduceOp
from .errors import _invalid

__all__ = ["ProcessGroupHcomm", "BACKEND"]

BACKEND = "hcomm"

_OPS = {
    dist.ReduceOp.SUM: ReduceOp.SUM,
    dist.ReduceOp.PRODUCT: ReduceOp.PROD,
    dist.ReduceOp.MIN: ReduceOp.MIN,
    dist.ReduceOp.MAX: ReduceOp.MAX,
}
if hasattr(dist.ReduceOp, "AVG"):
    _OPS[dist.ReduceOp.AVG] = ReduceOp.AVG


def _op(op):
    for theirs, ours in _OPS.items():
        if op == theirs:
            return ours
    raise _invalid("hcomm backend: reduce op %s is not supported (SUM, PRODUCT, MIN, MAX, AVG)"
                   % (op,))


def _one(tensors, what):
    if len(tensors) != 1:
        raise _invalid("hcomm backend: %s takes one tensor per call (CPU), not %d"
                       % (what, len(tensors)))
    t = tensors[0]
    if t.device.type != "cpu":
        raise _invalid("hcomm backend: %s: a tensor on %s; hcomm takes CPU tensors"
                       % (what, t.device))
    return t


class _Dense:
    """A contiguous stand-in for a tensor, copied back after the call."""

    def __init__(self, t):
        self.t = t
        self.buf = t if t.is_contiguous() else t.contiguous()

    def back(self):
        if self.buf is not self.t:
            self.t.copy_(self.buf)


class _Completer:
    """Waits for the group's operations in order and completes their
    futures (one daemon thread, started at the first operation)."""

    def __init__(self, name):
        self._queue = queue.SimpleQueue()
        self._name = name
        self._thread = None
        self._lock = threading.Lock()

    def add(self, work, fut, result, after=None):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put((work, fut, result, after))

    def _run(self):
        while True:
            work, fut, result, after = self._queue.get()
            try:
                if work is not None:
                    work.wait()
                if after is not None:
                    after()
            except BaseException as e:  # the future carries it to whoever waits
                fut.set_exception(e)
            else:
                fut.set_result(result)


class _AnySourceWork(dist.Work):
    """recv_anysource's Work (returned to Python only): torch asks it for
    the sender."""

    def __init__(self, req, comm, tensor, dense):
        super().__init__()
        self._req, self._comm, self._tensor, self._dense = req, comm, tensor, dense

    def wait(self, timeout=None):
        self._req.wait()
        self._dense.back()
        return True

    def is_completed(self):
        return self._req.is_completed()

    def is_success(self):
        return self.is_completed()

    def _source_rank(self):
        self.wait()
        return self._req.source

    def result(self):
        return [self._tensor]


class ProcessGroupHcomm(dist.ProcessGroup):
    """A torch process group whose operations run on an hcomm communicator
    (ranks and sizes are the group's, as torch hands them)."""

    def __init__(self, rank, size, comm=None):
        super().__init__(rank, size)
        self._comm = comm  # None: a subgroup's, found at first use
        self._completer = _Completer("hcomm-pg-%d-of-%d" % (rank, size))

    def getBackendName(self):
        return BACKEND

    def _hcomm_communicator(self):
        if self._comm is None or self._comm.closed:
            comm = _torch_join.group_of(self)
            if comm.size != self.size() or comm.rank != self.rank():
                raise _invalid("hcomm backend: the hcomm group has rank %d of %d, torch's %d of %d"
                               % (comm.rank, comm.size, self.rank(), self.size()))
            self._comm = comm
        return self._comm

    def _work(self, work, result, after=None):
        fut = torch.futures.Future()
        self._completer.add(work, fut, result, after)
        return _create_work_from_future(fut)

    # ---- collectives --------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "allreduce")
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        d = _Dense(t)
        work = self._hcomm_communicator().all_reduce(d.buf, op, async_op=True)
        return self._work(work, tensors, d.back)

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        d = _Dense(t)
        root = opts.rootRank if opts is not None else 0
        work = self._hcomm_communicator().broadcast(d.buf, root, async_op=True)
        return self._work(work, tensors, d.back)

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        d = _Dense(t)
        comm = self._hcomm_communicator()
        work = comm.reduce(d.buf, opts.rootRank, _op(opts.reduceOp), async_op=True)
        return self._work(work, tensors, d.back)

    def allgather(self, output_tensors, input_tensors, opts=None):
        outs = output_tensors[0] if len(output_tensors) == 1 else None
        if outs is None:
            raise _invalid("hcomm backend: allgather takes one list of outputs (CPU)")
        t = _one(input_tensors, "allgather")
        comm = self._hcomm_communicator()
        flat = torch.empty(comm.size * t.numel(), dtype=t.dtype)
        work = comm.all_gather(flat, t.contiguous().reshape(-1), async_op=True)
        n = t.numel()

        def after():
            for i, o in enumerate(outs):
                o.copy_(flat[i * n:(i + 1) * n].reshape(o.shape))
        return self._work(work, output_tensors, after)

    def _allgather_base(self, output, input, opts=None):
        d = _Dense(output)
        work = self._hcomm_communicator().all_gather(d.buf, input.contiguous(), async_op=True)
        return self._work(work, [output], d.back)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        if len(input_tensors) != 1:
            raise _invalid("hcomm backend: reduce_scatter takes one list of inputs (CPU)")
        flat = torch.cat([i.reshape(-1) for i in input_tensors[0]])
        d = _Dense(out)
        work = self._hcomm_communicator().reduce_scatter(d.buf, flat, _op(opts.reduceOp),
                                                         async_op=True)
        return self._work(work, output_tensors, d.back)

    def _reduce_scatter_base(self, output, input, opts=None):
        d = _Dense(output)
        work = self._hcomm_communicator().reduce_scatter(d.buf, input.contiguous(),
                                                         _op(opts.reduceOp), async_op=True)
        return self._work(work, [output], d.back)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        comm = self._hcomm_communicator()
        d = _Dense(output)
        _extras.all_to_all_single(comm, d.buf, input.contiguous(), output_split_sizes or None,
                                  input_split_sizes or None, False)
        return self._work(None, [output], d.back)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        comm = self._hcomm_communicator()
        dense = [_Dense(o) for o in output_tensors]
        _extras.all_to_all_list(comm, [d.buf for d in dense],
                                [i.contiguous() for i in input_tensors], False, None)

        def after():
            for d in dense:
                d.back()
        return self._work(None, output_tensors, after)

    def gather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "gather")
        comm = self._hcomm_communicator()
        root = opts.rootRank
        outs = output_tensors[0] if comm.rank == root else None
        flat = torch.empty(comm.size * t.numel(), dtype=t.dtype) if outs is not None else None
        work = comm.gather(t.contiguous().reshape(-1), flat, root, async_op=True)
        n = t.numel()

        def after():
            if outs is not None:
                for i, o in enumerate(outs):
                    o.copy_(flat[i * n:(i + 1) * n].reshape(o.shape))
        return self._work(work, output_tensors, after)

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "scatter")
        comm = self._hcomm_communicator()
        root = opts.rootRank
        flat = torch.cat([i.reshape(-1) for i in input_tensors[0]]) if comm.rank == root else None
        d = _Dense(out)
        work = comm.scatter(d.buf, flat, root, async_op=True)
        return self._work(work, output_tensors, d.back)

    def barrier(self, opts=None):
        work = self._hcomm_communicator().barrier(async_op=True)
        return self._work(work, [])

    # ---- point-to-point -----------------------------------------------------

    def send(self, tensors, dst, tag):
        t = _one(tensors, "send")
        req = self._hcomm_communicator().isend(t.contiguous(), dst, tag)
        fut = torch.futures.Future()
        _wait_alone(req, fut, tensors)
        return _create_work_from_future(fut)

    def recv(self, tensors, src, tag):
        t = _one(tensors, "recv")
        d = _Dense(t)
        req = self._hcomm_communicator().irecv(d.buf, src, tag)
        fut = torch.futures.Future()
        _wait_alone(req, fut, tensors, d.back)
        return _create_work_from_future(fut)

    def recv_anysource(self, tensors, tag):
        t = _one(tensors, "recv")
        d = _Dense(t)
        req = self._hcomm_communicator().irecv(d.buf, None, tag)
        return _AnySourceWork(req, self._hcomm_communicator(), t, d)


def _wait_alone(req, fut, result, after=None):
    """Completes fut when req ends, on a thread of its own (a receive may
    wait long; it must not hold back the group's other operations)."""
    def run():
        try:
            req.wait()
            if after is not None:
                after()
        except BaseException as e:
            fut.set_exception(e)
        else:
            fut.set_result(result)
    threading.Thread(target=run, name="hcomm-p2p", daemon=True).start()


def _create(opts, pg_options=None):
    """The backend's creator (torch's extended API): the default group joins
    hcomm; a subgroup finds its hcomm group at first use."""
    timeout_ms = max(1, int(opts.timeout.total_seconds() * 1000))
    if not opts.global_ranks_in_group:
        comm = hcomm._join_backend(opts.store, opts.group_rank, opts.group_size, timeout_ms)
        _torch_join.wrap_new_group()
        return ProcessGroupHcomm(opts.group_rank, opts.group_size, comm)
    return ProcessGroupHcomm(opts.group_rank, opts.group_size)


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True)


_register()
_torch_join.wrap_new_group()
