"""Streams and events (hcomm_stream_t, hcomm_event_t).

A Stream is an ordered queue of operations on one group, run by a thread of
the library in the background; an operation queued on it returns a Work at
once. Streams of one group are matching contexts of their own, so they run
concurrently; a higher priority is served first where streams compete, and
allreduces queued back to back with the same dtype and op run as one (up to
the group's fusion_bytes).

    with hcomm.Stream(priority=1) as s:          # leaving the block synchronizes
        work = hcomm.all_reduce(t, stream=s)     # returns at once
        ...                                      # compute meanwhile
        work.wait()

The tensors of an operation must stay untouched until it has run (its
Work's wait(), an event recorded after it, or the stream's synchronize());
the stream keeps them alive meanwhile.
"""

import collections
import threading
import weakref

from . import _native as _n
from . import _tensors
from ._communicator import ANY_SOURCE, ANY_TAG, Communicator, ReduceOp, Work, _int, _op
from ._handle import Handle
from .errors import HcommError, _invalid

# hcomm_op_kind_t
_SEND, _RECV, _ALLREDUCE, _BROADCAST, _REDUCE, _ALLGATHER, _REDUCE_SCATTER, _ALLTOALL, \
    _GATHER, _SCATTER, _BARRIER = range(11)

# Every live stream: closed at exit (safety net), before the communicators.
_live = weakref.WeakSet()


class Event:
    """A mark in a stream: record(s) puts it after everything queued on s so
    far; synchronize() blocks until that has run (raising the stream's error
    if an operation before the mark failed); query() never blocks. An event
    never recorded counts as reached. s2.wait_event(e) makes s2's later
    operations wait for the mark."""

    def __init__(self):
        self._use = Handle(_n.hcomm_event_create(), "the event has been destroyed")

    def record(self, stream):
        """Moves the mark to the end of what is queued on stream now."""
        if not isinstance(stream, Stream):
            raise _invalid("Event.record: stream must be an hcomm.Stream, not %s"
                           % type(stream).__name__)
        with stream._use as s, self._use as e:
            _n.hcomm_event_record(e, s)

    def synchronize(self):
        """Blocks until the mark is reached (each operation before it bounded
        by its group's timeout_ms)."""
        with self._use as e:
            _n.hcomm_event_synchronize(e)

    def query(self):
        """True once the mark is reached. Never blocks."""
        with self._use as e:
            return bool(_n.hcomm_event_query(e))

    def close(self):
        """Releases the event; streams waiting on it keep their marks."""
        self._use.close(_n.hcomm_event_destroy)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<hcomm.Event%s>" % (" closed" if self._use.closed else "")


class StreamWork(Work):
    """An operation queued on a stream. wait() blocks until it has run and
    raises the stream's error if it, or an operation before it, failed (the
    stream keeps that error for its synchronize()); is_completed() never
    blocks. Its mark in the stream is recorded when first asked for (then
    it also covers what was queued after it meanwhile), so a Work that is
    never waited for costs the stream nothing."""

    def __init__(self, stream, keep):  # pylint: disable=super-init-not-called
        self._stream = stream
        self._keep = keep
        self._mark = None
        self.source = None
        self.tag = None
        self.count = None

    def _marked(self):
        if self._mark is None:
            self._mark = Event()
            if not self._stream._use.closed:
                self._mark.record(self._stream)  # else: everything has run
            self._stream = None
        return self._mark

    def wait(self):
        mark = self._marked()
        try:
            mark.synchronize()
        finally:
            if mark.query():
                self._keep = None
        return True

    def _outcome(self):
        self.wait()

    def is_completed(self):
        done = self._marked().query()
        if done:
            self._keep = None
        return done

    def __repr__(self):
        if self._mark is None:
            return "<hcomm.StreamWork>"
        return "<hcomm.StreamWork %s>" % ("done" if self._mark.query() else "pending")


def _refusing(kind):
    """A collective whose arguments the package refused still takes its turn
    on the stream (as the C call does for those it refuses), so that the
    other ranks' stream fails at once instead of waiting for it."""
    def wrap(method):
        def call(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except BaseException as e:
                if not getattr(e, "_hcomm_in_section", False) and not self._use.closed:
                    try:
                        with self._use as h:
                            _n.hcomm_py_stream_enqueue(h, kind, None, None, 0, -1, 0, 0, 0)
                    except HcommError:
                        pass  # the refusal expected
                raise
        call.__name__ = method.__name__
        call.__doc__ = method.__doc__
        return call
    return wrap


class Stream:
    """Stream(priority=0, group=None): an ordered queue of operations on group
    (default: the default group), run in the background. Collective: every
    rank of group makes its streams in the same order. A higher priority is
    served first where streams compete.

    Operations (all_reduce, broadcast, reduce, all_gather, reduce_scatter,
    all_to_all, gather, scatter, barrier, send, recv) take the arguments of
    the group's calls, return a Work at once and run in the order queued;
    every rank queues the same collectives in the same order. The module's
    functions take stream= for the same (hcomm.all_reduce(t, stream=s)).

    A failed operation makes the rest of the stream fail with the same
    error until synchronize() raises it. Leaving a `with` block synchronizes
    and closes the stream.
    """

    def __init__(self, priority=0, group=None):
        from . import _group  # None, an hcomm or a torch.distributed group
        group = _group(group)
        priority = _int(priority, "priority")

        def call():
            with group._use as h:
                return _n.hcomm_stream_create(h, priority)
        self._use = Handle(group._in_turn(call), "the stream has been closed")
        self.group = group
        self.priority = priority
        self._size = group.size
        self._rank = group.rank
        self._lock = threading.Lock()
        self._pending = collections.deque()  # buffers of operations not known to have run
        self._queued = 0
        self._borrowed = False
        _live.add(self)

    @classmethod
    def _borrow(cls, handle, group):
        """The stream `handle` of a scheduler, for its tasks: closing it
        releases nothing (the scheduler ends its streams)."""
        s = cls.__new__(cls)
        s._use = Handle(handle, "the scheduler's stream has been closed")
        s.group = group
        s.priority = None
        s._size = group.size
        s._rank = group.rank
        s._lock = threading.Lock()
        s._pending = collections.deque()
        s._queued = 0
        s._borrowed = True
        return s

    # ---- state -------------------------------------------------------------

    @property
    def closed(self):
        return self._use.closed

    def query(self):
        """True when everything queued so far has run. Never blocks."""
        with self._use as h:
            return bool(_n.hcomm_stream_query(h))

    def synchronize(self):
        """Blocks until everything queued has run; raises the first error since
        the last synchronize (and clears it)."""
        with self._use as h:
            _n.hcomm_stream_synchronize(h)
        with self._lock:
            self._pending.clear()

    def wait_event(self, event):
        """The stream's later operations wait for event's latest mark."""
        if not isinstance(event, Event):
            raise _invalid("Stream.wait_event: event must be an hcomm.Event, not %s"
                           % type(event).__name__)
        with self._use as h, event._use as e:
            _n.hcomm_stream_wait_event(h, e)

    def close(self):
        """Runs what is queued, then ends the stream; raises an error that
        synchronize() has not raised yet. Calling it again does nothing."""
        try:
            self._use.close((lambda h: None) if self._borrowed else _n.hcomm_stream_destroy)
        finally:
            with self._lock:
                self._pending.clear()
            _live.discard(self)

    destroy = close

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:  # the block's own error goes on; ours would hide it
            try:
                self.close()
            except HcommError:
                pass
            return
        try:
            self.synchronize()
        finally:
            self.close()

    def __del__(self):
        try:
            if not self._borrowed:
                self.close()
        except Exception:
            pass

    def __repr__(self):
        if self._use.closed:
            return "<hcomm.Stream closed>"
        if self._borrowed:
            return "<hcomm.Stream of a scheduler task, rank %d of %d>" % (self._rank, self._size)
        return "<hcomm.Stream priority %d, rank %d of %d>" % (self.priority, self._rank,
                                                             self._size)

    # ---- queueing ----------------------------------------------------------

    def _enqueue(self, kind, send, recv, count, dtype, op=0, peer_or_root=0, tag=0,
                 buffers=()):
        keep = tuple(b.keep() for b in buffers)
        with self._use as h:
            _n.hcomm_py_stream_enqueue(h, kind, send, recv, count, dtype, op, peer_or_root, tag)
            # What the stream holds until the operation has run; let go once
            # the stream is seen idle (looked at every 64 operations).
            with self._lock:
                self._queued += 1
                if self._queued % 64 == 0 and _n.hcomm_stream_query(h):
                    self._pending.clear()
                self._pending.append(keep)
        return StreamWork(self, keep)

    @_refusing(_ALLREDUCE)
    def all_reduce(self, tensor, op=ReduceOp.SUM):
        """tensor = op over every rank's tensor, in place."""
        b = _tensors.as_buffer(tensor, True, "all_reduce")
        return self._enqueue(_ALLREDUCE, b.obj, b.obj, b.count, b.dtype, _op(op), buffers=(b,))

    @_refusing(_BROADCAST)
    def broadcast(self, tensor, src):
        """Every rank's tensor = rank src's tensor."""
        b = _tensors.as_buffer(tensor, True, "broadcast")
        return self._enqueue(_BROADCAST, None, b.obj, b.count, b.dtype,
                             peer_or_root=_int(src, "src"), buffers=(b,))

    @_refusing(_REDUCE)
    def reduce(self, tensor, dst, op=ReduceOp.SUM):
        """Rank dst's tensor = op over every rank's tensor."""
        dst = _int(dst, "dst")
        b = _tensors.as_buffer(tensor, dst == self._rank, "reduce")
        return self._enqueue(_REDUCE, b.obj, b.obj if dst == self._rank else None, b.count,
                             b.dtype, _op(op), dst, buffers=(b,))

    # The collectives with two buffers take the group's checks (and its
    # in-place forms) as they are.

    @_refusing(_ALLGATHER)
    def all_gather(self, out, tensor):
        """out (size * len(tensor) elements) = every rank's tensor in rank order."""
        send, recv, count, dtype, bufs = self.group._all_gather_args(out, tensor)
        return self._enqueue(_ALLGATHER, send, recv, count, dtype, buffers=bufs)

    @_refusing(_REDUCE_SCATTER)
    def reduce_scatter(self, out, inp, op=ReduceOp.SUM):
        """out on rank r = op over every rank's block r of inp."""
        send, recv, count, dtype, bufs = self.group._reduce_scatter_args(out, inp)
        return self._enqueue(_REDUCE_SCATTER, send, recv, count, dtype, _op(op), buffers=bufs)

    @_refusing(_ALLTOALL)
    def all_to_all(self, out, inp):
        """Block j of inp goes to rank j; block i of out comes from rank i."""
        send, recv, count, dtype, bufs = self.group._all_to_all_args(out, inp)
        return self._enqueue(_ALLTOALL, send, recv, count, dtype, buffers=bufs)

    @_refusing(_GATHER)
    def gather(self, tensor, out=None, dst=0):
        """Rank dst's out = every rank's tensor in rank order."""
        dst = _int(dst, "dst")
        send, recv, count, dtype, bufs = self.group._gather_args(tensor, out, dst)
        return self._enqueue(_GATHER, send, recv, count, dtype, peer_or_root=dst, buffers=bufs)

    @_refusing(_SCATTER)
    def scatter(self, out, inp=None, src=0):
        """Rank r's out = block r of rank src's inp."""
        src = _int(src, "src")
        send, recv, count, dtype, bufs = self.group._scatter_args(out, inp, src)
        return self._enqueue(_SCATTER, send, recv, count, dtype, peer_or_root=src, buffers=bufs)

    def barrier(self):
        """Runs once every rank's stream got to it."""
        return self._enqueue(_BARRIER, None, None, 0, 0)

    def send(self, tensor, dst, tag=0):
        """Sends tensor to rank dst; matches only a recv on this stream of dst."""
        b = _tensors.as_buffer(tensor, False, "send")
        return self._enqueue(_SEND, b.obj, None, b.count, b.dtype,
                             peer_or_root=_int(dst, "dst"), tag=_int(tag, "tag"), buffers=(b,))

    def recv(self, tensor, src, tag=0):
        """Receives into tensor from rank src (tag None: any tag)."""
        b = _tensors.as_buffer(tensor, True, "recv")
        src = ANY_SOURCE if src is None else _int(src, "src")
        tag = ANY_TAG if tag is None else _int(tag, "tag")
        return self._enqueue(_RECV, None, b.obj, b.count, b.dtype, peer_or_root=src, tag=tag,
                             buffers=(b,))


def _close_all():
    """atexit: closes the streams the program forgot (they run out what is
    queued first)."""
    for s in list(_live):
        try:
            s.close()
        except Exception:
            pass
