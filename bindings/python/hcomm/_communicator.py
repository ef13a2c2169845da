"""Communicators (process groups), requests and reduce operations.

A Communicator owns one hcomm_comm_t; a Request owns one hcomm_request_t.
Both are closed explicitly (destroy()/close(), or a `with` block); their
finalizers only catch what was forgotten. A closed handle is dropped (set to
None), so a later call raises InvalidArgumentError instead of touching freed
memory; and every call uses the handle inside an in-use section
(_handle.Handle), so a destroy or close on another thread waits for the
calls in progress instead of freeing the handle under them.
"""

import array
import collections
import enum
import functools
import operator
import os
import threading
import weakref

from . import _native as _n
from . import _tensors
from ._handle import Handle, c_string
from .errors import HcommError, Status, TimeoutError, _invalid

ANY_SOURCE = _n.HCOMM_ANY_SOURCE
ANY_TAG = _n.HCOMM_ANY_TAG
UNDEFINED = _n.HCOMM_UNDEFINED

_INT_MAX = 2**31 - 1

# Every live communicator without a parent; destroyed at exit (safety net).
_roots = weakref.WeakSet()


class ReduceOp(enum.IntEnum):
    """Reductions of all_reduce, reduce and reduce_scatter."""

    SUM = _n.HCOMM_SUM
    PROD = _n.HCOMM_PROD
    MIN = _n.HCOMM_MIN
    MAX = _n.HCOMM_MAX
    AVG = _n.HCOMM_AVG  # Divides by the group size (integer types truncate).


def _op(op):
    if isinstance(op, str):
        try:
            return ReduceOp[op.upper()]
        except KeyError:
            pass
    elif not isinstance(op, bool):  # True would pass for PROD (1)
        try:
            return ReduceOp(operator.index(op))  # 1.0 would too
        except (ValueError, TypeError):
            pass
    raise _invalid("unknown reduce op %r: use hcomm.ReduceOp.SUM, PROD, MIN, MAX or AVG" % (op,))


class CompressionType(enum.IntFlag):
    """What set_compression turns on (the config key `compression`).

    FP16 or BF16: FLOAT32 data travels as 16-bit floats (reductions still
    accumulate in float32; other dtypes are never compressed); at most one
    of the two. DELTA: point-to-point and broadcast send only what changed
    since the previous message of the same size, losslessly. Combine with
    `|`: FP16 | DELTA, BF16 | DELTA. NONE turns everything off.
    """

    NONE = 0
    FP16 = 1
    BF16 = 2
    DELTA = 4


# A plain int: ~ of an IntFlag keeps only the flags' own bits.
_COMPRESSION_BITS = int(CompressionType.FP16 | CompressionType.BF16 | CompressionType.DELTA)
_COMPRESSION_USE = ("use hcomm.CompressionType.NONE, FP16, BF16, DELTA, FP16|DELTA or "
                    "BF16|DELTA (or the config value: \"none\", \"fp16\", \"bf16\", "
                    "\"delta\", \"fp16,delta\", \"bf16,delta\")")


def _compression(kind):
    """The value of the config key `compression` for kind: a CompressionType
    (or its int value), or the config value itself ("fp16,delta"), as
    hcomm.init(compression=...) takes it. Checked here so that the error
    names the argument; C checks it again."""
    if isinstance(kind, str):
        items = [item.strip().lower() for item in kind.split(",")]
        flags = CompressionType.NONE
        for item in items:
            bit = {"fp16": CompressionType.FP16, "bf16": CompressionType.BF16,
                   "delta": CompressionType.DELTA}.get(item)
            if item == "none" and len(items) == 1:
                bit = CompressionType.NONE
            if bit is None or (bit and flags & bit):
                raise _invalid("set_compression: kind %r is not a compression: %s"
                               % (kind, _COMPRESSION_USE))
            flags |= bit
    elif isinstance(kind, bool):  # True would pass for FP16 (1)
        raise _invalid("set_compression: kind must be an hcomm.CompressionType, not bool: %s"
                       % _COMPRESSION_USE)
    else:
        try:
            v = operator.index(kind)  # 1.0 would pass too
        except TypeError:
            raise _invalid("set_compression: kind must be an hcomm.CompressionType, not %s: %s"
                           % (type(kind).__name__, _COMPRESSION_USE)) from None
        if v < 0 or v & ~_COMPRESSION_BITS:
            raise _invalid("set_compression: kind %d has bits that are no "
                           "hcomm.CompressionType (NONE=0, FP16=1, BF16=2, DELTA=4)" % v)
        flags = CompressionType(v)
    if flags & CompressionType.FP16 and flags & CompressionType.BF16:
        shown = ("hcomm.CompressionType.%s" % kind.name if isinstance(kind, CompressionType)
                 else repr(kind))
        raise _invalid("set_compression: kind %s sets both FP16 and BF16; data travels in at "
                       "most one 16-bit format (FP16|DELTA and BF16|DELTA are allowed)" % shown)
    names = [name for bit, name in ((CompressionType.FP16, "fp16"),
                                    (CompressionType.BF16, "bf16"),
                                    (CompressionType.DELTA, "delta")) if flags & bit]
    return ",".join(names) or "none"


def _int(value, what, lo=-_INT_MAX - 1, hi=_INT_MAX):
    try:
        v = operator.index(value)
    except TypeError:
        raise _invalid("%s must be an int, not %s" % (what, type(value).__name__)) from None
    if not lo <= v <= hi:
        raise _invalid("%s %d is out of range [%d, %d]" % (what, v, lo, hi))
    return v


# A collective that ends before it reaches the library (this layer's own
# checks refuse a read-only array, say, or an argument raises on the way)
# misses its turn, while the other ranks' calls of it take theirs: so that
# it still takes its turn among the communicator's collectives there
# (their call then fails at once with MismatchError naming this rank, and
# later calls stay paired), the library is handed the same collective with
# an argument it refuses in turn (hcomm.h: a refused call takes its turn).
# Whatever is raised inside the call's `with self._use` section (the
# library's own errors) has taken the turn already.
_REFUSE = {
    "all_reduce": lambda h: _n.hcomm_allreduce(None, None, 0, -1, 0, h),
    "broadcast": lambda h: _n.hcomm_broadcast(None, 0, -1, 0, h),
    "reduce": lambda h: _n.hcomm_reduce(None, None, 0, -1, 0, 0, h),
    "all_gather": lambda h: _n.hcomm_allgather(None, None, 0, -1, h),
    "reduce_scatter": lambda h: _n.hcomm_reduce_scatter(None, None, 0, -1, 0, h),
    "all_to_all": lambda h: _n.hcomm_alltoall(None, None, 0, -1, h),
    "gather": lambda h: _n.hcomm_gather(None, None, 0, -1, 0, h),
    "scatter": lambda h: _n.hcomm_scatter(None, None, 0, -1, 0, h),
    "split": lambda h: _n.hcomm_comm_split(h, -2, 0),
    "new_group": lambda h: _n.hcomm_comm_create_group(h, [-1]),
}


def _collective(method):
    refuse = _REFUSE[method.__name__]

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except BaseException as e:
            if not getattr(e, "_hcomm_in_section", False) and not self._use.closed:
                def refusal():
                    with self._use as h:
                        refuse(h)
                try:
                    self._in_turn(refusal)  # after the async collectives pending
                except HcommError:
                    pass  # the refusal expected (or the communicator gone meanwhile)
            raise

    return call


# Forks this process has come out of (as hcomm::ForkCount() in C): what
# tells a fork's child from the process that queued a collective, without a
# getpid() system call (about 1 us here) on every collective.
_forks = 0


def _count_fork():
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_count_fork)


def _taken(e):
    """Marks e as raised after its collective took its turn (see _collective)."""
    try:
        e._hcomm_in_section = True
    except AttributeError:
        pass


class Work:
    """A collective started with async_op=True (all_reduce's is a Request,
    unless other async collectives were still pending).

    It runs on the communicator's collective thread after the collectives
    called before it, each in its turn, so that every rank runs them in the
    order it called them; a collective called without async_op while some
    are pending waits for them and runs after them. wait() blocks until it
    has run and raises its error, if any (each runs under the communicator's
    timeout_ms); is_completed() never blocks. The tensors must stay
    untouched until then; the Work keeps them alive meanwhile. A process
    forked while one was pending cannot wait for it (InvalidArgumentError).
    """

    def __init__(self, keep):
        self._keep = keep
        self._event = threading.Event()
        self._forks = _forks
        self._result = None
        self._error = None
        # As a Request's: nothing to tell for a collective.
        self.source = None
        self.tag = None
        self.count = None

    def _finish(self, result, error):
        self._result, self._error, self._keep = result, error, None
        self._event.set()

    def _outcome(self):
        if self._forks != _forks:
            raise _invalid("this collective was started before the process forked; it runs "
                           "in the parent, not here")
        self._event.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self):
        """Blocks until the collective has run; returns True or raises its error."""
        self._outcome()
        return True

    def is_completed(self):
        """True once the collective has run (successfully or not). Never blocks."""
        return self._event.is_set()

    def get_future(self):
        """A future that completes (result None, or this call's error) when it
        ends: a torch.futures.Future where torch is loaded, else a
        concurrent.futures.Future."""
        from ._extras import future_of
        return future_of(self)

    def __repr__(self):
        return "<hcomm.Work %s>" % ("done" if self._event.is_set() else "pending")


class _Turns:
    """A communicator's async collectives: a queue that one thread at a time
    (started when the queue fills, gone when it empties) works through in
    order."""

    def __init__(self):
        self.lock = threading.Lock()  # a plain `with` on it is cheaper than on cv
        self.cv = threading.Condition(self.lock)
        self.items = collections.deque()
        self.pending = 0  # queued or running; guarded by lock
        self.running = False  # a thread is working through items
        self.forks = _forks

    def add(self, fn, work):
        with self.cv:
            self.items.append((fn, work))
            self.pending += 1
            if self.running:
                return
            self.running = True
        try:
            threading.Thread(target=self._drain, name="hcomm collectives", daemon=True).start()
        except RuntimeError:  # no thread to be had: run them here, in order
            self._drain()

    def _drain(self):
        while True:
            with self.cv:
                if not self.items:
                    self.running = False
                    return
                fn, work = self.items.popleft()
            try:
                result, error = fn(), None
            except BaseException as e:  # goes to the Work's wait()
                result, error = None, e
                _taken(e)
            work._finish(result, error)
            with self.cv:
                self.pending -= 1
                self.cv.notify_all()

    def wait_idle(self):
        with self.cv:
            while self.pending:
                self.cv.wait()


def _src(src):
    return ANY_SOURCE if src is None else _int(src, "src")


class InJob:
    """A rank of the whole job given where a group's rank is expected: read
    (through operator.index, so wherever a rank argument goes) as that
    rank's number in `comm`. The module's functions pass dst/src/root this
    way: torch.distributed's rule that they are ranks of the job whatever
    the group."""

    __slots__ = ("rank", "comm", "what")

    def __init__(self, rank, comm, what):
        self.rank, self.comm, self.what = rank, comm, what

    def __index__(self):
        return self.comm._group_rank(_int(self.rank, self.what), self.what)

    def __repr__(self):
        return "job rank %r" % (self.rank,)


def _recv_tag(tag):
    return ANY_TAG if tag is None else _int(tag, "tag")


class Request:
    """A nonblocking operation: isend, irecv, or all_reduce(async_op=True).

    wait() blocks (up to the communicator's timeout_ms) until it is done and
    raises its error, if any; is_completed() never blocks. After completion,
    `source` (for a send: the destination), `tag` and `count` (elements)
    describe the message. The tensor must stay untouched until completion;
    the request keeps it alive meanwhile. Any thread may call any method;
    close() waits for a wait() in progress on another thread.
    """

    def __init__(self, comm, handle, keep):
        self._comm = comm
        self._use = Handle(handle, "the request has been closed")
        self._keep = keep  # memoryviews: the tensors stay alive and unresizable.
        self._lock = threading.Lock()
        self._done = False
        self._error = None
        self.source = None
        self.tag = None
        self.count = None
        # What `source` is told in: the communicator's ranks, or (set by the
        # module's functions) the job's.
        self._source_map = None

    def _end(self, h, error):
        """Records how the operation ended (inside a section on h); the first
        thread to see the end records it."""
        with self._lock:
            if self._done:
                return
            if error is None:
                try:
                    self.source, self.tag, self.count = _n.hcomm_request_info(h)
                    if self._source_map is not None:
                        self.source = self._source_map(self.source)
                except HcommError:
                    pass
            self._error = error
            self._keep = None
            self._done = True

    def _free(self, h):
        """Releases h (for Handle.close). The memory of an operation that has
        not ended goes to the communicator: C may still write it."""
        keep, self._keep = self._keep, None
        if not self._done and keep is not None and self._comm is not None:
            self._comm._orphan(keep)
        _n.hcomm_request_free(h)

    def _enter(self):
        """A section on the handle, or None when the request has ended (and
        been freed meanwhile); InvalidArgumentError when it was closed."""
        h = self._use.enter()
        if h is None and not self._done:
            raise _invalid("the request has been closed")
        return h

    def wait(self):
        """Blocks until the operation is done; returns True or raises its error.

        On hcomm.TimeoutError, or a KeyboardInterrupt (Ctrl-C) that ended the
        wait, the operation is still pending and wait() may be called again.
        """
        if not self._done:
            h = self._enter()
            if h is not None:
                try:
                    try:
                        _n.hcomm_wait(h)
                    except TimeoutError:
                        raise
                    except HcommError as e:
                        self._end(h, e)
                    else:
                        self._end(h, None)
                finally:
                    self._use.exit()
                self._use.close(self._free)  # Done: the C request is no longer needed.
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        """True once the operation has ended (successfully or not). Never blocks."""
        if self._done:
            return True
        h = self._enter()
        if h is None:
            return True
        try:
            try:
                done = _n.hcomm_test(h)
            except HcommError as e:
                if e.status == Status.ERR_INVALID_ARGUMENT:
                    raise
                self._end(h, e)  # Ended with an error; wait() raises it.
                done = True
            else:
                if done:
                    self._end(h, None)
        finally:
            self._use.exit()
        if done:
            self._use.close(self._free)
        return bool(done)

    def get_future(self):
        """A future that completes (result None, or this call's error) when it
        ends: a torch.futures.Future where torch is loaded, else a
        concurrent.futures.Future."""
        from ._extras import future_of
        return future_of(self)

    def close(self):
        """Releases the request. A pending one is cancelled if no data reached it;
        otherwise it completes in the background and its tensor is kept alive
        until the communicator is destroyed."""
        self._use.close(self._free)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        state = "done" if self._done else ("closed" if self._use.closed else "pending")
        return "<hcomm.Request %s>" % state


class Communicator:
    """A group of ranks (torch.distributed's process group).

    Made by hcomm.init() (all ranks of the job), new_group() or split().
    Every operation of the module (hcomm.send, hcomm.all_reduce, ...) is a
    method here without the `group` argument. destroy() (or a `with` block)
    releases it; groups made from it are destroyed first. Calls may come
    from several threads (collectives one at a time); destroy() waits for
    calls in progress, and abort() ends them early.
    """

    def __init__(self, handle, parent=None):
        self._use = Handle(handle, "the communicator has been destroyed")
        self._parent = parent  # Groups use their parent's connections.
        self._children = weakref.WeakSet()
        self._orphans = []
        self._turns = _Turns()
        # iallreduces started here (weak references), oldest first, pruned
        # as they end; guarded by self._turns.lock.
        self._started = collections.deque()
        self._rank = _n.hcomm_comm_rank(handle)
        self._size = _n.hcomm_comm_size(handle)
        # The job's rank of each rank here (None: the same numbers, as in the
        # communicator of the job) and the reverse, for InJob.
        self._job_ranks = None
        self._of_job = None
        if parent is None:
            _roots.add(self)
        else:
            parent._children.add(self)

    @classmethod
    def from_config(cls, **config):
        """hcomm_comm_init with the given config keys (None: not set; the rest
        comes from the environment). Collective over the job; does not touch
        the default group."""
        cfg_items = []
        for key, value in config.items():
            if value is None:
                continue
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            elif isinstance(value, bool):
                value = "1" if value else "0"
            key = c_string(str(key), "config key %r" % (key,))
            cfg_items.append((key, c_string(str(value), "config value of %r" % key)))
        if not cfg_items:
            return cls(_n.hcomm_comm_init(None))
        cfg = _n.hcomm_config_create()
        try:
            for key, value in cfg_items:
                _n.hcomm_config_set(cfg, key, value)
            handle = _n.hcomm_comm_init(cfg)
        finally:
            _n.hcomm_config_destroy(cfg)
        return cls(handle)

    # ---- state -------------------------------------------------------------

    def _live(self, value):
        if self._use.closed:
            raise _invalid("the communicator has been destroyed")
        return value

    @property
    def rank(self):
        """This process's rank in the group."""
        return self._live(self._rank)

    @property
    def size(self):
        """The number of ranks in the group."""
        return self._live(self._size)

    def get_rank(self):
        return self._live(self._rank)

    @property
    def job_ranks(self):
        """The rank in the job (the communicator init() made) of each rank
        here, in order."""
        self._live(None)
        return list(range(self._size)) if self._job_ranks is None else list(self._job_ranks)

    def _set_job_ranks(self, ranks):
        ranks = [int(r) for r in ranks]
        self._job_ranks = ranks
        self._of_job = {r: i for i, r in enumerate(ranks)}

    def _job_rank(self, rank):
        """The job's rank of this communicator's `rank` (ANY_SOURCE and None
        pass through)."""
        if self._job_ranks is None or rank is None or rank < 0:
            return rank
        return self._job_ranks[rank]

    def _group_rank(self, job_rank, what):
        """This communicator's rank of the job's `job_rank` (an InJob's
        reading); InvalidArgumentError naming `what` when it is no member."""
        if self._of_job is None:
            return job_rank
        rank = self._of_job.get(job_rank)
        if rank is None:
            raise _invalid("%s %d (a rank of the job, as in torch.distributed) is not a member "
                           "of this group (its members: job ranks %s)"
                           % (what, job_rank, self._job_ranks))
        return rank

    def _learn_job_ranks(self, mine):
        """Every member's job rank, gathered here (after split and shrink,
        whose order the ranks do not know beforehand). Collective."""
        out = array.array("q", bytes(8 * self._size))
        self.all_gather(out, array.array("q", [mine]))
        self._set_job_ranks(out)

    def get_world_size(self):
        return self._live(self._size)

    @property
    def closed(self):
        """True once destroy() has begun."""
        return self._use.closed

    @property
    def _handle(self):
        """The native handle, None once released (tests only: calls go
        through `with self._use as h`)."""
        return self._use.raw

    def _busy(self):
        """True while a call is in progress (or an async collective pending)
        here or in a group made from here."""
        return (self._use.busy or self._turns.pending > 0
                or any(child._busy() for child in list(self._children)))

    def _in_turn(self, fn, async_op=False, buffers=(), start=None):
        """Runs fn (a collective: its C call in a section on the handle) in
        this communicator's order of collectives: here and now while no
        async collective is pending, else after those, on their thread.
        Returns fn's result, or with async_op a Work at once (keeping the
        `buffers` alive until it has run). start: for async_op, what starts
        the collective in C, taking its turn at the call, where none is
        pending (all_reduce's iallreduce)."""
        if async_op and self._use.closed:
            raise _invalid("the communicator has been destroyed")
        turns = self._turns
        if turns.forks != _forks:  # forked: the parent's queue is not ours
            turns = self._turns = _Turns()
            self._started = collections.deque()
        with turns.lock:
            idle = turns.pending == 0
        if idle and not async_op:
            if self._started:
                self._settle_started()
            return fn()
        if idle and start is not None:
            req = start()
            with turns.lock:
                self._prune_started()
                self._started.append(weakref.ref(req))
            return req
        work = Work(tuple(b.keep() for b in buffers) if async_op else ())
        turns.add(fn, work)
        if async_op:
            return work
        try:
            return work._outcome()
        except BaseException as e:
            _taken(e)  # queued: the collective has its turn whatever happens here
            raise

    def _settle_started(self):
        """Waits for the iallreduces started here that still run, through
        Request.wait(), which Ctrl-C ends: the blocking collective's C call
        would otherwise wait for its turn behind them where no signal
        handler runs. Their errors stay for their own wait()."""
        with self._turns.lock:
            started = [r() for r in self._started]
        for req in started:
            if req is not None and not req._done:
                try:
                    req.wait()
                except HcommError:
                    pass  # raised again by its own wait()
        with self._turns.lock:
            self._prune_started()

    def _prune_started(self):
        """Drops the iallreduces that have ended (or are gone) from the front
        of self._started (under self._turns.lock)."""
        while self._started and (self._started[0]() is None or self._started[0]()._done):
            self._started.popleft()

    def _orphan(self, keep):
        if not self._use.closed:
            self._orphans.append(keep)

    def set_timeout(self, timeout_ms):
        """Changes timeout_ms for calls started afterwards."""
        value = str(_int(timeout_ms, "timeout_ms", 0))
        with self._use as h:
            _n.hcomm_comm_set(h, "timeout_ms", value)

    def set_compression(self, kind):
        """Compresses what this rank sends from now on (config key
        `compression`): kind is an hcomm.CompressionType (NONE, FP16, BF16,
        DELTA, FP16|DELTA, BF16|DELTA) or the config value ("fp16,delta").
        Applies to calls started afterwards; call it at the same point on
        every rank of the group (a collective expects the same setting on
        every rank; a receive decodes whatever comes). FP16/BF16 stay off
        over shared memory, where the conversion costs more than it saves,
        so results there are exact. FP16|BF16 or any other value raises
        InvalidArgumentError naming `kind`; nothing changes then."""
        value = _compression(kind)
        with self._use as h:
            _n.hcomm_comm_set(h, "compression", value)

    def transport(self, peer):
        """The transport to rank peer: "shm", "tcp", or "self"."""
        peer = _int(peer, "peer")
        with self._use as h:
            return _n.hcomm_comm_transport(h, peer)

    def abort(self):
        """Every pending and later operation fails with AbortedError. Any thread,
        also while destroy() waits for the calls that this ends. Aborting the
        world fails its groups too; aborting a group ends that group alone
        (its members' calls on it with this rank raise PeerFailureError)."""
        h = self._use.enter(while_closing=True)
        if h is None:
            raise _invalid("the communicator has been destroyed")
        try:
            _n.hcomm_comm_abort(h)
        finally:
            self._use.exit()

    def destroy(self):
        """Releases the communicator (local; waits up to timeout_ms for this
        rank's sends to be delivered). Calls begun after it raise
        InvalidArgumentError; calls in progress on other threads are waited
        for (abort() ends them early), and so are async collectives still
        pending. Groups made from it go first. Calling it again does
        nothing."""
        if self._turns.forks == _forks:
            self._turns.wait_idle()  # each runs under its timeout
        self._use.close(self._release, before=self._destroy_children)

    def _destroy_children(self):
        # After this communicator's calls have ended, so no split() or
        # new_group() is still adding a child. One that fails to destroy
        # (it is released anyway) does not keep the others alive.
        first = None
        for child in list(self._children):
            try:
                child.destroy()
            except HcommError as e:
                first = first or e
        if first is not None:
            raise first

    def _release(self, h):
        try:
            _n.hcomm_comm_destroy(h)
        finally:
            self._orphans = []
            _roots.discard(self)

    close = destroy

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass

    def __repr__(self):
        if self._use.closed:
            return "<hcomm.Communicator destroyed>"
        return "<hcomm.Communicator rank %d of %d>" % (self._rank, self._size)

    # ---- groups ------------------------------------------------------------

    @_collective
    def new_group(self, ranks):
        """A group of `ranks` (ranks of this communicator, no duplicates); its
        rank i is ranks[i]. Collective: every rank calls it with the same list.
        Returns None on ranks not listed."""
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise _invalid("ranks must be a list of ints, not %s" % type(ranks).__name__)
        ranks = [_int(r, "rank") for r in ranks]

        def call():
            with self._use as h:  # The child is made before destroy() can look for it.
                handle = _n.hcomm_comm_create_group(h, ranks)
                if handle is None:
                    return None
                child = Communicator(handle, parent=self)
            child._set_job_ranks(self._job_rank(r) for r in ranks)
            return child
        return self._in_turn(call)

    @_collective
    def split(self, color, key=0):
        """Ranks passing the same color form a group, ordered by (key, rank).
        Collective. Returns None for color None or hcomm.UNDEFINED."""
        color = UNDEFINED if color is None else _int(color, "color")
        key = _int(key, "key")

        def call():
            with self._use as h:
                handle = _n.hcomm_comm_split(h, color, key)
                if handle is None:
                    return None
                child = Communicator(handle, parent=self)
            child._learn_job_ranks(self._job_rank(self._rank))
            return child
        return self._in_turn(call)

    def shrink(self):
        """After a rank failed (PeerFailureError): the surviving ranks agree on
        which ranks are gone and return a new communicator of the living
        ones, renumbered in their old order (hcomm_comm_shrink). Collective
        over the survivors; without a failure, a communicator of every rank.
        This communicator is left as it is (its collectives keep failing):
        destroy it when done; the new one outlives it (unlike a split's
        groups, it is not destroyed with it). Raises TimeoutError naming the
        ranks waited for where a survivor does not call it within
        timeout_ms."""
        def call():
            with self._use as h:
                survivors = Communicator(_n.hcomm_comm_shrink(h))
            try:
                survivors._learn_job_ranks(self._job_rank(self._rank))
            except BaseException:
                survivors.destroy()
                raise
            return survivors
        # (Not one of this communicator's collectives: nothing to refuse in
        # turn if it raises; it runs after the async ones pending, which a
        # member's failure ends.)
        return self._in_turn(call)

    # ---- point-to-point ----------------------------------------------------

    def send(self, tensor, dst, tag=0):
        """Sends tensor to rank dst (blocking until the buffer may be reused)."""
        b = _tensors.as_buffer(tensor, False, "send")
        dst, tag = _int(dst, "dst"), _int(tag, "tag")
        with self._use as h:
            _n.hcomm_send(b.obj, b.count, b.dtype, dst, tag, h)

    def recv(self, tensor, src=None, tag=0):
        """Receives into tensor (its size is the capacity) from src (None: any
        source; tag None: any tag). Returns the sender's rank."""
        b = _tensors.as_buffer(tensor, True, "recv")
        src = _src(src)
        tag = _recv_tag(tag)
        with self._use as h:
            if src != ANY_SOURCE:
                _n.hcomm_recv(b.obj, b.count, b.dtype, src, tag, h)
                return src
            # Only a request tells the source; destroy() waits for it as for
            # any other call.
            req = Request(self, _n.hcomm_irecv(b.obj, b.count, b.dtype, src, tag, h),
                          (b.keep(),))
            try:
                req.wait()
            finally:
                req.close()
            return req.source

    def isend(self, tensor, dst, tag=0):
        """Starts sending tensor to dst; returns a Request."""
        b = _tensors.as_buffer(tensor, False, "isend")
        keep = (b.keep(),)
        dst, tag = _int(dst, "dst"), _int(tag, "tag")
        with self._use as h:
            return Request(self, _n.hcomm_isend(b.obj, b.count, b.dtype, dst, tag, h), keep)

    def irecv(self, tensor, src=None, tag=0):
        """Starts receiving into tensor from src (None: any source); returns a
        Request whose `source` says who sent it once it is done."""
        b = _tensors.as_buffer(tensor, True, "irecv")
        keep = (b.keep(),)
        src, tag = _src(src), _recv_tag(tag)
        with self._use as h:
            return Request(self, _n.hcomm_irecv(b.obj, b.count, b.dtype, src, tag, h), keep)

    # ---- collectives (in place) -------------------------------------------

    # async_op=True: the call returns at once with a Work (all_reduce: a
    # Request over hcomm_iallreduce while no other async collective is
    # pending) and runs in its turn; without it, None once done.

    @_collective
    def all_reduce(self, tensor, op=ReduceOp.SUM, async_op=False):
        """tensor = op over every rank's tensor, on every rank. With
        async_op=True, returns a Request (iallreduce) or a Work."""
        b = _tensors.as_buffer(tensor, True, "all_reduce")
        op = _op(op)

        def call():
            with self._use as h:
                _n.hcomm_allreduce(b.obj, b.obj, b.count, b.dtype, op, h)

        def start():
            with self._use as h:
                return Request(self, _n.hcomm_iallreduce(b.obj, b.obj, b.count, b.dtype, op, h),
                               (b.keep(),))
        return self._in_turn(call, async_op, (b,), start)

    @_collective
    def broadcast(self, tensor, src, async_op=False):
        """Every rank's tensor = rank src's tensor."""
        b = _tensors.as_buffer(tensor, True, "broadcast")
        src = _int(src, "src")

        def call():
            with self._use as h:
                _n.hcomm_broadcast(b.obj, b.count, b.dtype, src, h)
        return self._in_turn(call, async_op, (b,))

    @_collective
    def reduce(self, tensor, dst, op=ReduceOp.SUM, async_op=False):
        """Rank dst's tensor = op over every rank's tensor (others unchanged)."""
        dst = _int(dst, "dst")
        b = _tensors.as_buffer(tensor, dst == self._rank, "reduce")
        recv = b.obj if dst == self._rank else None
        op = _op(op)

        def call():
            with self._use as h:
                _n.hcomm_reduce(b.obj, recv, b.count, b.dtype, op, dst, h)
        return self._in_turn(call, async_op, (b,))

    @_collective
    def all_gather(self, out, tensor, async_op=False):
        """out (size * len(tensor) elements) = every rank's tensor, in rank
        order. tensor may be this rank's block of out (in place)."""
        send, recv, count, dtype, bufs = self._all_gather_args(out, tensor)

        def call():
            with self._use as h:
                _n.hcomm_allgather(send, recv, count, dtype, h)
        return self._in_turn(call, async_op, bufs)

    @_collective
    def reduce_scatter(self, out, inp, op=ReduceOp.SUM, async_op=False):
        """out (len(inp) / size elements) on rank r = op over every rank's block
        r of inp. out may be inp's first block (in place)."""
        send, recv, count, dtype, bufs = self._reduce_scatter_args(out, inp)
        op = _op(op)

        def call():
            with self._use as h:
                _n.hcomm_reduce_scatter(send, recv, count, dtype, op, h)
        return self._in_turn(call, async_op, bufs)

    @_collective
    def all_to_all(self, out, inp, async_op=False):
        """Block j of inp goes to rank j; block i of out comes from rank i.
        Both have size * count elements."""
        send, recv, count, dtype, bufs = self._all_to_all_args(out, inp)

        def call():
            with self._use as h:
                _n.hcomm_alltoall(send, recv, count, dtype, h)
        return self._in_turn(call, async_op, bufs)

    @_collective
    def gather(self, tensor, out=None, dst=0, async_op=False):
        """Rank dst's out (size * len(tensor) elements) = every rank's tensor in
        rank order; out is only needed (and used) on dst."""
        dst = _int(dst, "dst")
        send, recv, count, dtype, bufs = self._gather_args(tensor, out, dst)

        def call():
            with self._use as h:
                _n.hcomm_gather(send, recv, count, dtype, dst, h)
        return self._in_turn(call, async_op, bufs)

    @_collective
    def scatter(self, out, inp=None, src=0, async_op=False):
        """Block r of rank src's inp (size * len(out) elements) goes to rank r's
        out; inp is only needed (and used) on src."""
        src = _int(src, "src")
        send, recv, count, dtype, bufs = self._scatter_args(out, inp, src)

        def call():
            with self._use as h:
                _n.hcomm_scatter(send, recv, count, dtype, src, h)
        return self._in_turn(call, async_op, bufs)

    def barrier(self, async_op=False):
        """Returns once every rank of the group has entered the barrier."""
        def call():
            with self._use as h:
                _n.hcomm_barrier(h)
        return self._in_turn(call, async_op)

    # ---- checks ------------------------------------------------------------

    # The arguments of the collectives with two buffers, checked:
    # (send, recv, count, dtype, buffers) as the C call takes them (send and
    # recv are buffer objects or None), and the Buffers to keep alive while
    # it runs. Shared by the blocking calls and hcomm.Stream's.

    def _all_gather_args(self, out, tensor):
        o = _tensors.as_buffer(out, True, "all_gather (out)")
        t = _tensors.as_buffer(tensor, False, "all_gather (tensor)")
        self._check_blocks("all_gather", o, t, "out", "tensor")
        send = self._in_place(o, t, self._rank * t.nbytes, "all_gather")
        return send.obj, o.obj, t.count, t.dtype, (o, t)

    def _reduce_scatter_args(self, out, inp):
        o = _tensors.as_buffer(out, True, "reduce_scatter (out)")
        i = _tensors.as_buffer(inp, False, "reduce_scatter (inp)")
        self._check_blocks("reduce_scatter", i, o, "inp", "out")
        recv = o
        if self._overlap(i, o):
            if i.address() != o.address():
                raise _invalid("reduce_scatter: out overlaps inp but is not its first block")
            i = recv = _tensors.as_buffer(inp, True, "reduce_scatter (inp)")  # In place.
        return i.obj, recv.obj, o.count, o.dtype, (o, i)

    def _all_to_all_args(self, out, inp):
        o = _tensors.as_buffer(out, True, "all_to_all (out)")
        i = _tensors.as_buffer(inp, False, "all_to_all (inp)")
        self._check_same("all_to_all", o, i, "out", "inp")
        if o.count != i.count:
            raise _invalid("all_to_all: out has %d elements but inp has %d"
                           % (o.count, i.count))
        if i.count % self._size:
            raise _invalid("all_to_all: %d elements do not split into %d equal blocks"
                           % (i.count, self._size))
        if self._overlap(o, i):
            raise _invalid("all_to_all: out and inp must not overlap")
        return i.obj, o.obj, i.count // self._size, i.dtype, (o, i)

    def _gather_args(self, tensor, out, dst):
        t = _tensors.as_buffer(tensor, False, "gather (tensor)")
        if dst != self._rank:
            return t.obj, None, t.count, t.dtype, (t,)
        if out is None:
            raise _invalid("gather: the destination rank %d needs `out`" % dst)
        o = _tensors.as_buffer(out, True, "gather (out)")
        self._check_blocks("gather", o, t, "out", "tensor")
        send = self._in_place(o, t, self._rank * t.nbytes, "gather")
        return send.obj, o.obj, t.count, t.dtype, (t, o)

    def _scatter_args(self, out, inp, src):
        o = _tensors.as_buffer(out, True, "scatter (out)")
        if src != self._rank:
            return None, o.obj, o.count, o.dtype, (o,)
        if inp is None:
            raise _invalid("scatter: the source rank %d needs `inp`" % src)
        i = _tensors.as_buffer(inp, False, "scatter (inp)")
        self._check_blocks("scatter", i, o, "inp", "out")
        if self._overlap(i, o):
            raise _invalid("scatter: out and inp must not overlap")
        return i.obj, o.obj, o.count, o.dtype, (o, i)

    def _check_same(self, what, a, b, an, bn):
        if a.dtype != b.dtype:
            raise _invalid("%s: %s is %s but %s is %s" % (what, an, a.dtype_name, bn,
                                                          b.dtype_name))

    def _check_blocks(self, what, big, small, bn, sn):
        self._check_same(what, big, small, bn, sn)
        if big.count != self._size * small.count:
            raise _invalid("%s: %s has %d elements; it needs size (%d) x %d = %d"
                           % (what, bn, big.count, self._size, small.count,
                              self._size * small.count))

    @staticmethod
    def _overlap(a, b):
        if a.nbytes == 0 or b.nbytes == 0:
            return False
        x, y = a.address(), b.address()
        return x < y + b.nbytes and y < x + a.nbytes

    def _in_place(self, big, part, offset, what):
        """part as the send buffer, or big itself when part is big's block at
        offset (the C API's in-place form); other overlaps are errors."""
        if not self._overlap(big, part):
            return part
        if part.address() != big.address() + offset:
            raise _invalid("%s: tensor overlaps out but is not this rank's block of it" % what)
        return big


def _destroy_all():
    """atexit: destroys communicators the program forgot (children first).
    One with a call still in progress, which only a daemon thread can have
    now, is left to the process's exit: destroy() would wait for the call
    (up to timeout_ms), and an abort would make that thread raise while the
    interpreter shuts down."""
    for comm in list(_roots):
        try:
            if not comm._busy():
                comm.destroy()
        except Exception:
            pass
