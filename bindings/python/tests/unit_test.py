"""Unit tests of the Python binding in one process (world_size 1).

Collectives on one rank, send-to-self, the error classes and their
messages, bad arguments, dtype mapping, buffer-protocol objects,
non-contiguous and read-only tensors, zero copy, the GIL, requests and the
shared-memory channel.
"""

import array
import builtins
import datetime
import enum
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

import hcomm

COMM = None


def setUpModule():
    global COMM
    COMM = hcomm.init(rank=0, world_size=1, timeout_ms=5000)


def tearDownModule():
    hcomm.destroy()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, what, seconds=10):
    """Polls predicate until it is true; fails the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting until " + what)
        time.sleep(0.001)


def start_thread(target):
    th = threading.Thread(target=target, daemon=True)
    th.start()
    return th


class InitTest(unittest.TestCase):
    def test_default_group(self):
        self.assertIs(hcomm.get_default_group(), COMM)
        self.assertTrue(hcomm.is_initialized())
        self.assertEqual(hcomm.get_rank(), 0)
        self.assertEqual(hcomm.get_world_size(), 1)
        self.assertEqual(hcomm.get_rank(group=COMM), 0)
        self.assertEqual((COMM.rank, COMM.size), (0, 1))
        self.assertIn("rank 0 of 1", repr(COMM))

    def test_transport_to_self(self):
        self.assertEqual(COMM.transport(0), "self")
        with self.assertRaises(hcomm.InvalidArgumentError):
            COMM.transport(1)

    def test_init_twice_is_an_error(self):
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "already initialised"):
            hcomm.init(rank=0, world_size=1)

    def test_version(self):
        v = hcomm.version()
        self.assertEqual(len(v), 3)
        self.assertEqual(hcomm.__version__, "%d.%d.%d" % v)

    def test_unknown_config_key(self):
        with self.assertRaises(hcomm.InvalidArgumentError) as cm:
            hcomm.Communicator.from_config(rank=0, world_size=1, no_such_key="1")
        self.assertEqual(cm.exception.status, 1)
        self.assertIn("no_such_key", str(cm.exception))

    def test_bad_config_value(self):
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "timeout_ms"):
            hcomm.Communicator.from_config(rank=0, world_size=1, timeout_ms="soon")

    def test_nul_in_config_is_invalid(self):
        # C would read "timeout_ms" and "tok": the NUL must not cut them.
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "config key.*NUL"):
            hcomm.Communicator.from_config(rank=0, world_size=1, **{"timeout_ms\0x": 5})
        with self.assertRaisesRegex(hcomm.InvalidArgumentError,
                                    "config value of 'job_token' contains a NUL"):
            hcomm.Communicator.from_config(rank=0, world_size=1, job_token="tok\0en")

    def test_destroyed_communicator_has_no_rank_or_size(self):
        g = hcomm.new_group([0])
        hcomm.destroy(g)
        for what, get in [("rank", lambda: g.rank), ("size", lambda: g.size),
                          ("get_rank", g.get_rank), ("get_world_size", g.get_world_size),
                          ("hcomm.get_rank", lambda: hcomm.get_rank(group=g)),
                          ("hcomm.get_world_size", lambda: hcomm.get_world_size(group=g))]:
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "destroyed", msg=what):
                get()

    def test_default_group_destroyed(self):
        global COMM
        hcomm.destroy()
        try:
            for get in (hcomm.get_rank, hcomm.get_world_size, hcomm.barrier):
                with self.assertRaisesRegex(hcomm.InvalidArgumentError,
                                            r"init\(\) was not called.*destroyed"):
                    get()
        finally:
            COMM = hcomm.init(rank=0, world_size=1, timeout_ms=5000)

    def test_init_process_group_as_torch_calls_it(self):
        global COMM
        hcomm.destroy()
        try:
            COMM = hcomm.init_process_group(
                backend="gloo", init_method="tcp://127.0.0.1:%d" % free_port(), world_size=1,
                rank=0, timeout=datetime.timedelta(milliseconds=400))
            self.assertTrue(hcomm.is_initialized())
            self.assertEqual((hcomm.get_rank(), hcomm.get_world_size()), (0, 1))
            t0 = time.monotonic()
            with self.assertRaises(hcomm.TimeoutError):  # the timeout was taken
                hcomm.recv(np.zeros(1), src=0, tag=4545)
            self.assertLess(time.monotonic() - t0, 3)
            hcomm.destroy_process_group()
            self.assertFalse(hcomm.is_initialized())
            for kwargs, what in [({"init_method": "file:///tmp/x"}, "init_method"),
                                 ({"timeout": 30}, "timedelta"),
                                 ({"backend": 3}, "backend")]:
                with self.assertRaisesRegex(hcomm.InvalidArgumentError, what):
                    hcomm.init_process_group(world_size=1, rank=0, **kwargs)
            self.assertFalse(hcomm.is_initialized())
        finally:
            hcomm.destroy()
            COMM = hcomm.init(rank=0, world_size=1, timeout_ms=5000)

    def test_store_unreachable_is_unavailable(self):
        port = free_port()
        t0 = time.monotonic()
        with self.assertRaises(hcomm.UnavailableError) as cm:
            hcomm.Communicator.from_config(rank=1, world_size=2, timeout_ms=500,
                                           store_addr="127.0.0.1:%d" % port)
        self.assertEqual(cm.exception.status, 8)
        self.assertLess(time.monotonic() - t0, 10)

    def test_second_communicator_and_context_manager(self):
        with hcomm.Communicator.from_config(rank=0, world_size=1) as c:
            t = np.ones(3, np.int64)
            c.all_reduce(t)
            np.testing.assert_array_equal(t, [1, 1, 1])
        self.assertTrue(c.closed)
        self.assertIsNone(c._handle)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "destroyed"):
            c.barrier()
        c.destroy()  # Twice is fine.

    def test_abort(self):
        c = hcomm.Communicator.from_config(rank=0, world_size=1)
        try:
            c.abort()
            with self.assertRaises(hcomm.AbortedError) as cm:
                c.send(np.zeros(1), 0)
            self.assertEqual(cm.exception.status, 7)
        finally:
            c.destroy()

    def test_groups_on_one_rank(self):
        g = hcomm.new_group([0])
        self.assertIsInstance(g, hcomm.Communicator)
        self.assertEqual((hcomm.get_rank(g), hcomm.get_world_size(g)), (0, 1))
        t = np.array([5], np.int32)
        hcomm.all_reduce(t, group=g)
        self.assertEqual(t[0], 5)
        g.destroy()
        self.assertIs(hcomm.split(None), hcomm.GroupMember.NON_GROUP_MEMBER)
        self.assertIs(hcomm.split(hcomm.UNDEFINED), hcomm.GroupMember.NON_GROUP_MEMBER)
        s = hcomm.split(3, key=1)
        self.assertEqual(s.size, 1)
        s.destroy()
        with self.assertRaises(hcomm.InvalidArgumentError):
            hcomm.new_group([0, 0])
        with self.assertRaises(hcomm.InvalidArgumentError):
            hcomm.new_group([3])
        with self.assertRaises(hcomm.InvalidArgumentError):
            hcomm.new_group("0")


class CollectivesTest(unittest.TestCase):
    def test_all_reduce_every_op(self):
        for op in hcomm.ReduceOp:
            for dtype in (np.float32, np.int32, np.uint64, np.float16):
                t = np.arange(6, dtype=dtype)
                hcomm.all_reduce(t, op=op)
                np.testing.assert_array_equal(t, np.arange(6, dtype=dtype), err_msg=str(op))
        self.assertEqual([op.name for op in hcomm.ReduceOp], ["SUM", "PROD", "MIN", "MAX", "AVG"])
        self.assertEqual([int(op) for op in hcomm.ReduceOp], [0, 1, 2, 3, 4])
        t = np.ones(2)
        hcomm.all_reduce(t, op="max")
        hcomm.all_reduce(t, op=np.int64(3))  # an integer of another kind: MAX
        for bad in (9, True, 1.0, None):  # True and 1.0 are not PROD
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "reduce op"):
                hcomm.all_reduce(t, op=bad)

    def test_async_all_reduce(self):
        t = np.full(100, 2.0)
        req = hcomm.all_reduce(t, op=hcomm.ReduceOp.PROD, async_op=True)
        self.assertTrue(req.wait())
        self.assertTrue(req.is_completed())
        np.testing.assert_array_equal(t, 2.0)

    def test_async_other_collectives(self):
        t = np.arange(4, dtype=np.float64)
        out = np.zeros(4)
        works = [hcomm.broadcast(t, src=0, async_op=True),
                 hcomm.all_gather(out, t, async_op=True),
                 hcomm.barrier(async_op=True)]
        self.assertTrue(all(isinstance(w, hcomm.Work) for w in works), works)
        hcomm.wait_all(works)
        self.assertTrue(all(w.is_completed() for w in works))
        np.testing.assert_array_equal(out, t)
        # A bad call raises at once, async or not.
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "all_gather"):
            hcomm.all_gather(np.zeros(3), t, async_op=True)

    def test_async_without_a_thread(self):
        # Where no thread can be started, the collectives run at the call.
        start = threading.Thread.start

        def refuse(thread):
            if thread.name == "hcomm collectives":
                raise RuntimeError("can't start new thread")
            start(thread)
        threading.Thread.start = refuse
        try:
            t = np.full(3, 7, np.int32)
            w = hcomm.reduce(t, dst=0, async_op=True)
            self.assertTrue(w.is_completed() and w.wait())
        finally:
            threading.Thread.start = start
        np.testing.assert_array_equal(t, 7)
        self.assertTrue(hcomm.barrier(async_op=True).wait())

    def test_other_collectives(self):
        t = np.arange(4, dtype=np.float64)
        hcomm.broadcast(t, src=0)
        hcomm.reduce(t, dst=0, op=hcomm.ReduceOp.MAX)
        np.testing.assert_array_equal(t, np.arange(4))
        out = np.zeros(4)
        hcomm.all_gather(out, t)
        np.testing.assert_array_equal(out, t)
        hcomm.all_gather(out, out)  # In place: this rank's block is out itself.
        small = np.zeros(4)
        hcomm.reduce_scatter(small, t)
        np.testing.assert_array_equal(small, t)
        a2a = np.zeros(4)
        hcomm.all_to_all(a2a, t)
        np.testing.assert_array_equal(a2a, t)
        g = np.zeros(4)
        hcomm.gather(t, g, dst=0)
        np.testing.assert_array_equal(g, t)
        s = np.zeros(4)
        hcomm.scatter(s, t, src=0)
        np.testing.assert_array_equal(s, t)
        hcomm.barrier()
        empty = np.zeros(0, np.float32)
        hcomm.all_reduce(empty)

    def test_size_checks(self):
        t = np.zeros(4)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "needs size"):
            hcomm.all_gather(np.zeros(3), t)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "float32"):
            hcomm.all_gather(np.zeros(4, np.float32), t)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "overlap"):
            hcomm.all_to_all(t, t)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "needs `out`"):
            hcomm.gather(t, dst=0)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "needs `inp`"):
            hcomm.scatter(t, src=0)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "out of range"):
            hcomm.broadcast(t, src=1)


class StreamTest(unittest.TestCase):
    def test_one_rank_stream(self):
        with hcomm.Stream(priority=3) as s:
            self.assertIn("priority 3", repr(s))
            t = np.arange(5, dtype=np.float32)
            w = hcomm.all_reduce(t, op=hcomm.ReduceOp.MAX, stream=s)
            got = np.zeros(5, np.float32)
            sent = hcomm.send(t, dst=0, tag=2, stream=s)
            recvd = hcomm.recv(got, src=0, tag=2, stream=s)
            for work in (w, sent, recvd):
                work.wait()
                self.assertTrue(work.is_completed())
            np.testing.assert_array_equal(got, np.arange(5, dtype=np.float32))
            self.assertTrue(s.query())
        self.assertTrue(s.closed)
        s.close()  # again: nothing

    def test_bad_arguments_leave_the_stream_usable(self):
        s = hcomm.Stream()
        try:
            t = np.ones(4, np.float32)
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "stream must be an hcomm.Stream"):
                hcomm.all_reduce(t, stream="s")
            other = hcomm.new_group([0])
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "not the group of the stream"):
                hcomm.all_reduce(t, group=other, stream=s)
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "reduce op"):
                s.all_reduce(t, op=17)
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "root 5 is out of range"):
                s.broadcast(t, src=5)
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "peer 3"):
                s.send(t, dst=3)
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "priority"):
                hcomm.Stream(priority="high")
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "hcomm.Stream"):
                hcomm.Event().record(object())
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "hcomm.Event"):
                s.wait_event(None)
            # Refused on this rank alone (1 rank): the stream goes on.
            s.synchronize()
            hcomm.all_reduce(t, stream=s).wait()
            np.testing.assert_array_equal(t, np.ones(4, np.float32))
            other.destroy()
        finally:
            s.close()

    def test_event_never_recorded_is_reached(self):
        e = hcomm.Event()
        self.assertTrue(e.query())
        e.synchronize()
        e.close()
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "destroyed"):
            e.query()


class SchedulerTest(unittest.TestCase):
    def test_one_rank_run_and_results(self):
        t = np.arange(4, dtype=np.float64)
        order = []

        def sync():
            order.append("sync")
            work = hcomm.all_reduce(t, async_op=True)  # on the task's stream: a Work
            work.wait()
            return "synced"

        with hcomm.CommunicationScheduler() as sched:
            sched.register_task(task_id="log", func=lambda: order.append("log"), priority=0,
                                depends_on=["sync"])
            sched.register_task(task_id="sync", func=sync, priority=10)
            self.assertEqual(sched.run(), {"sync": "synced", "log": None})
            self.assertEqual(order, ["sync", "log"])
            self.assertEqual(sched.run()["sync"], "synced")  # again

    def test_bad_arguments(self):
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "hcomm.Scheduler"):
            hcomm.set_scheduler(5)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "hcomm.Scheduler"):
            hcomm.CommunicationScheduler(policy="fifo")
        with hcomm.CommunicationScheduler() as sched:
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "task_id must be a str"):
                sched.register_task(task_id=3, func=print)
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "func is not callable"):
                sched.register_task(task_id="x", func=None)
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "depends_on holds 7"):
                sched.register_task(task_id="x", func=print, depends_on=[7])
            sched.register_task(task_id="x", func=print, depends_on=["nobody"])
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "depends on 'nobody'"):
                sched.run()

    def test_a_policy_that_raises(self):
        class Broken(hcomm.Scheduler):
            def schedule(self, tasks):
                raise KeyError("no policy today")

        with hcomm.CommunicationScheduler(policy=Broken()) as sched:
            sched.register_task(task_id="x", func=print)
            with self.assertRaisesRegex(KeyError, "no policy today"):
                sched.run()


class CompressionTest(unittest.TestCase):
    C = hcomm.CompressionType
    VALID = [C.NONE, C.FP16, C.BF16, C.DELTA, C.FP16 | C.DELTA, C.BF16 | C.DELTA]

    def tearDown(self):
        hcomm.set_compression(self.C.NONE)

    def _calls_still_work(self, what):
        t = np.linspace(0.5, 2.0, 37, dtype=np.float32)
        hcomm.all_reduce(t)
        np.testing.assert_array_equal(t, np.linspace(0.5, 2.0, 37, dtype=np.float32),
                                      err_msg=what)
        hcomm.send(np.arange(9, dtype=np.float32), 0, tag=61)
        got = np.zeros(9, np.float32)
        hcomm.recv(got, 0, tag=61)
        np.testing.assert_array_equal(got, np.arange(9, dtype=np.float32), err_msg=what)

    def test_flags(self):
        self.assertTrue(issubclass(self.C, enum.IntFlag))
        self.assertEqual([(k.name, int(k)) for k in (self.C.NONE, self.C.FP16, self.C.BF16,
                                                     self.C.DELTA)],
                         [("NONE", 0), ("FP16", 1), ("BF16", 2), ("DELTA", 4)])
        self.assertEqual(int(self.C.FP16 | self.C.DELTA), 5)
        self.assertIn("CompressionType", hcomm.__all__)
        self.assertIn("set_compression", hcomm.__all__)

    def test_every_valid_kind_then_none(self):
        for kind in self.VALID:
            hcomm.set_compression(kind)
            self._calls_still_work(repr(kind))
            hcomm.set_compression(self.C.NONE)
            self._calls_still_work("NONE after %r" % kind)

    def test_group_method_int_and_string_forms(self):
        hcomm.set_compression(self.C.BF16 | self.C.DELTA, group=COMM)
        COMM.set_compression(self.C.FP16)
        hcomm.set_compression(5)  # FP16 | DELTA as a plain int
        hcomm.set_compression(np.int64(2))
        for value in ("fp16", "bf16", "delta", "fp16,delta", "delta,bf16", "FP16", "none"):
            hcomm.set_compression(value)
        self._calls_still_work("after the string forms")

    def test_bad_kind_raises_invalid_argument_naming_it(self):
        cases = [
            (self.C.FP16 | self.C.BF16, "both FP16 and BF16"),
            (3, "both FP16 and BF16"),
            (7, "both FP16 and BF16"),
            (8, "bits"),
            (-1, "bits"),
            ("fp16,bf16", "both FP16 and BF16"),
            ("gzip", "not a compression"),
            ("none,delta", "not a compression"),
            ("fp16,fp16", "not a compression"),
            ("", "not a compression"),
            (1.0, "not float"),
            (True, "not bool"),
            (None, "not NoneType"),
        ]
        for bad, why in cases:
            with self.assertRaises(hcomm.InvalidArgumentError, msg=repr(bad)) as cm:
                hcomm.set_compression(bad)
            e = cm.exception
            self.assertEqual(e.status, hcomm.Status.ERR_INVALID_ARGUMENT)
            self.assertIn("set_compression: kind", str(e))
            self.assertIn(why, str(e), repr(bad))
        self._calls_still_work("after the refusals")

    def test_group_convention(self):
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "group must be"):
            hcomm.set_compression(self.C.FP16, group="world")
        c = hcomm.Communicator.from_config(rank=0, world_size=1, timeout_ms=5000)
        c.set_compression(self.C.FP16 | self.C.DELTA)
        c.destroy()
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "destroyed"):
            hcomm.set_compression(self.C.FP16, group=c)


class PointToPointTest(unittest.TestCase):
    def test_send_to_self(self):
        a = np.arange(10, dtype=np.int64)
        req = hcomm.isend(a, 0, tag=3)
        b = np.zeros(10, np.int64)
        self.assertEqual(hcomm.recv(b, src=0, tag=3), 0)
        req.wait()
        np.testing.assert_array_equal(a, b)
        self.assertEqual((req.source, req.tag, req.count), (0, 3, 10))

    def test_blocking_send_then_any_source_any_tag(self):
        hcomm.send(np.array([7, 8], np.int32), 0, tag=11)
        b = np.zeros(4, np.int32)  # Capacity 4; the message has 2.
        self.assertEqual(hcomm.recv(b, tag=None), 0)
        np.testing.assert_array_equal(b, [7, 8, 0, 0])

    def test_irecv_before_isend(self):
        b = np.zeros(5, np.float32)
        r = hcomm.irecv(b, src=None, tag=4)
        self.assertFalse(r.is_completed())
        s = hcomm.isend(np.full(5, 1.5, np.float32), 0, tag=4)
        hcomm.wait_all([r, s])
        self.assertTrue(r.is_completed())
        self.assertEqual(r.source, 0)
        self.assertEqual(r.count, 5)
        np.testing.assert_array_equal(b, 1.5)
        self.assertIn("done", repr(r))

    def test_large_message(self):
        a = np.random.default_rng(1).random(1 << 20)  # 8 MiB
        b = np.zeros_like(a)
        r = hcomm.irecv(b, 0, tag=5)
        hcomm.send(a, 0, tag=5)
        r.wait()
        np.testing.assert_array_equal(a, b)

    def test_close_pending_request(self):
        b = bytearray(8)
        with hcomm.irecv(b, 0, tag=12345) as r:
            self.assertFalse(r.is_completed())
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "closed"):
            r.wait()
        # The cancelled receive must not take a later message.
        hcomm.send(b"abcdefgh", 0, tag=12345)
        c = bytearray(8)
        hcomm.recv(c, 0, tag=12345)
        self.assertEqual(bytes(c), b"abcdefgh")

    def test_gil_is_released_while_blocked(self):
        got = {}
        buf = np.zeros(3, np.int32)

        def receiver():
            got["src"] = hcomm.recv(buf, src=None, tag=77)

        th = threading.Thread(target=receiver)
        th.start()
        time.sleep(0.2)  # The receiver is blocked in C; this thread still runs.
        self.assertTrue(th.is_alive())
        hcomm.send(np.array([1, 2, 3], np.int32), 0, tag=77)
        th.join(10)
        self.assertFalse(th.is_alive())
        self.assertEqual(got["src"], 0)
        np.testing.assert_array_equal(buf, [1, 2, 3])


def _signal_soon(sig):
    """Sends this process `sig` in 0.2 s (from a thread); join() the result."""
    timer = threading.Timer(0.2, os.kill, (os.getpid(), sig))
    timer.start()
    return timer


class ErrorTest(unittest.TestCase):
    def test_ctrl_c_ends_a_blocking_call(self):
        # SIGINT while the main thread waits in C: the call runs Python's
        # handler within 100 ms and ends as at its deadline (the receive is
        # withdrawn), and the KeyboardInterrupt is what the caller gets, not
        # a TimeoutError built in its place, long before the 30 s timeout.
        comm = hcomm.get_default_group()
        comm.set_timeout(30000)
        timer = _signal_soon(signal.SIGINT)
        t0 = time.monotonic()
        try:
            with self.assertRaises(KeyboardInterrupt):
                hcomm.recv(np.zeros(1), src=0, tag=4343)  # nobody sends it
        finally:
            timer.join()
            comm.set_timeout(5000)
        self.assertLess(time.monotonic() - t0, 5)
        # The communicator goes on, and the withdrawn receive takes nothing.
        hcomm.send(np.array([7.0]), 0, tag=4343)
        got = np.zeros(1)
        hcomm.recv(got, src=0, tag=4343)
        self.assertEqual(got[0], 7.0)

    def test_a_handler_that_does_not_raise_leaves_the_call_waiting(self):
        # Handlers run from inside the wait; one that returns normally does
        # not end the call, which then ends at its own deadline.
        seen = []
        old = signal.signal(signal.SIGUSR1, lambda *_: seen.append(1))
        comm = hcomm.get_default_group()
        comm.set_timeout(1000)
        timer = _signal_soon(signal.SIGUSR1)
        t0 = time.monotonic()
        try:
            with self.assertRaises(hcomm.TimeoutError):
                hcomm.recv(np.zeros(1), src=0, tag=4344)
        finally:
            timer.join()
            comm.set_timeout(5000)
            signal.signal(signal.SIGUSR1, old)
        self.assertEqual(seen, [1])
        self.assertGreater(time.monotonic() - t0, 0.9)

    def test_ctrl_c_ends_a_work_wait_at_once(self):
        # A Work still pending (made by hand: on one rank every collective
        # is done at once) is waited for in Python, which Ctrl-C interrupts.
        work = hcomm.Work(())
        timer = _signal_soon(signal.SIGINT)
        t0 = time.monotonic()
        try:
            with self.assertRaises(KeyboardInterrupt):
                work.wait()
        finally:
            timer.join()
        self.assertLess(time.monotonic() - t0, 5)
        self.assertFalse(work.is_completed())

    def test_hierarchy(self):
        classes = {
            hcomm.InvalidArgumentError: 1, hcomm.NoDeviceError: 2, hcomm.OutOfMemoryError: 3,
            hcomm.TimeoutError: 4, hcomm.PeerFailureError: 5, hcomm.MismatchError: 6,
            hcomm.AbortedError: 7, hcomm.UnavailableError: 8, hcomm.PermissionDeniedError: 9,
            hcomm.NotSupportedError: 10, hcomm.InternalError: 11,
        }
        for cls, code in classes.items():
            self.assertTrue(issubclass(cls, hcomm.HcommError), cls)
            self.assertEqual(cls.status, code)
            e = cls("boom", code)
            self.assertEqual(str(e), "boom")
            self.assertEqual(e.status_name, "HCOMM_" + hcomm.Status(code).name)
            e2 = pickle.loads(pickle.dumps(e))
            self.assertIs(type(e2), cls)
            self.assertEqual((str(e2), e2.status), ("boom", code))
        self.assertTrue(issubclass(hcomm.TimeoutError, builtins.TimeoutError))
        self.assertIsNot(hcomm.TimeoutError, builtins.TimeoutError)
        self.assertEqual(hcomm.TimeoutError.__module__, "hcomm")
        # torch.distributed users catch RuntimeError; the C name of code 3 too.
        self.assertTrue(issubclass(hcomm.HcommError, RuntimeError))
        self.assertIs(hcomm.OutOfMemError, hcomm.OutOfMemoryError)

    def test_invalid_argument_from_c(self):
        with self.assertRaises(hcomm.InvalidArgumentError) as cm:
            hcomm.send(np.zeros(2), dst=3)
        e = cm.exception
        self.assertEqual(e.status, 1)
        self.assertEqual(e.status_name, "HCOMM_ERR_INVALID_ARGUMENT")
        self.assertIn("peer 3", str(e))
        self.assertTrue(str(e).startswith("hcomm operation invalid argument: "), str(e))
        with self.assertRaises(hcomm.InvalidArgumentError):
            hcomm.send(np.zeros(2), 0, tag=-5)
        with self.assertRaises(hcomm.InvalidArgumentError):
            hcomm.send(np.zeros(2), "zero")
        with self.assertRaises(hcomm.InvalidArgumentError):
            hcomm.send(np.zeros(2), 2**40)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "group must be"):
            hcomm.barrier(group="world")

    def test_timeout(self):
        COMM.set_timeout(200)
        try:
            t0 = time.monotonic()
            with self.assertRaises(builtins.TimeoutError) as cm:
                hcomm.recv(np.zeros(4), src=0, tag=999)
            self.assertLess(time.monotonic() - t0, 5)
            e = cm.exception
            self.assertIsInstance(e, hcomm.TimeoutError)
            self.assertIsInstance(e, hcomm.HcommError)
            self.assertEqual(e.status, 4)
            self.assertIn("tag 999", str(e))
            self.assertIsInstance(e, RuntimeError)
            self.assertTrue(str(e).startswith("hcomm operation timeout: "), str(e))
            # An irecv's wait times out too and may be waited on again.
            r = hcomm.irecv(np.zeros(4), src=0, tag=998)
            with self.assertRaises(hcomm.TimeoutError):
                r.wait()
            hcomm.send(np.ones(4), 0, tag=998)
            self.assertTrue(r.wait())
        finally:
            COMM.set_timeout(5000)
        with self.assertRaises(hcomm.InvalidArgumentError):
            COMM.set_timeout(-1)

    def test_mismatch(self):
        hcomm.send(np.arange(8, dtype=np.int32), 0, tag=21)
        small = np.zeros(4, np.int32)
        with self.assertRaises(hcomm.MismatchError) as cm:
            hcomm.recv(small, 0, tag=21)
        self.assertEqual(cm.exception.status, 6)
        np.testing.assert_array_equal(small, 0)  # Nothing written.


class ThreadsTest(unittest.TestCase):
    """Closing a handle while another thread is in a call on it: the close
    waits for the call (C must not free the handle under it), calls begun
    after the close raise, and abort() still ends the waited-for call."""

    def test_destroy_waits_for_a_blocked_call_and_abort_ends_it(self):
        c = hcomm.Communicator.from_config(rank=0, world_size=1, timeout_ms=10000)
        got = {}

        def receiver():
            try:
                c.recv(np.zeros(1), src=0, tag=4242)  # Nobody sends it.
            except hcomm.HcommError as e:
                got["recv"] = e

        recv_thread = start_thread(receiver)
        wait_until(lambda: c._use.busy, "the receive has begun")
        destroy_thread = start_thread(c.destroy)
        wait_until(lambda: c.closed, "destroy() has begun")
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "destroyed"):
            c.barrier()
        self.assertTrue(destroy_thread.is_alive())  # Waits for the receive.
        self.assertIsNotNone(c._handle)
        c.abort()
        recv_thread.join(5)
        destroy_thread.join(5)
        self.assertFalse(destroy_thread.is_alive())
        self.assertIsInstance(got.get("recv"), hcomm.AbortedError)
        self.assertIsNone(c._handle)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "destroyed"):
            c.abort()

    def test_request_close_waits_for_a_wait(self):
        buf = np.zeros(3, np.int32)
        req = hcomm.irecv(buf, src=0, tag=4343)
        got = {}
        wait_thread = start_thread(lambda: got.setdefault("wait", req.wait()))
        wait_until(lambda: req._use.busy, "wait() has begun")
        close_thread = start_thread(req.close)
        wait_until(lambda: req._use.closed, "close() has begun")
        self.assertTrue(close_thread.is_alive())  # Waits for the wait.
        hcomm.send(np.array([4, 5, 6], np.int32), 0, tag=4343)
        wait_thread.join(5)
        close_thread.join(5)
        self.assertFalse(close_thread.is_alive())
        self.assertIs(got.get("wait"), True)
        np.testing.assert_array_equal(buf, [4, 5, 6])
        self.assertEqual(req.source, 0)

    def test_forgotten_communicator_with_a_blocked_call_at_exit(self):
        # A daemon thread still in a call when the program ends: the at-exit
        # safety net leaves that communicator to the process's exit instead
        # of waiting for the call (60 s here).
        script = (
            "import threading, numpy as np, hcomm\n"
            "c = hcomm.init(rank=0, world_size=1, timeout_ms=60000)\n"
            "recv = lambda: c.recv(np.zeros(1), src=0, tag=1)\n"
            "threading.Thread(target=recv, daemon=True).start()\n"
            "while not c._use.busy: pass\n"
            "print('exiting', flush=True)\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(hcomm.__file__)))
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=50)
        self.assertEqual((p.returncode, p.stdout), (0, "exiting\n"))
        self.assertLess(time.monotonic() - t0, 30)


class BufferTest(unittest.TestCase):
    DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
              np.float32, np.float64]

    def roundtrip(self, send, recv):
        r = hcomm.irecv(recv, 0, tag=31)
        hcomm.send(send, 0, tag=31)
        r.wait()
        return r

    def test_numpy_dtypes(self):
        for dt in self.DTYPES:
            a = (np.arange(12) % 100).astype(dt).reshape(3, 4)
            b = np.zeros_like(a)
            r = self.roundtrip(a, b)
            np.testing.assert_array_equal(a, b, err_msg=str(dt))
            self.assertEqual(r.count, 12)
            hcomm.all_reduce(b, op=hcomm.ReduceOp.SUM)
            np.testing.assert_array_equal(a, b)
            buf = hcomm._tensors.as_buffer(a, False)
            self.assertEqual(buf.dtype_name, np.dtype(dt).name)
            self.assertEqual(buf.nbytes, a.nbytes)
        zero_d = np.array(3.5)
        hcomm.all_reduce(zero_d)
        self.assertEqual(float(zero_d), 3.5)

    def test_bfloat16_when_available(self):
        try:
            import ml_dtypes  # noqa: F401
        except ImportError:
            self.skipTest("no numpy bfloat16 dtype (ml_dtypes not installed)")
        a = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
        buf = hcomm._tensors.as_buffer(a, True)
        self.assertEqual(buf.dtype, hcomm._native.HCOMM_BFLOAT16)
        hcomm.all_reduce(a)

    def test_unsupported_dtypes(self):
        for a in (np.zeros(3, np.int16), np.zeros(3, bool), np.zeros(3, np.complex64),
                  np.zeros(3, ">f4"), np.array(["x"])):
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "unsupported dtype",
                                        msg=str(a.dtype)):
                hcomm.send(a, 0)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "buffer format"):
            hcomm.send(array.array("h", [1, 2]), 0)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "not a tensor"):
            hcomm.send([1, 2, 3], 0)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "not a tensor"):
            hcomm.send("text", 0)

    def test_buffer_protocol_objects(self):
        r = self.roundtrip(b"hello", bytearray(5))  # bytes are fine to send
        self.assertEqual(r.count, 5)
        got = bytearray(8)
        self.roundtrip(bytearray(b"12345678"), got)
        self.assertEqual(got, b"12345678")
        ai = array.array("i", [1, 2, 3])
        bi = array.array("i", [0, 0, 0])
        self.roundtrip(ai, bi)
        self.assertEqual(bi.tolist(), [1, 2, 3])
        ad = array.array("d", [0.5, 1.5])
        hcomm.all_reduce(ad, op=hcomm.ReduceOp.MAX)
        self.assertEqual(ad.tolist(), [0.5, 1.5])
        aq = array.array("q", [2**40])
        hcomm.all_reduce(aq)
        self.assertEqual(aq[0], 2**40)
        self.assertEqual(hcomm._tensors.as_buffer(array.array("Q", [1]), False).dtype_name,
                         "uint64")
        self.assertEqual(hcomm._tensors.as_buffer(array.array("f", [1]), False).dtype_name,
                         "float32")
        self.assertEqual(hcomm._tensors.as_buffer(b"xy", False).dtype_name, "uint8")
        mv = memoryview(bytearray(16)).cast("i")
        self.roundtrip(np.array([9, 8, 7, 6], np.int32), mv)
        self.assertEqual(mv.tolist(), [9, 8, 7, 6])

    def test_zero_copy(self):
        base = np.zeros(10, np.float64)
        view = base[2:6]  # Contiguous view: receiving into it writes into base.
        self.roundtrip(np.array([1.0, 2.0, 3.0, 4.0]), view)
        np.testing.assert_array_equal(base, [0, 0, 1, 2, 3, 4, 0, 0, 0, 0])
        ba = bytearray(10)
        self.roundtrip(b"xyz", memoryview(ba)[4:7])
        self.assertEqual(bytes(ba), b"\0\0\0\0xyz\0\0\0")
        arr = np.arange(4, dtype=np.float32)
        buf = hcomm._tensors.as_buffer(arr, True)
        self.assertEqual(buf.address(), arr.__array_interface__["data"][0])

    def test_non_contiguous(self):
        a = np.arange(10, dtype=np.float32)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "not C-contiguous"):
            hcomm.all_reduce(a[::2])
        f = np.asfortranarray(np.zeros((3, 4)))
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "not C-contiguous"):
            hcomm.send(f, 0)
        mv = memoryview(bytearray(8))[::2]
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "not C-contiguous"):
            hcomm.send(mv, 0)

    def test_read_only(self):
        a = np.arange(4, dtype=np.float32)
        a.flags.writeable = False
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "read-only"):
            hcomm.all_reduce(a)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "read-only"):
            hcomm.recv(a, 0)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "read-only"):
            hcomm.irecv(b"abcd", 0)
        r = hcomm.isend(a, 0, tag=41)  # Reading from a read-only array is fine.
        b = np.zeros(4, np.float32)
        hcomm.recv(b, 0, tag=41)
        r.wait()
        np.testing.assert_array_equal(a, b)

    def test_native_buffer_typemap_errors(self):
        # The extension module itself turns a failed buffer export into
        # InvalidArgumentError naming the function and parameter.
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "hcomm_recv: parameter 'buf'"):
            hcomm._native.hcomm_recv(b"abc", 3, hcomm._native.HCOMM_UINT8, 0, 0, COMM._handle)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "hcomm_send: parameter 'buf'"):
            hcomm._native.hcomm_send(object(), 3, hcomm._native.HCOMM_UINT8, 0, 0, COMM._handle)

    def test_request_keeps_bytearray_unresizable(self):
        ba = bytearray(4)
        r = hcomm.irecv(ba, 0, tag=51)
        with self.assertRaises(BufferError):
            ba.extend(b"more")  # The pending receive still points into ba.
        hcomm.send(b"abcd", 0, tag=51)
        r.wait()
        ba.extend(b"more")
        self.assertEqual(bytes(ba), b"abcdmore")


class ChannelTest(unittest.TestCase):
    def name(self):
        return "pyunit-%d-%s" % (os.getpid(), self._testMethodName)

    def test_write_read(self):
        name = self.name()
        with hcomm.SharedMemoryChannel(name, 4096, create=True) as ch:
            self.assertTrue(os.path.exists("/dev/shm/hcomm-ch-" + name))
            with hcomm.SharedMemoryChannel(name, 0) as reader:
                ch.write(b"first")
                ch.write(np.arange(3, dtype=np.int32))
                ch.write(b"")
                self.assertEqual(reader.read(), b"first")
                self.assertEqual(np.frombuffer(reader.read(), np.int32).tolist(), [0, 1, 2])
                self.assertEqual(reader.read(), b"")
                with self.assertRaises(hcomm.TimeoutError):
                    reader.read(timeout_ms=0)
        self.assertTrue(ch.closed)
        self.assertFalse(os.path.exists("/dev/shm/hcomm-ch-" + name))
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "closed"):
            ch.write(b"x")

    def test_ctrl_c_ends_a_blocking_read(self):
        # A read of a minute that nothing will satisfy: Ctrl-C ends it within
        # 100 ms or so, and the channel still works.
        with hcomm.SharedMemoryChannel(self.name(), 4096, create=True) as ch:
            timer = _signal_soon(signal.SIGINT)
            t0 = time.monotonic()
            try:
                with self.assertRaises(KeyboardInterrupt):
                    ch.read(timeout_ms=60000)
            finally:
                timer.join()
            self.assertLess(time.monotonic() - t0, 5)
            ch.write(b"after")
            self.assertEqual(ch.read(), b"after")

    def test_read_grows_its_buffer(self):
        with hcomm.SharedMemoryChannel(self.name(), 1 << 20, create=True) as ch:
            big = os.urandom(300000)  # Larger than read()'s first buffer.
            ch.write(big)
            self.assertEqual(ch.read(), big)
            ch.write(b"0123456789")
            small = bytearray(4)
            with self.assertRaises(hcomm.MismatchError) as cm:
                ch.read_into(small)
            self.assertEqual(cm.exception.nbytes, 10)
            buf = bytearray(16)
            self.assertEqual(ch.read_into(buf), 10)
            self.assertEqual(bytes(buf[:10]), b"0123456789")

    def test_close_waits_for_a_read(self):
        name = self.name()
        with hcomm.SharedMemoryChannel(name, 4096, create=True) as writer:
            reader = hcomm.SharedMemoryChannel(name, 0, timeout_ms=10000)
            got = {}
            read_thread = start_thread(lambda: got.setdefault("read", reader.read()))
            wait_until(lambda: reader._use.busy, "read() has begun")
            close_thread = start_thread(reader.close)
            wait_until(lambda: reader.closed, "close() has begun")
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "closed"):
                reader.read(timeout_ms=0)
            self.assertTrue(close_thread.is_alive())  # Waits for the read.
            writer.write(b"ends the read")
            read_thread.join(5)
            close_thread.join(5)
            self.assertFalse(close_thread.is_alive())
            self.assertEqual(got.get("read"), b"ends the read")

    def test_nul_in_name_is_invalid(self):
        # C would read "<name>" alone and make that channel.
        name = self.name()
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "channel name.*NUL"):
            hcomm.SharedMemoryChannel(name + "\0more", 64, create=True)
        self.assertFalse(os.path.exists("/dev/shm/hcomm-ch-" + name))

    def test_errors(self):
        name = self.name()
        with self.assertRaises(hcomm.NoDeviceError):
            hcomm.SharedMemoryChannel(name, 64)
        with hcomm.SharedMemoryChannel(name, 64, create=True) as ch:
            with self.assertRaises(hcomm.InvalidArgumentError):
                hcomm.SharedMemoryChannel(name, 64, create=True)
            with self.assertRaises(hcomm.InvalidArgumentError):
                ch.write(bytes(100))  # Never fits.
            ch.write(bytes(40))
            with self.assertRaises(hcomm.TimeoutError):
                ch.write(bytes(40), timeout_ms=50)  # Full.
        with self.assertRaises(hcomm.InvalidArgumentError):
            hcomm.SharedMemoryChannel("bad/name", 64, create=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
