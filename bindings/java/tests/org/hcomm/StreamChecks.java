package org.hcomm;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * Streams and events across ranks, run by MultiRankMain on every rank (at least 3): every kind
 * of operation on two streams of different priority, order within a stream, an event that
 * orders a second stream after the first, streams as matching contexts of their own, a
 * collective refused on one rank failing the others' stream until synchronize, close() running
 * out queued work, bad arguments. Prints "ok: stream NAME" per check; a failure throws.
 */
final class StreamChecks {
  private static int rank;
  private static int size;

  private static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  private static void ok(String name) {
    System.out.println("ok: stream " + name);
  }

  /** The sum over ranks r of (r + 1) * k. */
  private static long rankSum(long k) {
    return k * size * (size + 1) / 2;
  }

  /** The HcommException that f failed with. */
  private static HcommException failureOf(CompletableFuture<Void> f, String what) {
    try {
      f.join();
    } catch (CompletionException e) {
      check(e.getCause() instanceof HcommException, what + ": cause " + e.getCause());
      return (HcommException) e.getCause();
    }
    throw new AssertionError(what + " completed normally");
  }

  static void run(Communicator c) {
    rank = c.rank();
    size = c.size();
    try (Stream hi = c.stream(10); Stream lo = c.stream(0)) {
      everyKind(hi);
      everyKind(lo);
      ok("every kind of operation");
      twoPriorities(hi, lo);
      order(lo);
      events(hi, lo);
      contexts(c, hi, lo);
      errors(c, hi);
      badArguments(lo);
      closeRunsOutTheQueue(c);
    }
  }

  private static void everyKind(Stream s) {
    final int n = size;
    final int me = rank;
    final int k = 5;
    int[] in = new int[k];
    int[] bc = new int[k];
    for (int i = 0; i < k; ++i) {
      in[i] = (me + 1) * (i + 1);
      bc[i] = me == 1 ? 1000 + i : -1;
    }
    int[] ar = in.clone();
    int[] red = in.clone();
    int[] ag = new int[k * n];
    int[] rsIn = new int[k * n];
    int[] a2aIn = new int[k * n];
    int[] scIn = me == 0 ? new int[k * n] : null;
    for (int i = 0; i < k * n; ++i) {
      rsIn[i] = (me + 1) * (i + 1);
      a2aIn[i] = me * 1000 + i;
      if (scIn != null) {
        scIn[i] = 7 * i;
      }
    }
    int[] rs = new int[k];
    int[] a2a = new int[k * n];
    int[] ga = me == 0 ? new int[k * n] : null;
    int[] sc = new int[k];
    long[] got = {-1};
    List<CompletableFuture<Void>> fs = new ArrayList<>();
    fs.add(s.allReduce(ar, ReduceOp.SUM));
    fs.add(s.broadcast(bc, 1));
    fs.add(s.reduce(red, ReduceOp.MAX, n - 1));
    fs.add(s.allGather(in, ag));
    fs.add(s.reduceScatter(rsIn, rs, ReduceOp.SUM));
    fs.add(s.allToAll(a2aIn, a2a));
    fs.add(s.gather(in, ga, 0));
    fs.add(s.scatter(scIn, sc, 0));
    fs.add(s.barrier());
    fs.add(s.send(new long[] {me}, (me + 1) % n, 3));
    fs.add(s.recv(got, (me + n - 1) % n, 3));
    s.synchronize();
    for (CompletableFuture<Void> f : fs) {
      check(f.isDone() && !f.isCompletedExceptionally(), "a future after synchronize: " + f);
    }
    for (int i = 0; i < k; ++i) {
      check(ar[i] == rankSum(i + 1), "allReduce " + Arrays.toString(ar));
      check(bc[i] == 1000 + i, "broadcast " + Arrays.toString(bc));
      check(me != n - 1 || red[i] == n * (i + 1), "reduce max " + Arrays.toString(red));
      check(me == n - 1 || red[i] == in[i], "reduce left a non-root's buffer alone");
      check(rs[i] == rankSum(me * k + i + 1), "reduceScatter " + Arrays.toString(rs));
      check(sc[i] == 7 * (me * k + i), "scatter " + Arrays.toString(sc));
    }
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < k; ++i) {
        check(ag[r * k + i] == (r + 1) * (i + 1), "allGather " + Arrays.toString(ag));
        check(me != 0 || ga[r * k + i] == (r + 1) * (i + 1), "gather " + Arrays.toString(ga));
        check(a2a[r * k + i] == r * 1000 + me * k + i, "allToAll " + Arrays.toString(a2a));
      }
    }
    check(got[0] == (me + n - 1) % n, "stream recv got " + got[0]);
  }

  /** Both streams at once: small int allReduces on hi, a large double one on lo. */
  private static void twoPriorities(Stream hi, Stream lo) {
    double[] big = new double[1 << 17];
    for (int i = 0; i < big.length; ++i) {
      big[i] = i + rank;
    }
    ByteBuffer direct = ByteBuffer.allocateDirect(8 * 1024).order(ByteOrder.nativeOrder());
    for (int i = 0; i < 1024; ++i) {
      direct.putLong(8 * i, (long) (rank + 1) * i);
    }
    CompletableFuture<Void> bulk = lo.allReduce(big, ReduceOp.SUM);
    CompletableFuture<Void> bulkDirect = lo.allReduce(direct, DType.INT64, ReduceOp.SUM);
    List<int[]> small = new ArrayList<>();
    List<CompletableFuture<Void>> urgent = new ArrayList<>();
    for (int k = 0; k < 20; ++k) {
      int[] v = {(rank + 1) * k, rank};
      small.add(v);
      urgent.add(hi.allReduce(v, k % 2 == 0 ? ReduceOp.SUM : ReduceOp.MAX));
    }
    for (CompletableFuture<Void> f : urgent) {
      f.join();
    }
    for (int k = 0; k < small.size(); ++k) {
      int[] v = small.get(k);
      long want0 = k % 2 == 0 ? rankSum(k) : (long) size * k;
      long want1 = k % 2 == 0 ? (long) size * (size - 1) / 2 : size - 1;
      check(v[0] == want0 && v[1] == want1, "hi allReduce " + k + ": " + Arrays.toString(v));
    }
    bulk.join();
    bulkDirect.join();
    double sumRanks = size * (size - 1) / 2.0;
    for (int i = 0; i < big.length; i += 1021) {
      check(big[i] == (double) size * i + sumRanks, "lo allReduce at " + i + ": " + big[i]);
    }
    for (int i = 0; i < 1024; i += 97) {
      check(direct.getLong(8 * i) == rankSum(i), "lo allReduce of a direct buffer at " + i);
    }
    ok("two priorities");
  }

  /**
   * In place, one after another: SUM then PROD gives (n(n+1)/2)^n, the other order would not;
   * the futures complete in queue order.
   */
  private static void order(Stream s) {
    long[] v = {rank + 1};
    List<Integer> completed = Collections.synchronizedList(new ArrayList<>());
    List<Integer> want = new ArrayList<>();
    for (int k = 0; k < 6; ++k) {
      final int i = k;
      s.allReduce(v, k == 0 ? ReduceOp.SUM : k == 1 ? ReduceOp.PROD : ReduceOp.MAX)
          .thenRun(() -> completed.add(i));
      want.add(k);
    }
    s.synchronize();
    long t = rankSum(1);
    long pow = 1;
    for (int k = 0; k < size; ++k) {
      pow *= t;
    }
    check(v[0] == pow, "SUM then PROD in place gave " + v[0] + ", expected " + pow);
    check(completed.equals(want), "futures completed in the order " + completed);
    ok("order within a stream");
  }

  /** b's reduceScatter of x waits, through an event, for a's allReduce that produces x. */
  private static void events(Stream a, Stream b) {
    final int n = 1 << 16;
    float[] x = new float[n];
    Arrays.fill(x, 1f);
    float[] y = new float[n / size];
    ByteBuffer xd = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder());
    ByteBuffer yd = ByteBuffer.allocateDirect(4 * (n / size)).order(ByteOrder.nativeOrder());
    for (int i = 0; i < n; ++i) {
      xd.putFloat(4 * i, 2f);
    }
    try (Event e = new Event()) {
      check(e.query(), "an event never recorded is reached");
      CompletableFuture<Void> first = a.allReduce(x, ReduceOp.SUM);
      a.allReduce(xd, DType.FLOAT32, ReduceOp.SUM);
      e.record(a);
      b.waitEvent(e);
      CompletableFuture<Void> fy = b.reduceScatter(x, y, ReduceOp.SUM);
      CompletableFuture<Void> fyd = b.reduceScatter(xd, yd, DType.FLOAT32, ReduceOp.SUM);
      e.record(b);
      e.synchronize(); // no stream synchronize: the event completes what is before it
      check(e.query(), "event not reached after its synchronize");
      check(fy.isDone() && fyd.isDone(), "futures before the mark are not complete");
      check(first.isDone(), "a's allReduce is not seen done, although b waited for it");
      check(x[0] == size && x[n - 1] == size, "x was written back: " + x[0]);
      float want = (float) size * size;
      for (int i = 0; i < y.length; ++i) {
        check(y[i] == want, "y[" + i + "] = " + y[i] + ", expected " + want);
        check(yd.getFloat(4 * i) == 2 * want, "direct y[" + i + "] = " + yd.getFloat(4 * i));
      }
    }
    a.synchronize();
    b.synchronize();
    ok("events across streams");
  }

  /** A stream's recv takes only that stream's send of the same peer and tag. */
  private static void contexts(Communicator c, Stream a, Stream b) {
    if (rank == 0) {
      int[] fromB = {-1};
      int[] fromA = {-1};
      int[] fromBlocking = {-1};
      // Posted first, on both streams: the blocking send must not match them.
      b.recv(fromB, 1, 9);
      a.recv(fromA, 1, 9);
      c.recv(fromBlocking, 1, 9);
      a.synchronize();
      b.synchronize();
      check(a.query(), "stream a is not idle after synchronize");
      check(fromBlocking[0] == 100 && fromA[0] == 200 && fromB[0] == 300,
          "blocking recv got " + fromBlocking[0] + " (100), stream a " + fromA[0]
              + " (200), stream b " + fromB[0] + " (300)");
    } else if (rank == 1) {
      c.send(new int[] {100}, 0, 9);
      b.send(new int[] {300}, 0, 9);
      b.synchronize();
      a.send(new int[] {200}, 0, 9);
      a.synchronize();
    }
    c.barrier();
    ok("streams are matching contexts of their own");
  }

  /**
   * Rank 1 alone passes no ReduceOp: this binding refuses it there, the others' stream fails
   * with MISMATCH (and the operation after it too) until synchronize throws it; then it works.
   */
  private static void errors(Communicator c, Stream s) {
    int[] v = {1};
    CompletableFuture<Void> first = null;
    if (rank == 1) {
      try {
        s.allReduce(v, null);
        check(false, "allReduce with a null op did not throw");
      } catch (HcommException e) {
        check(e.kind() == Status.INVALID_ARGUMENT && e.getMessage().contains("op is null"),
            "refused allReduce: " + e);
      }
    } else {
      first = s.allReduce(v, ReduceOp.SUM);
    }
    CompletableFuture<Void> second = s.allReduce(new int[] {1}, ReduceOp.SUM);
    if (rank == 1) {
      try {
        s.synchronize();
      } catch (HcommException e) {
        check(e.kind() == Status.MISMATCH, "rank 1's synchronize: " + e);
      }
    } else {
      try {
        s.synchronize();
        check(false, "synchronize after a refused allReduce did not throw");
      } catch (HcommException e) {
        check(e.kind() == Status.MISMATCH && e.getMessage().contains("allreduce"),
            "synchronize after a refused allReduce: " + e);
      }
      check(failureOf(first, "the refused allReduce").kind() == Status.MISMATCH,
          "the refused allReduce's future");
      check(failureOf(second, "the allReduce after it").kind() == Status.MISMATCH,
          "the next allReduce's future");
      s.synchronize(); // cleared
    }
    c.barrier();
    int[] w = {rank + 1};
    s.allReduce(w, ReduceOp.SUM).join();
    check(w[0] == rankSum(1), "allReduce after the failure gave " + w[0]);
    ok("a refused collective fails the other ranks' stream");
  }

  private static void badArguments(Stream s) {
    try {
      s.send(new int[1], size, 0);
      check(false, "a send to rank " + size + " did not throw");
    } catch (HcommException e) {
      check(e.kind() == Status.INVALID_ARGUMENT && e.getMessage().contains("peer " + size),
          "send to a rank out of range: " + e);
    }
    try {
      s.allGather(new int[2], new int[2 * size - 1]);
      check(false, "an allGather into too small a recv did not throw");
    } catch (HcommException e) {
      check(e.kind() == Status.INVALID_ARGUMENT
          && e.getMessage().contains("Stream.allGather: recv holds"), "allGather: " + e);
    }
    // Refused on every rank: no turn is lost, the stream still pairs up.
    int[] v = {rank};
    s.allReduce(v, ReduceOp.MAX);
    s.synchronize();
    check(v[0] == size - 1, "allReduce after bad arguments gave " + v[0]);
    ok("bad arguments");
  }

  private static void closeRunsOutTheQueue(Communicator c) {
    Stream t = c.stream(3);
    long[] w = {rank + 1};
    CompletableFuture<Void> f = t.allReduce(w, ReduceOp.SUM);
    t.barrier();
    t.close();
    check(f.isDone() && !f.isCompletedExceptionally(), "close left the allReduce's future open");
    check(w[0] == rankSum(1), "allReduce queued before close gave " + w[0]);
    ok("close runs out the queue");
  }

  private StreamChecks() {}
}
