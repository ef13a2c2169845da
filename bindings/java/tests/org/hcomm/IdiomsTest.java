package org.hcomm;

import static org.hcomm.CommunicatorTest.expect;
import static org.hcomm.CommunicatorTest.single;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

/**
 * The Java idioms of the binding on a world of one rank: timed awaits, Thread.interrupt() ending
 * blocking calls, CompletableFutures of requests and streams that complete by themselves, an
 * exception subclass per status, and heap ByteBuffers.
 */
public class IdiomsTest {
  /** Far longer than any check here may take: only an interrupt ends these calls early. */
  private static final String LONG_TIMEOUT_MS = "60000";

  private Communicator comm;

  @Before
  public void setUp() {
    Map<String, String> cfg = single();
    cfg.put("timeout_ms", LONG_TIMEOUT_MS);
    comm = Communicator.init(cfg);
  }

  @After
  public void tearDown() {
    Thread.interrupted(); // a failed check must not leave the flag to the next test
    comm.close();
  }

  private static long millisSince(long startNanos) {
    return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNanos);
  }

  // --- Request.await(timeout, unit) --------------------------------------------------------

  @Test
  public void timedAwaitIsFalseWhilePendingAndTrueOnceDone() {
    int[] buf = new int[2];
    try (Request r = comm.irecv(buf, 0, 5)) {
      assertFalse(r.await(0, TimeUnit.MILLISECONDS));
      long t0 = System.nanoTime();
      assertFalse(r.await(50, TimeUnit.MILLISECONDS)); // nobody sends: false at the deadline
      long took = millisSince(t0);
      assertTrue("returned after " + took + " ms", took >= 50 && took < 1000);
      assertFalse(r.isCompleted());
      comm.send(new int[] {42, 43}, 0, 5); // the request is still valid and matches
      assertTrue(r.await(5, TimeUnit.SECONDS));
      assertArrayEquals(new int[] {42, 43}, buf);
      assertEquals(2, r.count());
      assertTrue(r.await(0, TimeUnit.NANOSECONDS)); // completed: true at once
    }
  }

  @Test
  public void timedAwaitThrowsTheFailureAndRefusesNullUnit() {
    try (Request r = comm.irecv(new int[1], 0, 6)) {
      HcommException e = expect(Status.INVALID_ARGUMENT, () -> r.await(1, null));
      assertTrue(e.getMessage(), e.getMessage().contains("Request.await: unit is null"));
      comm.send(new int[3], 0, 6); // too large for the receive
      expect(Status.MISMATCH, () -> r.await(5, TimeUnit.SECONDS));
    }
  }

  // --- Thread.interrupt() ------------------------------------------------------------------

  /** What a thread that ran a blocking call saw. */
  private static final class Outcome {
    volatile Throwable thrown;
    volatile boolean flagAfter;
    volatile long millis = -1;
  }

  /** Runs call on a new thread, interrupts it, and returns what it saw (within 5 s). */
  private static Outcome interrupted(Runnable call) throws InterruptedException {
    Outcome o = new Outcome();
    CountDownLatch started = new CountDownLatch(1);
    Thread t = new Thread(() -> {
      started.countDown();
      long t0 = System.nanoTime();
      try {
        call.run();
      } catch (Throwable e) {
        o.thrown = e;
      }
      o.millis = millisSince(t0);
      o.flagAfter = Thread.currentThread().isInterrupted();
    }, "blocked-call");
    t.start();
    assertTrue(started.await(5, TimeUnit.SECONDS));
    t.interrupt();
    t.join(5000);
    assertFalse("the interrupted call is still blocked after 5 s", t.isAlive());
    return o;
  }

  private static void assertInterrupted(Outcome o, String what) {
    assertTrue(what + " threw " + o.thrown, o.thrown instanceof HcommInterruptedException);
    HcommException e = (HcommException) o.thrown;
    assertSame(what + ": " + e, Status.TIMEOUT, e.kind());
    assertTrue(what + ": " + e.getMessage(), e.getMessage().contains("interrupted"));
    assertTrue(what + ": the interrupt flag was cleared", o.flagAfter);
    assertTrue(what + " took " + o.millis + " ms", o.millis >= 0 && o.millis < 1000);
  }

  @Test
  public void interruptEndsABlockedRecvAndKeepsTheFlag() throws Exception {
    Outcome o = interrupted(() -> comm.recv(new int[1], 0, 9)); // timeout_ms is 60 s
    assertInterrupted(o, "recv");
    assertTrue(o.thrown.getMessage(), o.thrown.getMessage().contains("Thread.interrupt()"));
    // The receive was withdrawn: the next message with that tag goes to the next receive.
    comm.send(new int[] {7}, 0, 9);
    int[] got = new int[1];
    comm.recv(got, 0, 9);
    assertEquals(7, got[0]);
  }

  @Test
  public void interruptEndsRequestAwaitsAndStreamWaits() throws Exception {
    try (Request r = comm.irecv(new int[1], 0, 10)) {
      assertInterrupted(interrupted(r::await), "Request.await()");
      assertInterrupted(interrupted(() -> r.await(60, TimeUnit.SECONDS)), "Request.await(60 s)");
      assertInterrupted(interrupted(() -> r.future().join()), "future().join()");
      Outcome g = interrupted(() -> {
        try {
          r.future().get();
        } catch (InterruptedException | ExecutionException e) {
          throw new IllegalStateException(e);
        }
      });
      // Future.get's own contract: InterruptedException, the flag cleared.
      assertTrue("get() threw " + g.thrown, g.thrown.getCause() instanceof InterruptedException);
      assertFalse(g.flagAfter);
      assertFalse(r.test()); // still pending, still valid
      comm.send(new int[] {1}, 0, 10);
      r.await();
    }
  }

  @Test
  public void interruptEndsStreamWaits() throws Exception {
    Stream s = comm.stream(0);
    // Nobody sends on the stream, and its own later send would queue behind the recv.
    CompletableFuture<Void> f = s.recv(new int[1], 0, 11);
    assertInterrupted(interrupted(f::join), "stream future join()");
    assertInterrupted(interrupted(s::synchronize), "Stream.synchronize()");
    Outcome g = interrupted(() -> {
      try {
        f.get();
      } catch (InterruptedException | ExecutionException e) {
        throw new IllegalStateException(e);
      }
    });
    assertTrue("get() threw " + g.thrown, g.thrown.getCause() instanceof InterruptedException);
    assertFalse(g.flagAfter);
    assertFalse(f.isDone()); // still queued
    comm.abort(); // ends the recv
    try {
      s.close();
    } catch (AbortedException e) {
      // the stream's error, not thrown by a synchronize yet
    }
    try {
      f.join();
      fail("the aborted recv succeeded");
    } catch (CompletionException e) {
      assertTrue("cause " + e.getCause(), e.getCause() instanceof AbortedException);
    }
  }

  // --- CompletableFuture -------------------------------------------------------------------

  @Test
  public void requestFutureCompletesByItself() throws Exception {
    int[] buf = new int[4];
    Request r = comm.irecv(buf, 0, 12);
    CompletableFuture<Request> f = r.future();
    assertSame(f, r.future());
    assertFalse(f.isDone());
    CountDownLatch ran = new CountDownLatch(1);
    AtomicReference<Integer> count = new AtomicReference<>();
    CompletableFuture<Integer> dependent = f.thenApply(Request::count);
    dependent.thenRun(ran::countDown);
    f.thenAccept(q -> count.set(q.count()));
    comm.send(new int[] {1, 2, 3}, 0, 12);
    // Nobody waits on r or f: the binding completes f, and runs the dependents.
    assertTrue("the future did not complete by itself", ran.await(5, TimeUnit.SECONDS));
    assertEquals(Integer.valueOf(3), dependent.getNow(null));
    assertEquals(Integer.valueOf(3), count.get());
    assertSame(r, f.get());
    assertArrayEquals(new int[] {1, 2, 3, 0}, buf);
    assertTrue(r.isCompleted());
    r.close();
    // A send's future; join waits on this thread.
    try (Request s = comm.isend(new long[] {5L}, 0, 13)) {
      long[] got = new long[1];
      comm.recv(got, 0, 13);
      assertSame(s, s.future().join());
      assertEquals(5L, got[0]);
    }
  }

  @Test
  public void requestFutureFailsWithTheStatusSubclass() throws Exception {
    Request r = comm.irecv(new int[1], 0, 14);
    CompletableFuture<Request> f = r.future();
    CountDownLatch failed = new CountDownLatch(1);
    AtomicReference<Throwable> seen = new AtomicReference<>();
    f.whenComplete((q, e) -> {
      seen.set(e);
      failed.countDown();
    });
    comm.send(new int[3], 0, 14); // a message larger than the receive: MISMATCH
    assertTrue(failed.await(5, TimeUnit.SECONDS));
    assertTrue("failed with " + seen.get(), seen.get() instanceof MismatchException);
    assertTrue(f.isCompletedExceptionally());
    try {
      f.get();
      fail("get() returned");
    } catch (ExecutionException e) {
      assertTrue(e.getCause() instanceof MismatchException);
      assertSame(Status.MISMATCH, ((HcommException) e.getCause()).kind());
    }
    try {
      f.join();
      fail("join() returned");
    } catch (CompletionException e) {
      assertTrue(e.getCause() instanceof MismatchException);
    }
    expect(Status.MISMATCH, r::test);
    r.close();
  }

  @Test
  public void closingAPendingRequestCancelsItsFuture() {
    Request r = comm.irecv(new int[1], 0, 15);
    CompletableFuture<Request> f = r.future();
    r.close();
    assertTrue(f.isCancelled());
    try {
      f.join();
      fail("join() of a cancelled future returned");
    } catch (CancellationException e) {
      // expected
    }
    expect(Status.INVALID_ARGUMENT, r::future); // closed
  }

  @Test
  public void streamFuturesCompleteByThemselves() throws Exception {
    try (Stream s = comm.stream(0)) {
      int[] x = {4, 5};
      CountDownLatch ran = new CountDownLatch(2);
      s.allReduce(x, ReduceOp.SUM).thenRun(ran::countDown);
      s.send(new int[2], 0, 16); // to itself, ahead of the recv that is too small for it
      CompletableFuture<Void> bad = s.recv(new int[1], 0, 16);
      bad.exceptionally(e -> {
        ran.countDown();
        return null;
      });
      // No call on the stream or the futures: the binding sees the operations run.
      assertTrue("stream futures did not complete by themselves", ran.await(5, TimeUnit.SECONDS));
      assertArrayEquals(new int[] {4, 5}, x);
      try {
        bad.join();
        fail("the too-small recv succeeded");
      } catch (CompletionException e) {
        assertTrue("cause " + e.getCause(), e.getCause() instanceof MismatchException);
      }
      expect(Status.MISMATCH, s::synchronize);
    }
  }

  // --- an exception class per status -------------------------------------------------------

  @Test
  public void eachStatusHasItsSubclass() {
    Object[][] table = {
      {Status.INVALID_ARGUMENT, InvalidArgumentException.class},
      {Status.NO_DEVICE, NoDeviceException.class},
      {Status.OUT_OF_MEM, OutOfMemException.class},
      {Status.TIMEOUT, TimeoutException.class},
      {Status.PEER_FAILURE, PeerFailureException.class},
      {Status.MISMATCH, MismatchException.class},
      {Status.ABORTED, AbortedException.class},
      {Status.UNAVAILABLE, UnavailableException.class},
      {Status.PERMISSION_DENIED, PermissionDeniedException.class},
      {Status.NOT_SUPPORTED, NotSupportedException.class},
      {Status.INTERNAL, InternalException.class},
    };
    assertEquals(Status.values().length - 2, table.length); // all but SUCCESS and UNKNOWN
    for (Object[] row : table) {
      Status st = (Status) row[0];
      HcommException e = HcommException.of(st.code(), "what happened");
      assertSame(st.toString(), row[1], e.getClass());
      assertEquals(st.code(), e.status());
      assertSame(st, e.kind());
      assertEquals("what happened", e.getMessage());
      assertEquals(((Class<?>) row[1]).getName() + ": " + st + " (" + st.code()
          + "): what happened", e.toString());
    }
    HcommException unknown = HcommException.of(99, "from a newer library");
    assertSame(HcommException.class, unknown.getClass());
    assertSame(Status.UNKNOWN, unknown.kind());
    HcommException interrupted = new HcommInterruptedException(4, "x");
    assertFalse(interrupted instanceof TimeoutException); // catching timeouts is not this
    assertSame(Status.TIMEOUT, interrupted.kind());
  }

  @Test
  public void theLibraryThrowsTheSubclass() {
    // From the native layer: MISMATCH, TIMEOUT (a deadline, not an interrupt), INVALID_ARGUMENT.
    comm.send(new int[] {1, 2}, 0, 17);
    HcommException m = expect(Status.MISMATCH, () -> comm.recv(new int[1], 0, 17));
    assertTrue(m instanceof MismatchException);
    comm.set("timeout_ms", "50");
    HcommException t = expect(Status.TIMEOUT, () -> comm.recv(new int[1], 0, 18));
    assertTrue(t instanceof TimeoutException);
    assertFalse(t instanceof HcommInterruptedException);
    assertFalse(t.getMessage(), t.getMessage().contains("interrupted"));
    assertTrue(expect(Status.INVALID_ARGUMENT, () -> comm.send(new int[1], 5, 0))
        instanceof InvalidArgumentException);
    // From the Java layer: a closed handle, a bad argument.
    Request r = comm.isend(new int[1], 0, 19);
    r.close();
    assertTrue(expect(Status.INVALID_ARGUMENT, r::test) instanceof InvalidArgumentException);
    comm.set("timeout_ms", LONG_TIMEOUT_MS);
    comm.recv(new int[1], 0, 19); // the send went out anyway
    comm.abort();
    assertTrue(expect(Status.ABORTED, comm::barrier) instanceof AbortedException);
  }

  // --- heap ByteBuffers --------------------------------------------------------------------

  @Test
  public void heapByteBuffersSendAndReceiveFromTheirPosition() {
    ByteBuffer out = ByteBuffer.allocate(8);
    out.put(new byte[] {9, 9, 1, 2, 3, 9, 9, 9});
    out.position(2).limit(5); // sends 1, 2, 3
    ByteBuffer in = ByteBuffer.allocate(6);
    in.put(0, (byte) -1).put(5, (byte) -1);
    in.position(1).limit(5); // 4 bytes of room from index 1
    comm.send(out, 0, 20);
    assertEquals(0, comm.recv(in, 0, 20));
    assertArrayEquals(new byte[] {-1, 1, 2, 3, 0, -1}, in.array());
    assertEquals(1, in.position());
    assertEquals(5, in.limit());
    assertEquals(2, out.position());

    // Nonblocking: copied back at completion, from the position the buffer had then.
    ByteBuffer later = ByteBuffer.allocate(4);
    try (Request r = comm.irecv(later, 0, 21)) {
      later.position(3); // moving it afterwards changes nothing
      comm.send(ByteBuffer.wrap(new byte[] {5, 6}).asReadOnlyBuffer(), 0, 21);
      assertTrue(r.await(5, TimeUnit.SECONDS));
      assertEquals(2, r.count());
    }
    assertArrayEquals(new byte[] {5, 6, 0, 0}, later.array());

    // A typed heap buffer through isend and a blocking recv.
    ByteBuffer longs = ByteBuffer.allocate(16).order(ByteOrder.nativeOrder());
    longs.putLong(0, 1L << 40).putLong(8, -3L);
    try (Request s = comm.isend(longs, DType.INT64, 0, 22)) {
      ByteBuffer got = ByteBuffer.allocate(16).order(ByteOrder.nativeOrder());
      comm.recv(got, DType.INT64, 0, 22);
      s.await();
      assertEquals(1L << 40, got.getLong(0));
      assertEquals(-3L, got.getLong(8));
    }
  }

  @Test
  public void heapByteBuffersInCollectivesAndStreams() {
    ByteBuffer f = ByteBuffer.allocate(16).order(ByteOrder.nativeOrder());
    f.putFloat(0, -9f).putFloat(4, 1.5f).putFloat(8, 2.5f).putFloat(12, -9f);
    f.position(4).limit(12);
    comm.allReduce(f, DType.FLOAT32, ReduceOp.SUM); // one rank: the sum is the value
    assertEquals(4, f.position());
    assertEquals(12, f.limit());
    f.clear();
    assertEquals(1.5f, f.getFloat(4), 0f);
    assertEquals(2.5f, f.getFloat(8), 0f);
    assertEquals(-9f, f.getFloat(0), 0f);
    assertEquals(-9f, f.getFloat(12), 0f);

    ByteBuffer src = ByteBuffer.wrap(new byte[] {1, 2, 3, 4});
    ByteBuffer dst = ByteBuffer.allocate(4);
    comm.allGather(src, dst);
    assertArrayEquals(new byte[] {1, 2, 3, 4}, dst.array());

    ByteBuffer i = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder());
    i.putInt(0, 6).putInt(4, 7);
    try (Request r = comm.iallReduce(i, DType.INT32, ReduceOp.MAX)) {
      r.future().join();
    }
    assertEquals(6, i.getInt(0));
    assertEquals(7, i.getInt(4));

    try (Stream s = comm.stream(0)) {
      ByteBuffer h = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder());
      h.putInt(0, 11).putInt(4, 12);
      ByteBuffer r = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder());
      s.allReduce(h, DType.INT32, ReduceOp.SUM);
      s.send(h, 0, 23); // the same staged copy, after the allReduce
      s.recv(r, 0, 23).join();
      s.synchronize();
      assertEquals(11, r.getInt(0));
      assertEquals(12, r.getInt(4));
      s.send(ByteBuffer.wrap(new byte[8]), 0, 24); // to itself, ahead of the recv
      s.recv(h, 0, 24);
      s.synchronize();
      assertEquals(0, h.getInt(0));
    }
    // A heap buffer staged for a queued operation keeps its window.
    comm.set("timeout_ms", "200");
    try (Stream t = comm.stream(0)) {
      ByteBuffer held = ByteBuffer.allocate(8);
      t.recv(held, 0, 25); // nobody sends: staged until it times out
      held.position(4);
      HcommException e = expect(Status.INVALID_ARGUMENT, () -> t.send(held, 0, 26));
      assertTrue(e.getMessage(), e.getMessage().contains("position 0 and limit 8 is used "
          + "again with position 4 and limit 8"));
      expect(Status.TIMEOUT, t::synchronize);
    }
    comm.set("timeout_ms", LONG_TIMEOUT_MS);
  }
}
