"""hcomm: point-to-point messages and collectives between processes.

Shaped like torch.distributed. Tensors are C-contiguous numpy arrays, CPU
torch tensors, or any object with the buffer protocol (bytearray,
memoryview, array.array); they are passed to the C library without copying,
and collectives work in place on them.

    import hcomm, numpy as np
    hcomm.init()                                   # from the environment
    t = np.full(4, hcomm.get_rank(), dtype=np.float32)
    hcomm.all_reduce(t, op=hcomm.ReduceOp.SUM)
    if hcomm.get_rank() == 0:
        src = hcomm.recv(t, src=None)              # any source; returns the sender
    else:
        hcomm.send(t, dst=0)
    hcomm.destroy()

Start ranks with `hcomm_run -n 4 -- python3 app.py`, or give each process
HCOMM_RANK, HCOMM_WORLD_SIZE, HCOMM_STORE_ADDR and HCOMM_JOB_TOKEN (or
torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Every blocking call ends by the communicator's timeout_ms. Errors raise
hcomm.HcommError (attribute `status`) or a subclass per status code;
hcomm.TimeoutError is also a builtin TimeoutError. The blocking calls
release the GIL, so other Python threads run meanwhile; on the main thread
they run Python's signal handlers every 100 ms while they wait, so Ctrl-C
ends one within that with KeyboardInterrupt (the call ends as it would at
its deadline). Every collective
takes async_op=True (as in torch.distributed): it returns at once with a
Work (all_reduce: a Request) to wait() for, and runs in its turn among the
group's collectives.
"""

import atexit as _atexit
import datetime as _datetime
import threading as _threading

from . import _native
from ._channel import SharedMemoryChannel
from ._channel import _close_all as _close_all_channels
from ._communicator import (
    ANY_SOURCE,
    ANY_TAG,
    UNDEFINED,
    Communicator,
    CompressionType,
    ReduceOp,
    Request,
    Work,
)
from ._communicator import _destroy_all
from ._stream import Event, Stream, StreamWork
from ._scheduler import CommunicationScheduler, Scheduler, Task, current_stream, set_scheduler
from ._stream import _close_all as _close_all_streams
from .errors import (
    AbortedError,
    HcommError,
    InvalidArgumentError,
    MismatchError,
    NoDeviceError,
    NotSupportedError,
    OutOfMemoryError,
    PeerFailureError,
    PermissionDeniedError,
    Status,
    TimeoutError,
    UnavailableError,
    InternalError,
)
from .errors import _invalid

__all__ = [
    # setup
    "init", "destroy", "is_initialized", "get_default_group",
    "init_process_group", "destroy_process_group",
    "get_rank", "get_world_size", "new_group", "split", "shrink",
    "set_compression", "CompressionType",
    # point-to-point
    "send", "recv", "isend", "irecv", "wait_all", "Request",
    # collectives
    "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
    "all_to_all", "gather", "scatter", "barrier", "ReduceOp", "Work",
    # streams
    "Stream", "Event", "StreamWork",
    # scheduler
    "CommunicationScheduler", "Scheduler", "Task", "set_scheduler", "current_stream",
    # objects and constants
    "Communicator", "SharedMemoryChannel", "ANY_SOURCE", "ANY_TAG", "UNDEFINED",
    "version", "__version__",
    # errors
    "Status", "HcommError", "InvalidArgumentError", "NoDeviceError",
    "OutOfMemoryError", "TimeoutError", "PeerFailureError", "MismatchError",
    "AbortedError", "UnavailableError", "PermissionDeniedError",
    "NotSupportedError", "InternalError",
]


def version():
    """The C library's version as (major, minor, patch)."""
    return tuple(_native.hcomm_version())


__version__ = "%d.%d.%d" % version()

_default = None
_default_lock = _threading.Lock()


def init(rank=None, world_size=None, store_addr=None, timeout_ms=None, job_token=None,
         **config):
    """Joins the job and makes the communicator the default group; returns it.

    Arguments left None come from the environment (HCOMM_RANK, RANK, ...).
    Other config keys (transports="shm,tcp", algo="ring", host_id=...,
    plugins="/path/libhcomm_uds.so") go
    through **config. Collective over every rank of the job; blocks until
    all have joined or timeout_ms passes (UnavailableError).
    """
    global _default
    with _default_lock:
        if _default is not None and not _default.closed:
            raise _invalid("hcomm.init: already initialised (rank %d of %d); call "
                           "hcomm.destroy() first" % (_default.rank, _default.size))
        comm = Communicator.from_config(rank=rank, world_size=world_size,
                                        store_addr=store_addr, timeout_ms=timeout_ms,
                                        job_token=job_token, **config)
        _default = comm
        return comm


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       **config):
    """init() with torch.distributed.init_process_group's arguments, for code
    written against it. backend is accepted and ignored (hcomm picks its
    transports: config transports="shm,tcp"); init_method is "env://" (the
    default: the environment, as init()) or "tcp://HOST:PORT" (the store
    address); timeout is a datetime.timedelta; world_size and rank -1 mean
    from the environment."""
    if backend is not None and not isinstance(backend, str):
        raise _invalid("backend must be a str or None, not %s" % type(backend).__name__)
    store_addr = None
    if init_method is not None and init_method != "env://":
        if not isinstance(init_method, str) or not init_method.startswith("tcp://"):
            raise _invalid("init_method %r is not supported: use \"env://\" or "
                           "\"tcp://HOST:PORT\"" % (init_method,))
        store_addr = init_method[len("tcp://"):]
    timeout_ms = None
    if timeout is not None:
        if not isinstance(timeout, _datetime.timedelta):
            raise _invalid("timeout must be a datetime.timedelta, not %s"
                           % type(timeout).__name__)
        timeout_ms = max(1, int(timeout.total_seconds() * 1000))
    return init(rank=None if rank == -1 else rank,
                world_size=None if world_size == -1 else world_size,
                store_addr=store_addr, timeout_ms=timeout_ms, **config)


def destroy_process_group(group=None):
    """destroy(), as torch.distributed names it."""
    destroy(group)


def is_initialized():
    """True between init() and destroy()."""
    return _default is not None and not _default.closed


def get_default_group():
    """The communicator made by init()."""
    comm = _default
    if comm is None or comm.closed:
        raise _invalid("hcomm is not initialised: hcomm.init() was not called, or the default "
                       "group has been destroyed (hcomm.destroy()); call hcomm.init() first")
    return comm


def _group(group):
    if group is None:
        return get_default_group()
    if not isinstance(group, Communicator):
        raise _invalid("group must be a communicator from hcomm.init/new_group/split "
                       "(or None for the default group), not %s" % type(group).__name__)
    return group


def destroy(group=None):
    """Destroys group (default: the default group, and every group made from
    it). Local, not collective. Doing it twice does nothing."""
    global _default
    if group is None:
        with _default_lock:
            comm, _default = _default, None
        if comm is not None:
            comm.destroy()
        return
    _group(group).destroy()


def get_rank(group=None):
    """This process's rank in group (default: the default group)."""
    return _group(group).rank


def get_world_size(group=None):
    """The number of ranks in group (default: the default group)."""
    return _group(group).size


def new_group(ranks, group=None):
    """A group of `ranks` (ranks of the default group); rank i of the new group
    is ranks[i]. Collective over the default group (every rank calls it with
    the same list); returns None on ranks not listed."""
    return _group(group).new_group(ranks)


def split(color, key=0, group=None):
    """Ranks with the same color form a group ordered by (key, rank); color
    None or UNDEFINED gets None. Collective."""
    return _group(group).split(color, key)


def shrink(group=None):
    """After a rank failed (PeerFailureError): the survivors of group (default:
    the default group) agree on who is gone and get a new communicator of
    the living ranks, renumbered in their old order. Collective over the
    survivors. The default group stays what it was (destroying it leaves the
    new one alone): call the result's methods, or pass it as `group=`."""
    return _group(group).shrink()


def set_compression(kind, group=None):
    """Compresses what this rank sends on group (default: the default group)
    from now on: kind is hcomm.CompressionType.NONE, FP16, BF16, DELTA,
    FP16|DELTA or BF16|DELTA (or the config value, "fp16,delta"). Call it at
    the same point on every rank. See Communicator.set_compression."""
    _group(group).set_compression(kind)


def send(tensor, dst, tag=0, group=None, stream=None):
    """Sends tensor to rank dst (of group). stream=s: queued on s, returns a
    Work at once (matches only a recv on the same stream of dst)."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "send").send(tensor, dst, tag), stream, False)
    _group(group).send(tensor, dst, tag)


def recv(tensor, src=None, tag=0, group=None, stream=None):
    """Receives into tensor from src (None: any source; tag None: any tag);
    returns the sender's rank. A larger message raises MismatchError.
    stream=s: queued on s, returns a Work at once."""
    stream = _routed(stream, group)
    if stream is not None:
        if stream is _CURRENT and src is None:
            raise _invalid("recv inside a scheduler task needs src: a stream's receive does not "
                           "report its sender")
        work = _on_stream(stream, group, "recv").recv(tensor, src, tag)
        if stream is not _CURRENT:
            return work
        work.wait()
        return src
    return _group(group).recv(tensor, src, tag)


def isend(tensor, dst, tag=0, group=None):
    """Starts a send; returns a Request (wait(), is_completed())."""
    return _group(group).isend(tensor, dst, tag)


def irecv(tensor, src=None, tag=0, group=None):
    """Starts a receive; returns a Request (wait(), is_completed(), .source)."""
    return _group(group).irecv(tensor, src, tag)


def wait_all(requests):
    """Waits for every request, even after one fails; raises the first error."""
    first = None
    for req in requests:
        try:
            req.wait()
        except HcommError as e:
            if first is None:
                first = e
    if first is not None:
        raise first


class _Current:
    """The stream of the scheduler task this thread runs (see _routed)."""


_CURRENT = _Current()


def _routed(stream, group):
    """stream, or inside a scheduler task with neither stream nor group
    given, the task's stream (as _CURRENT); else None."""
    if stream is None and group is None and current_stream() is not None:
        return _CURRENT
    return stream


def _finish(work, stream, async_op):
    """A call queued on a stream: its Work for stream= or async_op; else (a
    blocking call inside a task) None once it has run."""
    if stream is not _CURRENT or async_op:
        return work
    work.wait()
    return None


# Collectives: async_op=True returns a Work (all_reduce: a Request, or a
# Work while other async collectives are pending) with wait() and
# is_completed(); otherwise they return None once done. stream=s queues the
# collective on hcomm.Stream s instead and returns a Work at once.


def _on_stream(stream, group, what):
    """The stream a call was given, checked against its group argument."""
    if stream is _CURRENT:
        return current_stream()
    if not isinstance(stream, Stream):
        raise _invalid("%s: stream must be an hcomm.Stream, not %s"
                       % (what, type(stream).__name__))
    if group is not None and group is not stream.group:
        raise _invalid("%s: group is not the group of the stream (leave group out with "
                       "stream=)" % what)
    return stream


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False, stream=None):
    """tensor = op over every rank's tensor, in place on every rank."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "all_reduce").all_reduce(tensor, op), stream, async_op)
    return _group(group).all_reduce(tensor, op, async_op)


def broadcast(tensor, src, group=None, async_op=False, stream=None):
    """Every rank's tensor = rank src's tensor."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "broadcast").broadcast(tensor, src), stream, async_op)
    return _group(group).broadcast(tensor, src, async_op)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False, stream=None):
    """Rank dst's tensor = op over every rank's tensor."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "reduce").reduce(tensor, dst, op), stream, async_op)
    return _group(group).reduce(tensor, dst, op, async_op)


def all_gather(out, tensor, group=None, async_op=False, stream=None):
    """out (size * len(tensor) elements) = every rank's tensor in rank order."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "all_gather").all_gather(out, tensor), stream, async_op)
    return _group(group).all_gather(out, tensor, async_op)


def reduce_scatter(out, inp, op=ReduceOp.SUM, group=None, async_op=False, stream=None):
    """out on rank r = op over every rank's block r of inp (size * len(out))."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "reduce_scatter").reduce_scatter(out, inp, op), stream, async_op)
    return _group(group).reduce_scatter(out, inp, op, async_op)


def all_to_all(out, inp, group=None, async_op=False, stream=None):
    """Block j of inp goes to rank j; block i of out comes from rank i."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "all_to_all").all_to_all(out, inp), stream, async_op)
    return _group(group).all_to_all(out, inp, async_op)


def gather(tensor, out=None, dst=0, group=None, async_op=False, stream=None):
    """Rank dst's out = every rank's tensor in rank order (out only on dst)."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "gather").gather(tensor, out, dst), stream, async_op)
    return _group(group).gather(tensor, out, dst, async_op)


def scatter(out, inp=None, src=0, group=None, async_op=False, stream=None):
    """Rank r's out = block r of rank src's inp (inp only on src)."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "scatter").scatter(out, inp, src), stream, async_op)
    return _group(group).scatter(out, inp, src, async_op)


def barrier(group=None, async_op=False, stream=None):
    """Returns once every rank of group has entered it."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "barrier").barrier(), stream, async_op)
    return _group(group).barrier(async_op)


def _at_exit():
    """Safety net for programs that forget hcomm.destroy()/close(); leaves
    alone what a daemon thread is still using (see _destroy_all)."""
    _close_all_streams()
    _destroy_all()
    _close_all_channels()


_atexit.register(_at_exit)
# Ctrl-C (any signal handler that raises) ends a blocking call of the main
# thread within 100 ms instead of at its deadline.
_native.hcomm_py_enable_interrupts(_threading.main_thread().ident)
