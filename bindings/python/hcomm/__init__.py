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

torch.distributed's rules hold: dst, src and root are ranks of the whole
job whatever `group` is, `group` may be a torch.distributed group, and
ranks that new_group() leaves out get GroupMember.NON_GROUP_MEMBER, which
raises when used. Where torch.distributed is initialised and hcomm.init()
was not called, the first call joins through torch's store; `import
hcomm.torch` registers the torch backend "hcomm" (docs/torch.md).

Every blocking call ends by the communicator's timeout_ms. Errors raise
hcomm.HcommError (a RuntimeError; attribute `status`; the message starts
"hcomm operation <what>: ") or a subclass per status code;
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
import os as _os
import sys as _sys
import threading as _threading

from . import _extras
from . import _native
from . import _torch_join
from ._channel import SharedMemoryChannel
from ._channel import _close_all as _close_all_channels
from ._communicator import (
    ANY_SOURCE,
    ANY_TAG,
    UNDEFINED,
    Communicator,
    CompressionType,
    InJob,
    ReduceOp,
    Request,
    Work,
)
from ._communicator import _destroy_all
from ._extras import P2POp
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
    OutOfMemError,
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
    "get_rank", "get_world_size", "get_backend", "new_group", "split", "shrink",
    "GroupMember",
    "set_compression", "CompressionType",
    # point-to-point
    "send", "recv", "isend", "irecv", "wait_all", "Request",
    # collectives
    "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
    "all_to_all", "all_to_all_single", "gather", "scatter", "barrier", "monitored_barrier",
    "ReduceOp", "Work",
    # torch.distributed's other calls
    "batch_isend_irecv", "P2POp", "all_gather_object", "broadcast_object_list",
    # streams
    "Stream", "Event", "StreamWork",
    # scheduler
    "CommunicationScheduler", "Scheduler", "Task", "set_scheduler", "current_stream",
    # objects and constants
    "Communicator", "SharedMemoryChannel", "ANY_SOURCE", "ANY_TAG", "UNDEFINED",
    "version", "__version__",
    # errors
    "Status", "HcommError", "InvalidArgumentError", "NoDeviceError",
    "OutOfMemoryError", "OutOfMemError", "TimeoutError", "PeerFailureError", "MismatchError",
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

    Where torch.distributed is initialised and no store address is given
    (neither store_addr nor HCOMM_STORE_ADDR), the job joins through torch's
    store instead of MASTER_ADDR:MASTER_PORT (which torch's store holds),
    with torch's rank and world size.
    """
    global _default
    with _default_lock:
        if _default is not None and not _default.closed:
            raise _invalid("hcomm.init: already initialised (rank %d of %d); call "
                           "hcomm.destroy() first" % (_default.rank, _default.size))
        if (store_addr is None and not _os.environ.get("HCOMM_STORE_ADDR")
                and _torch_join.torch_distributed() is not None):
            comm = _torch_join.join_torch_job(timeout_ms=timeout_ms, job_token=job_token,
                                              **config)
            if rank is not None and rank != comm.rank or (
                    world_size is not None and world_size != comm.size):
                comm.destroy()
                raise _invalid("hcomm.init: rank %r / world_size %r differ from torch."
                               "distributed's %d / %d; leave them out to join torch's job"
                               % (rank, world_size, comm.rank, comm.size))
            _default = comm
            _torch_join.mirror_all(comm)
            return comm
        comm = Communicator.from_config(rank=rank, world_size=world_size,
                                        store_addr=store_addr, timeout_ms=timeout_ms,
                                        job_token=job_token, **config)
        _default = comm
        return comm


def _join_backend(store, rank, size, timeout_ms):
    """The default group of torch's "hcomm" backend (hcomm.torch): joins
    through the store torch hands the backend, and becomes hcomm's default
    group unless hcomm.init() made one already (then that is it)."""
    global _default
    with _default_lock:
        if _default is not None and not _default.closed:
            if (_default.rank, _default.size) != (rank, size):
                raise _invalid("torch.distributed's job (rank %d of %d) is not hcomm's "
                               "default group (rank %d of %d)"
                               % (rank, size, _default.rank, _default.size))
            return _default
        comm = _torch_join.join(store, rank, size, timeout_ms=timeout_ms)
        _default = comm
        return comm


def _joined_default():
    """The default group when there is one (no join)."""
    comm = _default
    return None if comm is None or comm.closed else comm


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
    return init(rank=None if rank == -1 else rank,
                world_size=None if world_size == -1 else world_size,
                store_addr=store_addr, timeout_ms=_ms(timeout, "timeout"), **config)


def _ms(timeout, what):
    """A datetime.timedelta (or None) in milliseconds."""
    if timeout is None:
        return None
    if not isinstance(timeout, _datetime.timedelta):
        raise _invalid("%s must be a datetime.timedelta, not %s"
                       % (what, type(timeout).__name__))
    return max(1, int(timeout.total_seconds() * 1000))


def destroy_process_group(group=None):
    """destroy(), as torch.distributed names it."""
    destroy(group)


def is_initialized():
    """True between init() and destroy()."""
    return _default is not None and not _default.closed


def get_default_group():
    """The communicator made by init() (or, where torch.distributed is
    initialised and init() was not called, the one joined through torch's
    store now)."""
    comm = _default
    if comm is not None and not comm.closed:
        return comm
    if _torch_join.torch_distributed() is not None:
        with _default_lock:
            joined = _default is not None and not _default.closed
        if not joined:
            try:
                init()
            except InvalidArgumentError:
                pass  # another thread joined meanwhile
        comm = _default
        if comm is not None and not comm.closed:
            return comm
    raise _invalid("hcomm is not initialised: hcomm.init() was not called, or the default "
                   "group has been destroyed (hcomm.destroy()); call hcomm.init() (or "
                   "torch.distributed.init_process_group) first")


class _NonGroupMember:
    """What new_group() returns on ranks it leaves out. Any use raises."""

    def __repr__(self):
        return "hcomm.GroupMember.NON_GROUP_MEMBER"

    def __reduce__(self):
        return (_non_group_member, ())


def _non_group_member():
    return GroupMember.NON_GROUP_MEMBER


class GroupMember:
    """As torch.distributed.GroupMember: NON_GROUP_MEMBER is what new_group()
    gives a rank it does not list; passing it as group raises
    InvalidArgumentError (None would silently mean the whole job)."""

    NON_GROUP_MEMBER = _NonGroupMember()


def _group(group):
    """The communicator a `group` argument names: None (the default group),
    an hcomm communicator, a torch.distributed group, or hcomm.torch's
    process group."""
    if group is None:
        return get_default_group()
    if isinstance(group, Communicator):
        return group
    if group is GroupMember.NON_GROUP_MEMBER or group is _torch_non_member():
        raise _invalid("group: this rank is not a member of the group (new_group() returned "
                       "GroupMember.NON_GROUP_MEMBER here); only the ranks it lists may use it")
    comm = getattr(group, "_hcomm_communicator", None)
    if callable(comm):
        return comm()
    comm = _torch_join.group_of(group)
    if comm is not None:
        return comm
    raise _invalid("group must be a communicator from hcomm.init/new_group/split, a "
                   "torch.distributed group, or None for the default group, not %s"
                   % type(group).__name__)


def _torch_non_member():
    dist = _sys.modules.get("torch.distributed")
    member = getattr(dist, "GroupMember", None)
    return getattr(member, "NON_GROUP_MEMBER", None)


def _job(rank, comm, what):
    """rank (a rank of the job) for a call on comm (see InJob)."""
    return None if rank is None else InJob(rank, comm, what)


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


def get_backend(group=None):
    """"hcomm" (torch.distributed.get_backend's question, for code that asks)."""
    _group(group)
    return "hcomm"


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, group=None):
    """A group of `ranks` (ranks of the job; None: all of them); rank i of
    the new group is ranks[i]. Collective over the default group (every rank
    calls it with the same list, as in torch.distributed); ranks not listed
    get GroupMember.NON_GROUP_MEMBER, which raises when used. timeout (a
    datetime.timedelta) becomes the group's timeout_ms; backend and
    pg_options are accepted for torch's signature and ignored. group:
    another parent than the default group (ranks still of the job)."""
    parent = _group(group)
    if ranks is None:
        ranks = parent.job_ranks
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise _invalid("new_group: ranks must be a list of ints, not %s" % type(ranks).__name__)
    timeout_ms = _ms(timeout, "new_group: timeout")
    child = parent.new_group([_job(r, parent, "new_group: rank") for r in ranks])
    if child is None:
        return GroupMember.NON_GROUP_MEMBER
    if timeout_ms is not None:
        child.set_timeout(timeout_ms)
    return child


def split(color, key=0, group=None):
    """Ranks with the same color form a group ordered by (key, rank); color
    None or UNDEFINED gets GroupMember.NON_GROUP_MEMBER. Collective."""
    child = _group(group).split(color, key)
    return GroupMember.NON_GROUP_MEMBER if child is None else child


def shrink(group=None):
    """After a rank failed (PeerFailureError): the survivors of group (default:
    the default group) agree on who is gone and get a new communicator of
    the living ranks, renumbered in their old order. Collective over the
    survivors. The default group stays what it was (destroying it leaves the
    new one alone): call the result's methods, or pass it as `group=`; its
    job_ranks are the survivors' ranks in the job."""
    return _group(group).shrink()


def set_compression(kind, group=None):
    """Compresses what this rank sends on group (default: the default group)
    from now on: kind is hcomm.CompressionType.NONE, FP16, BF16, DELTA,
    FP16|DELTA or BF16|DELTA (or the config value, "fp16,delta"). Call it at
    the same point on every rank. See Communicator.set_compression."""
    _group(group).set_compression(kind)


# dst, src and root below are ranks of the job whatever `group` is
# (torch.distributed's rule); recv and Request.source tell the sender's rank
# in the job.


def send(tensor, dst, tag=0, group=None, stream=None):
    """Sends tensor to rank dst. stream=s: queued on s, returns a Work at
    once (matches only a recv on the same stream of dst)."""
    stream = _routed(stream, group)
    if stream is not None:
        s = _on_stream(stream, group, "send")
        return _finish(s.send(tensor, _job(dst, s.group, "dst"), tag), stream, False)
    comm = _group(group)
    comm.send(tensor, _job(dst, comm, "dst"), tag)


def recv(tensor, src=None, tag=0, group=None, stream=None):
    """Receives into tensor from src (None: any source; tag None: any tag);
    returns the sender's rank. A larger message raises MismatchError.
    stream=s: queued on s, returns a Work at once."""
    stream = _routed(stream, group)
    if stream is not None:
        if stream is _CURRENT and src is None:
            raise _invalid("recv inside a scheduler task needs src: a stream's receive does not "
                           "report its sender")
        s = _on_stream(stream, group, "recv")
        work = s.recv(tensor, _job(src, s.group, "src"), tag)
        if stream is not _CURRENT:
            return work
        work.wait()
        return src
    comm = _group(group)
    return comm._job_rank(comm.recv(tensor, _job(src, comm, "src"), tag))


def isend(tensor, dst, tag=0, group=None):
    """Starts a send; returns a Request (wait(), is_completed())."""
    comm = _group(group)
    req = comm.isend(tensor, _job(dst, comm, "dst"), tag)
    req._source_map = comm._job_rank
    return req


def irecv(tensor, src=None, tag=0, group=None):
    """Starts a receive; returns a Request (wait(), is_completed(), .source:
    the sender's rank in the job)."""
    comm = _group(group)
    req = comm.irecv(tensor, _job(src, comm, "src"), tag)
    req._source_map = comm._job_rank
    return req


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
    if group is not None and _group(group) is not stream.group:
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
        s = _on_stream(stream, group, "broadcast")
        return _finish(s.broadcast(tensor, _job(src, s.group, "src")), stream, async_op)
    comm = _group(group)
    return comm.broadcast(tensor, _job(src, comm, "src"), async_op)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False, stream=None):
    """Rank dst's tensor = op over every rank's tensor."""
    stream = _routed(stream, group)
    if stream is not None:
        s = _on_stream(stream, group, "reduce")
        return _finish(s.reduce(tensor, _job(dst, s.group, "dst"), op), stream, async_op)
    comm = _group(group)
    return comm.reduce(tensor, _job(dst, comm, "dst"), op, async_op)


def all_gather(out, tensor, group=None, async_op=False, stream=None):
    """out (size * len(tensor) elements, or a list of size tensors shaped as
    tensor) = every rank's tensor in rank order."""
    if isinstance(out, (list, tuple)):
        return _extras.all_gather_list(_group(group), out, tensor, async_op, stream)
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "all_gather").all_gather(out, tensor), stream, async_op)
    return _group(group).all_gather(out, tensor, async_op)


def reduce_scatter(out, inp, op=ReduceOp.SUM, group=None, async_op=False, stream=None):
    """out on rank r = op over every rank's block r of inp (size * len(out)
    elements, or a list of size tensors shaped as out)."""
    if isinstance(inp, (list, tuple)):
        return _extras.reduce_scatter_list(_group(group), out, inp, op, async_op, stream)
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "reduce_scatter").reduce_scatter(out, inp, op), stream, async_op)
    return _group(group).reduce_scatter(out, inp, op, async_op)


def all_to_all(out, inp, group=None, async_op=False, stream=None):
    """Block j of inp goes to rank j; block i of out comes from rank i. With
    lists of tensors (one per rank, sizes may differ), tensor j of inp goes
    to rank j and tensor i of out comes from rank i."""
    if isinstance(out, (list, tuple)) or isinstance(inp, (list, tuple)):
        return _extras.all_to_all_list(_group(group), out, inp, async_op, stream)
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "all_to_all").all_to_all(out, inp), stream, async_op)
    return _group(group).all_to_all(out, inp, async_op)


def all_to_all_single(out, inp, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False):
    """torch.distributed.all_to_all_single: inp is split along its first
    dimension by input_split_sizes (None: evenly), part j going to rank j;
    out is filled likewise by output_split_sizes from each rank in order."""
    return _extras.all_to_all_single(_group(group), out, inp, output_split_sizes,
                                     input_split_sizes, async_op)


def gather(tensor, out=None, dst=0, group=None, async_op=False, stream=None):
    """Rank dst's out = every rank's tensor in rank order (out only on dst; a
    list of size tensors shaped as tensor, or one of size * len(tensor))."""
    if isinstance(out, (list, tuple)):
        return _extras.gather_list(_group(group), tensor, out, dst, async_op, stream)
    stream = _routed(stream, group)
    if stream is not None:
        s = _on_stream(stream, group, "gather")
        return _finish(s.gather(tensor, out, _job(dst, s.group, "dst")), stream, async_op)
    comm = _group(group)
    return comm.gather(tensor, out, _job(dst, comm, "dst"), async_op)


def scatter(out, inp=None, src=0, group=None, async_op=False, stream=None):
    """Rank r's out = block r of rank src's inp (inp only on src; a list of
    size tensors shaped as out, or one of size * len(out))."""
    if isinstance(inp, (list, tuple)):
        return _extras.scatter_list(_group(group), out, inp, src, async_op, stream)
    stream = _routed(stream, group)
    if stream is not None:
        s = _on_stream(stream, group, "scatter")
        return _finish(s.scatter(out, inp, _job(src, s.group, "src")), stream, async_op)
    comm = _group(group)
    return comm.scatter(out, inp, _job(src, comm, "src"), async_op)


def barrier(group=None, async_op=False, stream=None):
    """Returns once every rank of group has entered it."""
    stream = _routed(stream, group)
    if stream is not None:
        return _finish(_on_stream(stream, group, "barrier").barrier(), stream, async_op)
    return _group(group).barrier(async_op)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier that ends by `timeout` (a datetime.timedelta; None: the
    group's timeout_ms) with TimeoutError naming the ranks that did not
    arrive (all of them: wait_all_ranks is accepted for torch's signature)."""
    return _extras.monitored_barrier(_group(group), _ms(timeout, "monitored_barrier: timeout"))


def batch_isend_irecv(p2p_op_list):
    """Starts every P2POp of the list; returns their Requests in order."""
    return _extras.batch_isend_irecv(p2p_op_list, isend, irecv)


def all_gather_object(object_list, obj, group=None):
    """object_list[i] = rank i's obj (any picklable object). Collective."""
    _extras.all_gather_object(_group(group), object_list, obj)


def broadcast_object_list(object_list, src=0, group=None):
    """Every rank's object_list = rank src's (picklable objects; the lists
    have the same length everywhere). Collective."""
    comm = _group(group)
    _extras.broadcast_object_list(comm, object_list, _job(src, comm, "src"))


def _at_exit():
    """Safety net for programs that forget hcomm.destroy()/close(); leaves
    alone what a daemon thread is still using (see _destroy_all)."""
    _close_all_streams()
    _destroy_all()
    _close_all_channels()


_atexit.register(_at_exit)
# torch.distributed.new_group is wrapped where torch is loaded already (see
# _torch_join); otherwise at the first join through torch's store.
_torch_join.wrap_new_group()
# Ctrl-C (any signal handler that raises) ends a blocking call of the main
# thread within 100 ms instead of at its deadline.
_native.hcomm_py_enable_interrupts(_threading.main_thread().ident)
