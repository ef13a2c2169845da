package org.hcomm;

import static org.hcomm.CommunicatorTest.direct;
import static org.hcomm.CommunicatorTest.expect;
import static org.hcomm.CommunicatorTest.single;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

/**
 * Streams and events on a world of one rank: every kind of operation, arrays staged and written
 * back, futures (their order, get() and isDone() driving the stream), events, failures, bad
 * arguments and closed handles. What needs several ranks (priorities, matching contexts against
 * a peer, a collective refused on one rank) is MultiRankMain's.
 */
public class StreamTest {
  private Communicator comm;
  private Stream s;

  @Before
  public void setUp() {
    comm = Communicator.init(single());
    s = comm.stream(0);
  }

  @After
  public void tearDown() {
    s.close();
    comm.close();
  }

  /** The HcommException that f failed with (join wraps it). */
  static HcommException failureOf(CompletableFuture<Void> f) {
    try {
      f.join();
    } catch (CompletionException e) {
      assertTrue("cause " + e.getCause(), e.getCause() instanceof HcommException);
      return (HcommException) e.getCause();
    }
    fail("the future completed normally");
    return null;
  }

  @Test
  public void everyKindOfOperation() {
    int[] ar = {1, -2, 3};
    ByteBuffer arDirect = direct(8);
    arDirect.putDouble(0, 2.5);
    long[] bc = {5, 6};
    float[] red = {1.5f};
    double[] agSend = {7, 8};
    double[] ag = new double[3];
    ag[2] = -1; // beyond size x send: left alone
    int[] rsIn = {4, 5};
    int[] rs = new int[2];
    byte[] a2a = new byte[2];
    long[] ga = new long[1];
    float[] sc = new float[2];
    int[] got = {0, 0, 0, -1};
    List<CompletableFuture<Void>> fs = new ArrayList<>();
    fs.add(s.allReduce(ar, ReduceOp.SUM));
    fs.add(s.allReduce(arDirect, DType.FLOAT64, ReduceOp.MAX));
    fs.add(s.broadcast(bc, 0));
    fs.add(s.reduce(red, ReduceOp.PROD, 0));
    fs.add(s.allGather(agSend, ag));
    fs.add(s.reduceScatter(rsIn, rs, ReduceOp.SUM));
    fs.add(s.allToAll(new byte[] {9, 10}, a2a));
    fs.add(s.gather(new long[] {11}, ga, 0));
    fs.add(s.scatter(new float[] {12f, 13f}, sc, 0));
    fs.add(s.barrier());
    fs.add(s.send(new int[] {7, 8}, 0, 3));
    fs.add(s.recv(got, 0, 3));
    s.synchronize();
    for (CompletableFuture<Void> f : fs) {
      assertTrue(f.isDone());
      assertFalse(f.isCompletedExceptionally());
    }
    assertArrayEquals(new int[] {1, -2, 3}, ar);
    assertEquals(2.5, arDirect.getDouble(0), 0);
    assertArrayEquals(new long[] {5, 6}, bc);
    assertEquals(1.5f, red[0], 0);
    assertArrayEquals(new double[] {7, 8, -1}, ag, 0);
    assertArrayEquals(new int[] {4, 5}, rs);
    assertArrayEquals(new byte[] {9, 10}, a2a);
    assertArrayEquals(new long[] {11}, ga);
    assertArrayEquals(new float[] {12f, 13f}, sc, 0);
    // A shorter message fills the front; the rest of the array stays.
    assertArrayEquals(new int[] {7, 8, 0, -1}, got);
    assertTrue(s.query());
  }

  @Test
  public void arraysAreStagedAtTheCall() {
    int[] out = {42};
    s.send(out, 0, 4);
    out[0] = 0; // staged at the call: the message holds 42
    int[] into = {-1};
    CompletableFuture<Void> r = s.recv(into, 0, 4);
    s.synchronize();
    assertTrue(r.isDone());
    assertEquals(42, into[0]);
    assertEquals("a send writes nothing back", 0, out[0]);
  }

  @Test
  public void operationsChainThroughAnArray() {
    // x is received into, then sent on from the same staged copy: the second send sees the
    // first receive's data, as C would through one buffer.
    int[] x = {0};
    int[] y = {0};
    s.send(new int[] {17}, 0, 1);
    s.recv(x, 0, 1);
    s.send(x, 0, 2);
    s.recv(y, 0, 2);
    s.synchronize();
    assertEquals(17, x[0]);
    assertEquals(17, y[0]);
  }

  @Test
  public void getAndJoinWaitForTheOperationAlone() throws Exception {
    long[] into = new long[2];
    s.send(new long[] {3, 4}, 0, 9);
    CompletableFuture<Void> r = s.recv(into, 0, 9);
    assertEquals(null, r.get());
    assertArrayEquals(new long[] {3, 4}, into);
    double[] d = new double[1];
    s.send(new double[] {0.5}, 0, 10);
    CompletableFuture<Void> q = s.recv(d, 0, 10);
    q.join();
    assertEquals(0.5, d[0], 0);
    byte[] b = new byte[1];
    s.send(new byte[] {8}, 0, 11);
    CompletableFuture<Void> p = s.recv(b, 0, 11);
    while (!p.isDone()) { // isDone() looks at the operation's mark itself
      Thread.yield();
    }
    assertEquals(8, b[0]);
  }

  @Test
  public void futuresCompleteInQueueOrder() {
    List<Integer> order = Collections.synchronizedList(new ArrayList<>());
    List<Integer> want = new ArrayList<>();
    int[] v = {1};
    for (int k = 0; k < 50; ++k) {
      final int i = k;
      CompletableFuture<Void> f = k % 2 == 0 ? s.allReduce(v, ReduceOp.SUM) : s.barrier();
      f.thenRun(() -> order.add(i));
      want.add(k);
    }
    s.synchronize();
    assertEquals(want, order);
  }

  @Test
  public void eventsMarkAStream() {
    try (Event e = new Event()) {
      assertTrue("an event never recorded is reached", e.query());
      e.synchronize();
      int[] x = new int[1];
      s.send(new int[] {5}, 0, 1);
      CompletableFuture<Void> r = s.recv(x, 0, 1);
      e.record(s);
      e.synchronize(); // completes the futures before the mark
      assertTrue(e.query());
      assertTrue(r.isDone());
      assertEquals(5, x[0]);
    }
  }

  @Test
  public void anEventOrdersAnotherStream() {
    // b's send reads x after a's receive has written it: b waits for a's mark.
    try (Stream b = comm.stream(5); Event e = new Event()) {
      int[] x = {0};
      int[] y = {0};
      s.send(new int[] {9}, 0, 1);
      s.recv(x, 0, 1);
      e.record(s);
      b.waitEvent(e);
      b.send(x, 0, 2);
      b.recv(y, 0, 2);
      e.record(b);
      e.synchronize();
      assertEquals(9, y[0]);
      // b is past its wait for s's mark: s's recv into x is seen done too, and x, used by both
      // streams, is written back.
      assertEquals(9, x[0]);
      assertEquals(5, b.priority());
    }
  }

  @Test
  public void aFailureFailsTheRestUntilSynchronize() {
    s.send(new int[4], 0, 3);
    CompletableFuture<Void> r = s.recv(new int[2], 0, 3); // too small: MISMATCH
    CompletableFuture<Void> after = s.barrier(); // skipped: fails the same way
    HcommException e = expect(Status.MISMATCH, s::synchronize);
    assertTrue(e.getMessage(), e.getMessage().contains("recv"));
    assertSame(Status.MISMATCH, failureOf(r).kind());
    assertSame(Status.MISMATCH, failureOf(after).kind());
    try {
      after.get();
      fail("get() of a failed operation returned");
    } catch (ExecutionException | InterruptedException x) {
      assertTrue(x.getCause() instanceof HcommException);
    }
    s.synchronize(); // cleared
    int[] v = new int[1];
    s.send(new int[] {6}, 0, 4);
    s.recv(v, 0, 4).join();
    assertEquals(6, v[0]);
  }

  @Test
  public void aTimedGetAndATimeout() throws Exception {
    comm.set("timeout_ms", "400");
    try (Stream t = comm.stream(0)) {
      CompletableFuture<Void> r = t.recv(new int[1], 0, 77); // nobody sends tag 77
      try {
        r.get(20, TimeUnit.MILLISECONDS);
        fail("get(20 ms) returned");
      } catch (TimeoutException expected) {
        // still pending
      }
      HcommException e;
      try {
        r.join();
        fail("join() of a recv that nobody sends returned");
        return;
      } catch (CompletionException x) {
        e = (HcommException) x.getCause(); // the operation timed out
      } catch (HcommException x) {
        e = x; // the wait for the stream gave up first
      }
      assertSame(Status.TIMEOUT, e.kind());
      expect(Status.TIMEOUT, t::synchronize);
      assertSame(Status.TIMEOUT, failureOf(r).kind());
      assertTrue(failureOf(r).getMessage(), failureOf(r).getMessage().contains("77"));
    }
  }

  @Test
  public void closeFinishesQueuedWork() {
    Stream t = comm.stream(1);
    float[] x = new float[3];
    t.send(new float[] {1f, 2f, 3f}, 0, 8);
    CompletableFuture<Void> r = t.recv(x, 0, 8);
    t.close();
    assertTrue(r.isDone());
    assertArrayEquals(new float[] {1f, 2f, 3f}, x, 0);
    t.close(); // idempotent
    assertTrue(t.isClosed());
    assertEquals("Stream(closed)", t.toString());
    HcommException e = expect(Status.INVALID_ARGUMENT, () -> t.allReduce(x, ReduceOp.SUM));
    assertTrue(e.getMessage(), e.getMessage().contains("stream is closed"));
    expect(Status.INVALID_ARGUMENT, t::synchronize);
    expect(Status.INVALID_ARGUMENT, t::query);
    try (Event ev = new Event()) {
      expect(Status.INVALID_ARGUMENT, () -> ev.record(t));
      expect(Status.INVALID_ARGUMENT, () -> t.waitEvent(ev));
    }
  }

  /** f must throw INVALID_ARGUMENT with a message containing `names`. */
  static void invalid(String names, Supplier<?> f) {
    HcommException e = expect(Status.INVALID_ARGUMENT, f::get);
    assertTrue("'" + e.getMessage() + "' does not name " + names,
        e.getMessage().contains(names));
  }

  @Test
  public void badArgumentsNameTheArgument() {
    invalid("Stream.allReduce: buf is null", () -> s.allReduce((int[]) null, ReduceOp.SUM));
    invalid("Stream.allReduce: op is null", () -> s.allReduce(new int[1], null));
    invalid("Stream.broadcast: buf: the ByteBuffer is read-only",
        () -> s.broadcast(ByteBuffer.allocate(4).asReadOnlyBuffer(), 0));
    invalid("read-only", () -> s.recv(direct(4).asReadOnlyBuffer(), 0, 1));
    invalid("Stream.send: buf is null", () -> s.send((long[]) null, 0, 1));
    invalid("peer", () -> s.send(new int[1], 1, 0)); // one rank: no rank 1
    invalid("tag", () -> s.recv(new int[1], 0, -5));
    invalid("root", () -> s.broadcast(new int[1], 3));
    invalid("Stream.allGather: recv holds 1 elements but needs 2",
        () -> s.allGather(new int[2], new int[1]));
    invalid("Stream.scatter: send holds 1 elements but needs 2",
        () -> s.scatter(new int[1], new int[2], 0));
    invalid("Stream.reduceScatter: send: dtype is null",
        () -> s.reduceScatter(direct(4), direct(4), null, ReduceOp.SUM));
    invalid("Stream.waitEvent: event is null", () -> {
      s.waitEvent(null);
      return null;
    });
    invalid("Event.record: stream is null", () -> {
      try (Event e = new Event()) {
        e.record(null);
      }
      return null;
    });
    invalid("Stream: comm is null", () -> new Stream(null, 0));
    // The refused collectives took their turns; nothing failed, and the stream still works.
    s.synchronize();
    int[] v = {3};
    s.allReduce(v, ReduceOp.MAX);
    s.synchronize();
    assertEquals(3, v[0]);
  }

  @Test
  public void closedEventsAndCommunicators() {
    Event e = new Event();
    e.close();
    e.close();
    assertTrue(e.isClosed());
    HcommException x = expect(Status.INVALID_ARGUMENT, e::synchronize);
    assertTrue(x.getMessage(), x.getMessage().contains("event is closed"));
    expect(Status.INVALID_ARGUMENT, e::query);
    expect(Status.INVALID_ARGUMENT, () -> e.record(s));
    expect(Status.INVALID_ARGUMENT, () -> s.waitEvent(e));

    // A stream outlives its communicator.
    Communicator c = Communicator.init(single());
    try (Stream t = c.stream(2)) {
      c.close();
      expect(Status.INVALID_ARGUMENT, () -> c.stream(0));
      int[] v = new int[1];
      t.send(new int[] {12}, 0, 1);
      t.recv(v, 0, 1);
      t.synchronize();
      assertEquals(12, v[0]);
    }
  }

  @Test
  public void threadsShareAStream() throws Exception {
    // Sends and receives of distinct tags from 4 threads at once: each thread's pair is
    // queued in its order, whatever the interleaving.
    Thread[] threads = new Thread[4];
    Throwable[] failure = new Throwable[1];
    int[][] got = new int[threads.length][1];
    for (int t = 0; t < threads.length; ++t) {
      final int i = t;
      threads[t] = new Thread(() -> {
        try {
          for (int k = 0; k < 20; ++k) {
            s.send(new int[] {i * 100 + k}, 0, 10 + i);
            s.recv(got[i], 0, 10 + i).join();
            if (got[i][0] != i * 100 + k) {
              throw new AssertionError("thread " + i + " got " + got[i][0]);
            }
          }
        } catch (Throwable x) {
          synchronized (failure) {
            failure[0] = x;
          }
        }
      });
      threads[t].start();
    }
    for (Thread t : threads) {
      t.join();
    }
    if (failure[0] != null) {
      throw new AssertionError(failure[0]);
    }
    s.synchronize();
  }

  @Test
  public void droppedStreamsAreCleanedUp() throws Exception {
    // The Cleaner is a safety net: an unclosed stream with queued work and an unclosed event
    // must not crash when collected, and the stream's arrays are written back.
    int[] x = new int[1];
    for (int k = 0; k < 3; ++k) {
      Stream t = comm.stream(0);
      t.send(new int[] {k + 1}, 0, 1);
      t.recv(x, 0, 1);
      new Event().record(t);
    }
    for (int k = 0; k < 3; ++k) {
      System.gc();
      Thread.sleep(20);
    }
    int[] v = {1};
    s.allReduce(v, ReduceOp.SUM);
    s.synchronize();
    assertEquals(1, v[0]);
  }
}
