package org.hcomm;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * One rank of java_multirank_test (run as 4 ranks through hcomm_run):
 * point-to-point, any-source, every collective on several types, groups and
 * split, a timeout, every compression kind, and streams and events
 * (StreamChecks). Prints
 * "ok: NAME" per check and "ok: all" at the end; any failure prints
 * "FAIL: ..." and exits 1 (hcomm_run then stops the job).
 */
public final class MultiRankMain {
  private static int rank;
  private static int size;

  private static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  private static void ok(String name) {
    System.out.println("ok: " + name);
  }

  public static void main(String[] args) {
    try (Communicator c = Communicator.init()) {
      rank = c.rank();
      size = c.size();
      check(size >= 3, "needs at least 3 ranks, got " + size);
      pointToPoint(c);
      anySource(c);
      collectives(c);
      groups(c);
      timeout(c);
      compression(c);
      StreamChecks.run(c);
      c.barrier();
    } catch (Throwable t) {
      System.out.println("FAIL: rank " + rank + ": " + t);
      t.printStackTrace(System.out);
      System.exit(1);
    }
    System.out.println("ok: all");
  }

  private static void pointToPoint(Communicator c) {
    int right = (rank + 1) % size;
    int left = (rank + size - 1) % size;
    // Blocking ring (the send is posted as a request so no rank waits on another's send).
    int[] got = new int[2];
    try (Request s = c.isend(new int[] {rank, rank * 10}, right, 1)) {
      check(c.recv(got, left, 1) == left, "recv source");
      s.await();
    }
    check(got[0] == left && got[1] == left * 10, "ring ints " + Arrays.toString(got));
    // Heap buffers both ways, from their positions.
    ByteBuffer heapOut = ByteBuffer.allocate(6);
    heapOut.put(2, (byte) rank).put(3, (byte) 7).position(2).limit(4);
    ByteBuffer heapIn = ByteBuffer.allocate(5);
    heapIn.position(1).limit(3);
    try (Request s = c.isend(heapOut, right, 1)) {
      check(c.recv(heapIn, left, 1) == left, "heap recv source");
      s.await();
    }
    check(heapIn.get(1) == left && heapIn.get(2) == 7 && heapIn.get(0) == 0
        && heapIn.position() == 1, "ring heap buffer");

    // Every array type and a direct buffer, nonblocking both ways.
    byte[] b = new byte[3];
    long[] l = new long[2];
    float[] f = new float[2];
    double[] d = new double[1];
    ByteBuffer bb = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
    List<Request> recvs = new ArrayList<>();
    recvs.add(c.irecv(b, left, 2));
    recvs.add(c.irecv(l, left, 3));
    recvs.add(c.irecv(f, left, 4));
    recvs.add(c.irecv(d, left, 5));
    recvs.add(c.irecv(bb, DType.INT32, left, 6));
    ByteBuffer out = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
    out.asIntBuffer().put(new int[] {rank, 1, 2, 3});
    List<Request> sends = new ArrayList<>();
    sends.add(c.isend(new byte[] {(byte) rank, 1, 2}, right, 2));
    sends.add(c.isend(new long[] {rank * (1L << 33), -rank}, right, 3));
    sends.add(c.isend(new float[] {rank + 0.5f, -1f}, right, 4));
    sends.add(c.isend(new double[] {rank * 1e100}, right, 5));
    sends.add(c.isend(out, DType.INT32, right, 6));
    Request.awaitAll(recvs);
    Request.awaitAll(sends);
    check(b[0] == left && b[2] == 2, "bytes");
    check(l[0] == left * (1L << 33) && l[1] == -left, "longs");
    check(f[0] == left + 0.5f, "floats");
    check(d[0] == left * 1e100, "doubles");
    check(bb.getInt(0) == left && bb.getInt(12) == 3, "direct buffer");
    check(recvs.get(4).count() == 4 && recvs.get(4).source() == left
        && recvs.get(4).tag() == 6, "request info");
    for (Request r : recvs) {
      r.close();
    }
    for (Request r : sends) {
      r.close();
    }

    // 1 MiB each way: the nonblocking buffers are used long after the
    // calls return (the rendezvous protocol), from staged copies.
    float[] bigOut = new float[1 << 18];
    for (int k = 0; k < bigOut.length; ++k) {
      bigOut[k] = rank * 1e6f + k;
    }
    float[] bigIn = new float[bigOut.length];
    try (Request r = c.irecv(bigIn, left, 7); Request s = c.isend(bigOut, right, 7)) {
      Request.awaitAll(r, s);
      check(r.count() == bigIn.length, "large count");
    }
    for (int k = 0; k < bigIn.length; k += 4099) {
      check(bigIn[k] == left * 1e6f + k, "large message at " + k);
    }
    ok("p2p");
  }

  private static void anySource(Communicator c) {
    if (rank == 0) {
      boolean[] seen = new boolean[size];
      for (int k = 1; k < size; ++k) {
        int[] v = new int[1];
        int src = c.recv(v, Communicator.ANY_SOURCE, 20);
        check(v[0] == src * 100 && !seen[src], "any-source from " + src);
        seen[src] = true;
      }
      // ANY_TAG through a request: tag and count come back.
      try (Request r = c.irecv(new long[4], Communicator.ANY_SOURCE, Communicator.ANY_TAG)) {
        r.await();
        check(r.source() == 1 && r.tag() == 33 && r.count() == 2, "any-tag info");
      }
    } else {
      c.send(new int[] {rank * 100}, 0, 20);
      if (rank == 1) {
        c.send(new long[] {1, 2}, 0, 33);
      }
    }
    c.barrier();
    ok("any-source");
  }

  private static void collectives(Communicator c) {
    int n = size;
    int sumRanks = n * (n - 1) / 2;
    int[] i = {rank, 1};
    c.allReduce(i, ReduceOp.SUM);
    check(i[0] == sumRanks && i[1] == n, "allReduce SUM " + Arrays.toString(i));
    long[] p = {rank + 1};
    c.allReduce(p, ReduceOp.PROD);
    long fact = 1;
    for (int k = 1; k <= n; ++k) {
      fact *= k;
    }
    check(p[0] == fact, "allReduce PROD");
    double[] mn = {rank - 0.5};
    c.allReduce(mn, ReduceOp.MIN);
    check(mn[0] == -0.5, "allReduce MIN");
    byte[] mx = {(byte) rank};
    c.allReduce(mx, ReduceOp.MAX);
    check(mx[0] == n - 1, "allReduce MAX");
    float[] avg = {rank * 2f};
    c.allReduce(avg, ReduceOp.AVG);
    check(avg[0] == (n - 1), "allReduce AVG " + avg[0]);
    ByteBuffer bf = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder());
    bf.putFloat(0, 1f).putFloat(4, rank);
    c.allReduce(bf, DType.FLOAT32, ReduceOp.SUM);
    check(bf.getFloat(0) == n && bf.getFloat(4) == sumRanks, "allReduce direct");
    // A heap buffer, from its position (4) to its limit (12): copied in and back.
    ByteBuffer hf = ByteBuffer.allocate(16).order(ByteOrder.nativeOrder());
    hf.putFloat(0, -9f).putFloat(4, 1f).putFloat(8, rank).putFloat(12, -9f);
    hf.position(4).limit(12);
    c.allReduce(hf, DType.FLOAT32, ReduceOp.SUM);
    check(hf.position() == 4 && hf.limit() == 12, "allReduce heap: position, limit");
    hf.clear();
    check(hf.getFloat(4) == n && hf.getFloat(8) == sumRanks && hf.getFloat(0) == -9f
        && hf.getFloat(12) == -9f, "allReduce heap");
    double[] big = new double[1 << 17];
    for (int k = 0; k < big.length; ++k) {
      big[k] = k + rank;
    }
    c.allReduce(big, ReduceOp.SUM);
    for (int k = 0; k < big.length; k += 1021) {
      check(big[k] == (double) n * k + sumRanks, "large allReduce at " + k);
    }
    ok("allReduce");

    try (Request r = c.iallReduce(new int[] {rank}, ReduceOp.SUM)) {
      r.await();
    }
    int[] ia = {rank};
    try (Request r = c.iallReduce(ia, ReduceOp.MAX)) {
      r.await();
    }
    check(ia[0] == n - 1, "iallReduce");
    ByteBuffer ih = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder());
    ih.putLong(0, rank);
    try (Request r = c.iallReduce(ih, DType.INT64, ReduceOp.SUM)) {
      check(r.future().join() == r, "iallReduce heap future");
    }
    check(ih.getLong(0) == sumRanks, "iallReduce heap " + ih.getLong(0));
    ok("iallReduce");

    long[] bc = {rank == 2 ? 99 : 0, rank == 2 ? -7 : 0};
    c.broadcast(bc, 2);
    check(bc[0] == 99 && bc[1] == -7, "broadcast");
    ok("broadcast");

    int[] red = {rank, 1};
    c.reduce(red, ReduceOp.SUM, 1);
    if (rank == 1) {
      check(red[0] == sumRanks && red[1] == n, "reduce at root");
    }
    ok("reduce");

    double[] ag = new double[2 * n];
    c.allGather(new double[] {rank, -rank}, ag);
    for (int r = 0; r < n; ++r) {
      check(ag[2 * r] == r && ag[2 * r + 1] == -r, "allGather");
    }
    ok("allGather");

    int[] rsIn = new int[2 * n];
    for (int k = 0; k < rsIn.length; ++k) {
      rsIn[k] = k + rank;
    }
    int[] rs = new int[2];
    c.reduceScatter(rsIn, rs, ReduceOp.SUM);
    check(rs[0] == n * (2 * rank) + sumRanks && rs[1] == n * (2 * rank + 1) + sumRanks,
        "reduceScatter " + Arrays.toString(rs));
    ok("reduceScatter");

    long[] a2aIn = new long[n];
    for (int j = 0; j < n; ++j) {
      a2aIn[j] = rank * 100 + j;
    }
    long[] a2a = new long[n];
    c.allToAll(a2aIn, a2a);
    for (int k = 0; k < n; ++k) {
      check(a2a[k] == k * 100 + rank, "allToAll");
    }
    ok("allToAll");

    float[] g = rank == 0 ? new float[n] : null;
    c.gather(new float[] {rank * 1.5f}, g, 0);
    if (rank == 0) {
      for (int k = 0; k < n; ++k) {
        check(g[k] == k * 1.5f, "gather");
      }
    }
    ok("gather");

    byte[] sc = new byte[2];
    byte[] scIn = null;
    if (rank == n - 1) {
      scIn = new byte[2 * n];
      for (int k = 0; k < scIn.length; ++k) {
        scIn[k] = (byte) k;
      }
    }
    c.scatter(scIn, sc, n - 1);
    check(sc[0] == 2 * rank && sc[1] == 2 * rank + 1, "scatter");
    ok("scatter");

    c.barrier();
    ok("barrier");

    // Rank 1 alone passes a recv too short for allGather: this binding
    // refuses it, the others' call fails at once with MISMATCH, and the calls
    // after it stay paired (the refusal took its turn in the library too).
    int[] agRecv = new int[rank == 1 ? n - 1 : n];
    try {
      c.allGather(new int[] {rank}, agRecv);
      check(false, "allGather with a short recv on rank 1 did not throw");
    } catch (HcommException e) {
      check(e.kind() == (rank == 1 ? Status.INVALID_ARGUMENT : Status.MISMATCH),
          "refused allGather: " + e);
      check(rank == 1 || e.getMessage().contains("rank 1 rejected its call"),
          "the others' error names the refusal: " + e);
    }
    for (int k = 0; k < 3; ++k) {
      int[] x = {100 * k + rank};
      c.allReduce(x, ReduceOp.SUM);
      check(x[0] == 100 * k * n + sumRanks, "allReduce " + k + " after a refused call: " + x[0]);
    }
    ok("refused on one rank");
  }

  private static void groups(Communicator c) {
    try (Communicator even = c.newGroup(new int[] {0, 2})) {
      if (rank == 0 || rank == 2) {
        check(even != null && even.size() == 2 && even.rank() == rank / 2, "newGroup member");
        int[] v = {rank};
        even.allReduce(v, ReduceOp.SUM);
        check(v[0] == 2, "newGroup allReduce");
        // Its messages never match the parent's.
        int[] got = new int[1];
        int peer = 1 - even.rank();
        try (Request s = even.isend(new int[] {rank}, peer, 0)) {
          even.recv(got, peer, 0);
          s.await();
        }
        check(got[0] == 2 - rank, "newGroup p2p");
      } else {
        check(even == null, "newGroup non-member gets null");
      }
    }
    ok("newGroup");

    // Odd and even ranks, ordered by descending rank; the last rank opts out.
    int color = rank == size - 1 ? Communicator.UNDEFINED : rank % 2;
    try (Communicator half = c.split(color, -rank)) {
      if (color == Communicator.UNDEFINED) {
        check(half == null, "split UNDEFINED gets null");
      } else {
        int members = 0;
        int above = 0;
        for (int r = 0; r < size - 1; ++r) {
          if (r % 2 == color) {
            members++;
            if (r > rank) {
              above++;
            }
          }
        }
        check(half.size() == members && half.rank() == above,
            "split size/rank " + half.size() + "/" + half.rank());
        int[] v = {rank};
        half.allReduce(v, ReduceOp.MAX);
        check(v[0] % 2 == color, "split allReduce");
      }
    }
    c.barrier();
    ok("split");

    // Without a failure, shrink is a copy of every rank (the killed-rank
    // case runs in core/comm/shrink_test and the Python and Go tests).
    try (Communicator copy = c.shrink()) {
      check(copy.size() == size && copy.rank() == rank,
          "shrink size/rank " + copy.size() + "/" + copy.rank());
      int[] v = {rank + 1};
      copy.allReduce(v, ReduceOp.SUM);
      check(v[0] == size * (size + 1) / 2, "shrink allReduce " + v[0]);
    }
    ok("shrink");
  }

  private static void timeout(Communicator c) {
    c.set("timeout_ms", "300");
    try {
      c.recv(new int[1], (rank + 1) % size, 777); // nobody sends tag 777
      check(false, "recv did not time out");
    } catch (HcommException e) {
      check(e.kind() == Status.TIMEOUT, "timeout status " + e);
      check(e.getMessage().contains("777"), "timeout message names the tag: " + e.getMessage());
    }
    c.set("timeout_ms", "60000");
    c.barrier();
    ok("timeout");
  }

  /**
   * Every compression kind on every rank, then none: a float32 allreduce
   * stays within the 16-bit format's error of the exact sum (over shared
   * memory FP16/BF16 stay off and the sum is exact: either passes), and a
   * repeated send (DELTA's case) arrives exactly. FP16 with BF16 is refused
   * on every rank.
   */
  private static void compression(Communicator c) {
    Compression[][] kinds = {
      {Compression.FP16},
      {Compression.BF16},
      {Compression.DELTA},
      {Compression.FP16, Compression.DELTA},
      {Compression.BF16, Compression.DELTA},
      {},
    };
    int n = 4099;
    double[] exact = new double[n];
    for (int r = 0; r < size; ++r) {
      for (int k = 0; k < n; ++k) {
        exact[k] += value(r, k);
      }
    }
    int right = (rank + 1) % size;
    int left = (rank + size - 1) % size;
    for (Compression[] kind : kinds) {
      String what = Arrays.toString(kind);
      c.setCompression(kind);
      float[] x = new float[n];
      for (int k = 0; k < n; ++k) {
        x[k] = value(rank, k);
      }
      c.allReduce(x, ReduceOp.SUM);
      boolean bf16 = Arrays.asList(kind).contains(Compression.BF16);
      double bound = bf16 ? 2e-2 : 1e-3; // FP16 (and none) within 1e-3
      double worst = 0;
      for (int k = 0; k < n; ++k) {
        worst = Math.max(worst, Math.abs(x[k] - exact[k]) / exact[k]);
      }
      check(worst <= bound, what + ": allreduce off by " + worst + " (relative)");
      for (int step = 0; step < 2; ++step) { // the same size and tag twice
        double[] out = new double[1000];
        double[] in = new double[1000];
        for (int k = 0; k < out.length; ++k) {
          out[k] = rank * 1000 + k + (k <= step ? 0.5 : 0);
        }
        try (Request s = c.isend(out, right, 30)) {
          c.recv(in, left, 30);
          s.await();
        }
        for (int k = 0; k < in.length; ++k) {
          check(in[k] == left * 1000 + k + (k <= step ? 0.5 : 0), what + ": p2p at " + k);
        }
      }
    }
    try {
      c.setCompression(Compression.FP16, Compression.BF16);
      check(false, "FP16 with BF16 was accepted");
    } catch (HcommException e) {
      check(e.kind() == Status.INVALID_ARGUMENT, "FP16 with BF16: " + e);
      check(e.getMessage().contains("both FP16 and BF16"), "message: " + e.getMessage());
    }
    c.barrier();
    ok("compression");
  }

  /** Rank r's k-th float of the compression check: positive, no two alike. */
  private static float value(int r, int k) {
    return 0.5f + ((k * 7919 + r * 104729) % 1000) / 1000f * 1.5f;
  }

  private MultiRankMain() {}
}
