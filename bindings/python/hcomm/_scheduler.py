"""The communication scheduler (hcomm_scheduler_t): tasks with priorities and
dependencies, each a function that issues operations.

    scheduler = hcomm.CommunicationScheduler()
    scheduler.register_task(task_id="gradient_sync", func=sync, priority=10)
    scheduler.register_task(task_id="param_update", func=update, priority=5,
                            depends_on=["gradient_sync"])
    results = scheduler.run()        # {task_id: func's return value}

A task runs on the scheduler's thread of its priority, with the stream of
its priority as the current stream: hcomm's calls made in it without a group
or stream go to that stream (a blocking call waits for its operation there;
async_op=True returns its Work). hcomm.current_stream() is that stream.
Tasks of equal priority run one at a time, tasks of different priorities at
once. The order in which tasks start is fixed before a run: the policy (a
hcomm.Scheduler; default: higher priority first, then registration order)
picks among the tasks whose dependencies are done. Ranks whose orders
differ get MismatchError naming both tasks, and nothing runs.
"""

import collections
import threading

from . import _native as _n
from ._communicator import Communicator, _int
from ._handle import Handle
from ._stream import Stream
from .errors import HcommError, Status, _invalid

_current = threading.local()


def current_stream():
    """The stream of the scheduler task running on this thread, else None."""
    return getattr(_current, "stream", None)


Task = collections.namedtuple("Task", ["task_id", "priority", "registration_index"])
Task.__doc__ = """A ready task as a policy sees it (hcomm.Scheduler.schedule)."""


class Scheduler:
    """A scheduling policy. Subclass it and override schedule(tasks): given
    the ready tasks (hcomm.Task: task_id, priority, registration_index),
    return them in the order to start them (the first starts next). It must
    give the same order on every rank. This base class is the default
    policy."""

    def schedule(self, tasks):
        return sorted(tasks, key=lambda t: (-t.priority, t.registration_index))


_default_policy = None


def set_scheduler(policy):
    """Makes policy (an hcomm.Scheduler, or None for the built-in one) the
    policy of the CommunicationSchedulers made afterwards without one."""
    global _default_policy
    if policy is not None and not isinstance(policy, Scheduler):
        raise _invalid("set_scheduler: policy must be an hcomm.Scheduler (or None), not %s"
                       % type(policy).__name__)
    _default_policy = policy


class CommunicationScheduler:
    """CommunicationScheduler(group=None, policy=None): tasks over group
    (default: the default group). Collective: every rank makes it, registers
    the same tasks and calls run() together. policy: an hcomm.Scheduler
    (default: the one set by hcomm.set_scheduler, else the built-in)."""

    def __init__(self, group=None, policy=None):
        from . import _group  # None, an hcomm or a torch.distributed group
        group = _group(group)
        if policy is None:
            policy = _default_policy
        if policy is not None and not isinstance(policy, Scheduler):
            raise _invalid("CommunicationScheduler: policy must be an hcomm.Scheduler, not %s"
                           % type(policy).__name__)

        def call():
            with group._use as h:
                return _n.hcomm_scheduler_create(h)
        self._use = Handle(group._in_turn(call), "the scheduler has been closed")
        self.group = group
        self._tasks = {}  # task_id -> (func, priority); their trampolines below
        self._keep = []  # the callables the C scheduler holds
        self._results = {}
        self._raised = {}  # task_id -> what its func raised, this run
        self._policy_error = None
        self._streams = {}  # stream handle -> its borrowed Stream
        if policy is not None:
            self._set_policy(policy)

    def _set_policy(self, policy):
        def pick(ready):
            try:
                tasks = [Task(*t) for t in ready]
                order = list(policy.schedule(list(tasks)))
                if not order:
                    raise _invalid("%s.schedule returned no task" % type(policy).__name__)
                return tasks.index(order[0])
            except BaseException as e:  # raised again by run()
                self._policy_error = e
                return -1
        self._keep.append(pick)
        with self._use as h:
            _n.hcomm_py_scheduler_set_policy(h, pick)

    def register_task(self, task_id, func, priority=0, depends_on=()):
        """Adds a task: func() runs once per run(), after every task named in
        depends_on, on the stream of its priority. Returns nothing; run()
        returns what func returned."""
        if not isinstance(task_id, str):
            raise _invalid("register_task: task_id must be a str, not %s" % type(task_id).__name__)
        if not callable(func):
            raise _invalid("register_task of task %r: func is not callable" % task_id)
        priority = _int(priority, "priority")
        if isinstance(depends_on, str):
            depends_on = [depends_on]
        deps = list(depends_on or ())
        for d in deps:
            if not isinstance(d, str):
                raise _invalid("register_task of task %r: depends_on holds %r, not a task id (str)"
                               % (task_id, d))

        def run_task(handle):
            stream = self._borrowed(handle)
            _current.stream = stream
            try:
                self._results[task_id] = func()
                return 0
            except BaseException as e:
                self._raised[task_id] = e
                return int(e.status) if isinstance(e, HcommError) else int(Status.ERR_INTERNAL)
            finally:
                _current.stream = None
        self._keep.append(run_task)
        with self._use as h:
            _n.hcomm_py_scheduler_add_task(h, task_id, priority, deps, run_task)
        self._tasks[task_id] = (func, priority)

    def _borrowed(self, handle):
        key = int(handle)
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = Stream._borrow(handle, self.group)
        return s

    def run(self):
        """Runs every task once; returns {task_id: its func's return value}.
        A task that raised makes run() raise that exception (its message
        naming the task; those depending on it did not run); the others ran.
        """
        self._results, self._raised, self._policy_error = {}, {}, None
        try:
            with self._use as h:
                _n.hcomm_scheduler_run(h)
        except HcommError as e:
            if self._policy_error is not None:
                raise self._policy_error
            failed = next((t for t in self._tasks if "task '%s'" % t in str(e)
                           and t in self._raised), None)
            if failed is not None:
                original = self._raised[failed]
                if isinstance(original, HcommError):
                    raise type(original)(str(e), original.status) from original
                original.add_note("hcomm: %s" % e)
                raise original
            raise
        return dict(self._results)

    def close(self):
        """Ends the scheduler and its streams."""
        self._use.close(_n.hcomm_scheduler_destroy)
        self._keep = []
        self._streams = {}

    destroy = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
