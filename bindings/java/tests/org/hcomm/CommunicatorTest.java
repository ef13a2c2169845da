package org.hcomm;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.hcomm.internal.HcommNative;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

/**
 * The Java layer on a world of one rank (config map rank=0, world_size=1):
 * every operation and buffer kind, errors with their status and message,
 * bad arguments, closed handles. Multi-rank behaviour is MultiRankMain's.
 */
public class CommunicatorTest {
  private Communicator comm;

  static Map<String, String> single() {
    Map<String, String> cfg = new HashMap<>();
    cfg.put("rank", "0");
    cfg.put("world_size", "1");
    cfg.put("timeout_ms", "10000");
    return cfg;
  }

  /**
   * Runs r, which must throw the HcommException subclass of `status` (as HcommException.of
   * makes it); returns it.
   */
  static HcommException expect(Status status, Runnable r) {
    try {
      r.run();
    } catch (HcommException e) {
      assertEquals("status of " + e, status.code(), e.status());
      assertSame(status, e.kind());
      assertSame("class of " + e, HcommException.of(status.code(), "").getClass(), e.getClass());
      assertNotNull(e.getMessage());
      assertFalse("empty message: " + e, e.getMessage().isEmpty());
      return e;
    }
    fail("expected HcommException " + status);
    return null;
  }

  static ByteBuffer direct(int bytes) {
    return ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder());
  }

  @Before
  public void setUp() {
    comm = Communicator.init(single());
  }

  @After
  public void tearDown() {
    comm.close();
  }

  @Test
  public void rankSizeVersion() {
    assertEquals(0, comm.rank());
    assertEquals(1, comm.size());
    assertTrue(Communicator.version().matches("\\d+\\.\\d+\\.\\d+"));
    assertEquals(HcommNative.HCOMM_VERSION_MAJOR + "." + HcommNative.HCOMM_VERSION_MINOR + "."
        + HcommNative.HCOMM_VERSION_PATCH, Communicator.version());
    assertEquals("self", comm.transport(0));
    assertEquals("Communicator(rank 0 of 1)", comm.toString());
  }

  @Test
  public void enumsMatchTheHeader() {
    for (Status s : Status.values()) {
      if (s == Status.UNKNOWN) {
        continue;
      }
      String c = HcommNative.hcomm_status_string(s.code());
      assertTrue(c + " vs " + s, c.equals("HCOMM_" + s) || c.equals("HCOMM_ERR_" + s));
      assertSame(s, Status.of(s.code()));
    }
    assertSame(Status.UNKNOWN, Status.of(99));
    assertEquals(HcommNative.HCOMM_INT8, DType.INT8.code());
    assertEquals(HcommNative.HCOMM_UINT8, DType.UINT8.code());
    assertEquals(HcommNative.HCOMM_INT32, DType.INT32.code());
    assertEquals(HcommNative.HCOMM_UINT32, DType.UINT32.code());
    assertEquals(HcommNative.HCOMM_INT64, DType.INT64.code());
    assertEquals(HcommNative.HCOMM_UINT64, DType.UINT64.code());
    assertEquals(HcommNative.HCOMM_FLOAT16, DType.FLOAT16.code());
    assertEquals(HcommNative.HCOMM_BFLOAT16, DType.BFLOAT16.code());
    assertEquals(HcommNative.HCOMM_FLOAT32, DType.FLOAT32.code());
    assertEquals(HcommNative.HCOMM_FLOAT64, DType.FLOAT64.code());
    assertEquals(HcommNative.HCOMM_SUM, ReduceOp.SUM.code());
    assertEquals(HcommNative.HCOMM_PROD, ReduceOp.PROD.code());
    assertEquals(HcommNative.HCOMM_MIN, ReduceOp.MIN.code());
    assertEquals(HcommNative.HCOMM_MAX, ReduceOp.MAX.code());
    assertEquals(HcommNative.HCOMM_AVG, ReduceOp.AVG.code());
    assertEquals(HcommNative.HCOMM_ANY_SOURCE, Communicator.ANY_SOURCE);
    assertEquals(HcommNative.HCOMM_ANY_TAG, Communicator.ANY_TAG);
    assertEquals(HcommNative.HCOMM_UNDEFINED, Communicator.UNDEFINED);
  }

  @Test
  public void collectivesOnEveryArrayType() {
    for (ReduceOp op : ReduceOp.values()) {
      byte[] b = {1, -2, 3};
      comm.allReduce(b, op);
      assertArrayEquals(new byte[] {1, -2, 3}, b);
      int[] i = {1, 2, 3};
      comm.allReduce(i, op);
      assertArrayEquals(new int[] {1, 2, 3}, i);
      long[] l = {1L << 40, -5};
      comm.allReduce(l, op);
      assertArrayEquals(new long[] {1L << 40, -5}, l);
      float[] f = {1.5f, -2f};
      comm.allReduce(f, op);
      assertArrayEquals(new float[] {1.5f, -2f}, f, 0f);
      double[] d = {0.25, 1e300};
      comm.allReduce(d, op);
      assertArrayEquals(new double[] {0.25, 1e300}, d, 0);
    }
    int[] x = {4, 5, 6};
    comm.broadcast(x, 0);
    assertArrayEquals(new int[] {4, 5, 6}, x);
    comm.reduce(x, ReduceOp.MAX, 0);
    assertArrayEquals(new int[] {4, 5, 6}, x);

    long[] gathered = new long[3];
    comm.allGather(new long[] {7, 8, 9}, gathered);
    assertArrayEquals(new long[] {7, 8, 9}, gathered);
    double[] scattered = new double[2];
    comm.reduceScatter(new double[] {1.5, 2.5}, scattered, ReduceOp.SUM);
    assertArrayEquals(new double[] {1.5, 2.5}, scattered, 0);
    float[] all = new float[2];
    comm.allToAll(new float[] {3f, 4f}, all);
    assertArrayEquals(new float[] {3f, 4f}, all, 0f);
    byte[] g = new byte[2];
    comm.gather(new byte[] {9, 10}, g, 0);
    assertArrayEquals(new byte[] {9, 10}, g);
    int[] s = new int[2];
    comm.scatter(new int[] {11, 12}, s, 0);
    assertArrayEquals(new int[] {11, 12}, s);
    comm.barrier();

    // Larger receive buffers are fine; the rest stays as it was.
    int[] roomy = {-1, -1, -1, -1};
    comm.allGather(new int[] {5, 6}, roomy);
    assertArrayEquals(new int[] {5, 6, -1, -1}, roomy);
    // Zero elements still synchronise.
    comm.allReduce(new int[0], ReduceOp.SUM);
    comm.allGather(new double[0], new double[0]);
  }

  @Test
  public void directByteBuffers() {
    ByteBuffer f = direct(16);
    f.asFloatBuffer().put(new float[] {1f, 2f, 3f, 4f});
    comm.allReduce(f, DType.FLOAT32, ReduceOp.AVG);
    float[] out = new float[4];
    f.asFloatBuffer().get(out);
    assertArrayEquals(new float[] {1f, 2f, 3f, 4f}, out, 0f);
    assertEquals(0, f.position());
    assertEquals(16, f.limit());

    // UINT8 by default; the bytes from position to limit.
    ByteBuffer b = direct(8);
    for (int k = 0; k < 8; ++k) {
      b.put(k, (byte) k);
    }
    b.position(2).limit(6);
    ByteBuffer dst = direct(4);
    comm.allGather(b, dst);
    for (int k = 0; k < 4; ++k) {
      assertEquals(k + 2, dst.get(k));
    }
    assertEquals(2, b.position());

    // Send and receive between direct buffers, and into an offset.
    ByteBuffer big = direct(12);
    big.position(4);
    comm.send(dst, 0, 1);
    assertEquals(0, comm.recv(big, 0, 1));
    assertEquals(4, big.position());
    assertEquals(2, big.get(4));
    assertEquals(5, big.get(7));
    assertEquals(0, big.get(0));

    // Gather / scatter with explicit dtype.
    ByteBuffer longs = direct(16);
    longs.asLongBuffer().put(new long[] {-3, 4});
    ByteBuffer back = direct(16);
    comm.scatter(longs, back, DType.INT64, 0);
    assertEquals(-3, back.getLong(0));
    assertEquals(4, back.getLong(8));
  }

  @Test
  public void sendToSelfEveryWay() {
    comm.send(new int[] {7, 8}, 0, 3);
    int[] y = {0, 0, 0, -1};
    assertEquals(0, comm.recv(y, 0, 3));
    assertArrayEquals(new int[] {7, 8, 0, -1}, y);

    comm.send(new double[] {2.5}, 0, 4);
    double[] d = new double[1];
    assertEquals(0, comm.recv(d, Communicator.ANY_SOURCE, Communicator.ANY_TAG));
    assertEquals(2.5, d[0], 0);

    long[] into = {-1, -1, -1};
    try (Request rr = comm.irecv(into, Communicator.ANY_SOURCE, 5);
         Request sr = comm.isend(new long[] {10, 20}, 0, 5)) {
      sr.await();
      rr.await();
      assertTrue(rr.test());
      assertTrue(rr.isCompleted());
      assertEquals(0, rr.source());
      assertEquals(5, rr.tag());
      assertEquals(2, rr.count());
      assertArrayEquals(new long[] {10, 20, -1}, into);
      assertEquals(0, sr.source());
      assertEquals(2, sr.count());
    }

    // test() polls; the receive is copied back only on completion.
    byte[] bytes = new byte[3];
    try (Request rr = comm.irecv(bytes, 0, 6)) {
      assertFalse(rr.test());
      expect(Status.INVALID_ARGUMENT, rr::source);
      comm.send(new byte[] {1, 2, 3}, 0, 6);
      long deadline = System.nanoTime() + 5_000_000_000L;
      while (!rr.test()) {
        assertTrue("irecv did not complete", System.nanoTime() < deadline);
        Thread.yield();
      }
      assertArrayEquals(new byte[] {1, 2, 3}, bytes);
    }

    // Nonblocking with direct buffers: zero copy, with a dtype.
    ByteBuffer out = direct(8);
    out.asIntBuffer().put(new int[] {41, 42});
    ByteBuffer in = direct(8);
    try (Request rr = comm.irecv(in, DType.INT32, 0, 8);
         Request sr = comm.isend(out, DType.INT32, 0, 8)) {
      Request.awaitAll(sr, rr);
      assertEquals(2, rr.count());
      assertEquals(42, in.getInt(4));
    }

    // Every array type round-trips through isend / irecv.
    float[] fr = new float[2];
    try (Request rr = comm.irecv(fr, 0, 9); Request sr = comm.isend(new float[] {1f, 2f}, 0, 9)) {
      Request.awaitAll(sr, rr);
    }
    assertArrayEquals(new float[] {1f, 2f}, fr, 0f);
  }

  @Test
  public void pointToPointFromSeveralThreads() throws Exception {
    Thread[] threads = new Thread[4];
    Throwable[] failure = new Throwable[1];
    for (int t = 0; t < threads.length; ++t) {
      final int tag = 100 + t;
      threads[t] = new Thread(() -> {
        try {
          for (int k = 0; k < 50; ++k) {
            comm.send(new int[] {tag, k}, 0, tag);
            int[] got = new int[2];
            assertEquals(0, comm.recv(got, 0, tag));
            assertArrayEquals(new int[] {tag, k}, got);
          }
        } catch (Throwable e) {
          synchronized (failure) {
            failure[0] = e;
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
  }

  @Test
  public void iallReduce() {
    double[] d = {1.0, 2.0};
    try (Request r = comm.iallReduce(d, ReduceOp.SUM)) {
      r.await();
    }
    assertArrayEquals(new double[] {1.0, 2.0}, d, 0);
    ByteBuffer b = direct(8);
    b.putLong(0, 77);
    try (Request r = comm.iallReduce(b, DType.INT64, ReduceOp.MAX)) {
      r.await();
    }
    assertEquals(77, b.getLong(0));
  }

  @Test
  public void errorsCarryStatusAndMessage() {
    HcommException e = expect(Status.INVALID_ARGUMENT, () -> comm.send(new int[1], 3, 0));
    assertTrue(e.getMessage(), e.getMessage().contains("peer 3"));
    assertTrue(e.toString(),
        e.toString().startsWith("org.hcomm.InvalidArgumentException: INVALID_ARGUMENT (1): "));
    expect(Status.INVALID_ARGUMENT, () -> comm.send(new int[1], 0, -2));
    expect(Status.INVALID_ARGUMENT, () -> comm.broadcast(new int[1], 1));

    // A message larger than the receive buffer: MISMATCH, nothing written.
    comm.send(new int[] {1, 2, 3}, 0, 11);
    int[] small = {-1, -1};
    e = expect(Status.MISMATCH, () -> comm.recv(small, 0, 11));
    assertArrayEquals(new int[] {-1, -1}, small);

    // Timeout: names what was pending; the communicator stays usable.
    comm.set("timeout_ms", "150");
    long t0 = System.nanoTime();
    e = expect(Status.TIMEOUT, () -> comm.recv(new int[1], 0, 99));
    assertTrue(e.getMessage(), e.getMessage().contains("99"));
    assertTrue(System.nanoTime() - t0 < 5_000_000_000L);
    try (Request r = comm.irecv(new int[1], Communicator.ANY_SOURCE, 98)) {
      expect(Status.TIMEOUT, r::await);
      expect(Status.TIMEOUT, r::await); // still pending, may be awaited again
    }
    expect(Status.TIMEOUT, () -> comm.recv(new int[1], Communicator.ANY_SOURCE, 97));
    comm.set("timeout_ms", "10000");
    int[] v = {5};
    comm.allReduce(v, ReduceOp.SUM);
    assertEquals(5, v[0]);

    expect(Status.INVALID_ARGUMENT, () -> comm.set("no_such_key", "1"));
    expect(Status.INVALID_ARGUMENT, () -> comm.set("timeout_ms", "soon"));
  }

  /** An allreduce and a send to self after a compression change: exact on one rank. */
  private void callsStillWork(String what) {
    float[] x = {0.5f, 1.25f, 3.0f, 1e-3f, 7.75f};
    float[] y = x.clone();
    comm.allReduce(y, ReduceOp.SUM);
    assertArrayEquals(what, x, y, 0f);
    comm.send(x, 0, 61);
    float[] got = new float[x.length];
    comm.recv(got, 0, 61);
    assertArrayEquals(what, x, got, 0f);
  }

  @Test
  public void setCompressionEveryKindThenNone() {
    Compression[][] valid = {
      {},
      {Compression.FP16},
      {Compression.BF16},
      {Compression.DELTA},
      {Compression.FP16, Compression.DELTA},
      {Compression.DELTA, Compression.BF16},
    };
    for (Compression[] kinds : valid) {
      String what = Arrays.toString(kinds);
      comm.setCompression(kinds);
      callsStillWork(what);
      comm.setCompression();
      callsStillWork("none after " + what);
    }
    comm.setCompression(EnumSet.of(Compression.BF16, Compression.DELTA));
    comm.setCompression(EnumSet.noneOf(Compression.class));
    comm.setCompression(Compression.FP16, Compression.FP16); // the same kind twice is once
    comm.set("compression", "delta,fp16"); // the config key itself
    comm.setCompression();
    assertEquals("fp16", Compression.FP16.value());
    assertEquals("bf16", Compression.BF16.value());
    assertEquals("delta", Compression.DELTA.value());
  }

  @Test
  public void setCompressionBadCombinationIsInvalidArgument() {
    HcommException e = expect(Status.INVALID_ARGUMENT,
        () -> comm.setCompression(Compression.FP16, Compression.BF16));
    assertTrue(e.getMessage(), e.getMessage().contains("setCompression: kinds [FP16, BF16]")
        && e.getMessage().contains("both FP16 and BF16"));
    e = expect(Status.INVALID_ARGUMENT, () -> comm.setCompression(
        EnumSet.of(Compression.BF16, Compression.DELTA, Compression.FP16)));
    assertTrue(e.getMessage(), e.getMessage().contains("both FP16 and BF16"));
    e = expect(Status.INVALID_ARGUMENT, () -> comm.setCompression(Compression.DELTA, null));
    assertTrue(e.getMessage(), e.getMessage().contains("holds null"));
    expect(Status.INVALID_ARGUMENT, () -> comm.setCompression((Compression[]) null));
    expect(Status.INVALID_ARGUMENT,
        () -> comm.setCompression((Set<Compression>) null));
    // What C refuses through the generic setter: named by the config key.
    e = expect(Status.INVALID_ARGUMENT, () -> comm.set("compression", "fp16,bf16"));
    assertTrue(e.getMessage(), e.getMessage().contains("compression"));
    callsStillWork("after the refusals");
    Communicator c = Communicator.init(single());
    c.close();
    expect(Status.INVALID_ARGUMENT, () -> c.setCompression(Compression.FP16));
  }

  @Test
  public void badBuffersAreInvalidArgument() {
    HcommException e = expect(Status.INVALID_ARGUMENT,
        () -> comm.allReduce(ByteBuffer.allocate(8).asReadOnlyBuffer(), ReduceOp.SUM));
    assertTrue(e.getMessage(), e.getMessage().contains("allReduce: buf: the ByteBuffer is "
        + "read-only"));
    expect(Status.INVALID_ARGUMENT, () -> comm.recv(direct(8).asReadOnlyBuffer(), 0, 0));
    expect(Status.INVALID_ARGUMENT,
        () -> comm.allReduce(direct(6), DType.FLOAT32, ReduceOp.SUM));
    expect(Status.INVALID_ARGUMENT,
        () -> comm.irecv(ByteBuffer.allocate(6), DType.FLOAT32, 0, 0));
    expect(Status.INVALID_ARGUMENT, () -> comm.send((int[]) null, 0, 0));
    expect(Status.INVALID_ARGUMENT, () -> comm.allReduce(new int[1], null));
    expect(Status.INVALID_ARGUMENT, () -> comm.send(direct(4), null, 0, 0));
    // Sizes of two-buffer collectives are checked before any native call.
    expect(Status.INVALID_ARGUMENT, () -> comm.allGather(new int[3], new int[2]));
    expect(Status.INVALID_ARGUMENT, () -> comm.allToAll(new int[3], new int[2]));
    expect(Status.INVALID_ARGUMENT, () -> comm.reduceScatter(new int[3], new int[2],
        ReduceOp.SUM));
    expect(Status.INVALID_ARGUMENT, () -> comm.gather(new int[3], null, 0));
    expect(Status.INVALID_ARGUMENT, () -> comm.scatter(null, new int[2], 0));
    expect(Status.INVALID_ARGUMENT, () -> comm.newGroup(null));
    expect(Status.INVALID_ARGUMENT, () -> comm.newGroup(new int[] {0, 0}));
    expect(Status.INVALID_ARGUMENT, () -> comm.newGroup(new int[] {1}));
    expect(Status.INVALID_ARGUMENT, () -> comm.split(-5, 0));
    // Still usable.
    comm.barrier();
  }

  @Test
  public void badConfigIsInvalidArgument() {
    Map<String, String> cfg = single();
    cfg.put("no_such_key", "x");
    expect(Status.INVALID_ARGUMENT, () -> Communicator.init(cfg));
    Map<String, String> bad = single();
    bad.put("world_size", "zero");
    expect(Status.INVALID_ARGUMENT, () -> Communicator.init(bad));
  }

  @Test
  public void nulInStringsIsInvalidArgument() {
    // JNI would hand C the bytes C0 80 for the NUL: "secret\0" would pass as
    // a job token that no other binding can spell. The message does not
    // show the token.
    Map<String, String> token = single();
    token.put("job_token", "secret\0");
    HcommException e = expect(Status.INVALID_ARGUMENT, () -> Communicator.init(token));
    assertTrue(e.getMessage(), e.getMessage().contains("job_token")
        && e.getMessage().contains("NUL") && !e.getMessage().contains("secret"));
    Map<String, String> key = single();
    key.put("timeout_ms\0x", "5000");
    e = expect(Status.INVALID_ARGUMENT, () -> Communicator.init(key));
    assertTrue(e.getMessage(), e.getMessage().contains("config key \"timeout_ms\\0x\""));
    e = expect(Status.INVALID_ARGUMENT, () -> comm.set("timeout_ms", "5000\0"));
    assertTrue(e.getMessage(), e.getMessage().contains("NUL"));
    e = expect(Status.INVALID_ARGUMENT, () -> comm.set("timeout_ms\0", "5000"));
    assertTrue(e.getMessage(), e.getMessage().contains("NUL"));
  }

  @Test
  public void groupsAndSplit() {
    assertNull(comm.split(Communicator.UNDEFINED, 0));
    try (Communicator half = comm.split(3, 0)) {
      assertEquals(1, half.size());
      assertEquals(0, half.rank());
      int[] v = {2};
      half.allReduce(v, ReduceOp.PROD);
      assertEquals(2, v[0]);
    }
    try (Communicator g = comm.newGroup(new int[] {0})) {
      assertNotNull(g);
      assertEquals(1, g.size());
      g.send(new int[] {3}, 0, 0);
      int[] r = new int[1];
      g.recv(r, 0, 0);
      assertEquals(3, r[0]);
    }
  }

  @Test
  public void shrinkWithoutFailureKeepsEveryRank() {
    try (Communicator c = comm.shrink()) {
      assertEquals(1, c.size());
      assertEquals(0, c.rank());
      int[] v = {5};
      c.allReduce(v, ReduceOp.SUM);
      assertEquals(5, v[0]);
    }
  }

  @Test
  public void closedHandlesAreInvalidArgument() {
    Communicator c = Communicator.init(single());
    Request pending = c.irecv(new int[1], 0, 1);
    // A request closed after it completed is closed all the same.
    Request done = c.isend(new int[] {7}, 0, 2);
    done.await();
    c.recv(new int[1], 0, 2);
    done.close();
    expect(Status.INVALID_ARGUMENT, done::await);
    expect(Status.INVALID_ARGUMENT, done::test);
    expect(Status.INVALID_ARGUMENT, done::source);
    Communicator child = c.split(0, 0);
    child.close();
    expect(Status.INVALID_ARGUMENT, child::rank);
    c.close();
    assertTrue(c.isClosed());
    c.close(); // idempotent
    HcommException e = expect(Status.INVALID_ARGUMENT, c::rank);
    assertTrue(e.getMessage(), e.getMessage().contains("closed"));
    expect(Status.INVALID_ARGUMENT, c::size);
    expect(Status.INVALID_ARGUMENT, () -> c.send(new int[1], 0, 0));
    expect(Status.INVALID_ARGUMENT, () -> c.allReduce(new float[1], ReduceOp.SUM));
    expect(Status.INVALID_ARGUMENT, c::barrier);
    expect(Status.INVALID_ARGUMENT, () -> c.split(0, 0));
    expect(Status.INVALID_ARGUMENT, c::shrink);
    c.abort(); // nothing to abort: no error
    assertEquals("Communicator(closed)", c.toString());

    // A request outlives its communicator: it failed with ABORTED.
    expect(Status.ABORTED, pending::await);
    pending.close();
    pending.close();
    expect(Status.INVALID_ARGUMENT, pending::await);
    expect(Status.INVALID_ARGUMENT, pending::test);
    expect(Status.INVALID_ARGUMENT, pending::count);
  }

  @Test
  public void abortFailsPendingAndLaterCalls() throws Exception {
    Communicator c = Communicator.init(single());
    Thread aborter = new Thread(() -> {
      try {
        Thread.sleep(100);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      c.abort();
    });
    aborter.start();
    long t0 = System.nanoTime();
    expect(Status.ABORTED, () -> c.recv(new int[1], 0, 5)); // would wait 10 s
    assertTrue(System.nanoTime() - t0 < 5_000_000_000L);
    aborter.join();
    expect(Status.ABORTED, () -> c.recv(new int[1], 0, 6));
    expect(Status.ABORTED, () -> c.isend(new int[1], 0, 6).await());
    c.close();
  }

  @Test
  public void closeWaitsForCallsInProgress() throws Exception {
    Communicator c = Communicator.init(single());
    c.set("timeout_ms", "300");
    HcommException[] seen = new HcommException[1];
    Thread receiver = new Thread(() -> {
      try {
        c.recv(new int[1], 0, 1);
      } catch (HcommException e) {
        seen[0] = e;
      }
    });
    receiver.start();
    Thread.sleep(50);
    c.close(); // must not free the communicator under the receive
    receiver.join();
    assertNotNull(seen[0]);
    assertTrue(seen[0].toString(), seen[0].status() == Status.TIMEOUT.code()
        || seen[0].status() == Status.INVALID_ARGUMENT.code());
  }

  @Test
  public void droppedObjectsAreCleanedUp() throws Exception {
    // The Cleaner is a safety net: unclosed communicators and requests must
    // not crash or leak handles when collected.
    for (int k = 0; k < 3; ++k) {
      Communicator c = Communicator.init(single());
      c.irecv(new int[4], 0, 1);
      c.isend(new int[4], 0, 2);
    }
    for (int k = 0; k < 3; ++k) {
      System.gc();
      Thread.sleep(20);
    }
    int[] v = {1};
    comm.allReduce(v, ReduceOp.SUM);
    assertEquals(1, v[0]);
  }
}
