package org.hcomm.examples;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import org.hcomm.Communicator;
import org.hcomm.DType;
import org.hcomm.HcommException;
import org.hcomm.ReduceOp;

/**
 * One rank of the Java example (`bazel run //examples/java:allreduce` starts
 * 4 of them through hcomm_run):
 *
 * <ol>
 *   <li>allreduces a float[] (copied to native memory and back),
 *   <li>allreduces a direct ByteBuffer of doubles (zero copy),
 *   <li>passes a token around a ring of point-to-point messages: rank 0
 *       starts it, every rank adds its rank and sends it on.
 * </ol>
 *
 * Each rank prints what it got and checks it; a wrong value exits 1.
 */
public final class AllReduceExample {
  private static boolean ok = true;

  private static void check(boolean good, String what) {
    if (!good) {
      System.out.println("WRONG: " + what);
      ok = false;
    }
  }

  public static void main(String[] args) {
    try (Communicator comm = Communicator.init()) { // RANK, WORLD_SIZE, ... from hcomm_run
      int rank = comm.rank();
      int size = comm.size();
      int sumOfRanks = size * (size - 1) / 2;

      // 1. float[]: element i is rank + i; the sum is sumOfRanks + size * i.
      float[] grad = new float[8];
      for (int i = 0; i < grad.length; ++i) {
        grad[i] = rank + i;
      }
      comm.allReduce(grad, ReduceOp.SUM);
      System.out.println("allreduce float[]: " + Arrays.toString(grad));
      for (int i = 0; i < grad.length; ++i) {
        check(grad[i] == sumOfRanks + size * i, "float[] element " + i);
      }

      // 2. Direct ByteBuffer of FLOAT64 in native byte order: the average of
      //    rank * 1.5 over ranks, and the maximum rank.
      ByteBuffer buf = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
      buf.putDouble(0, rank * 1.5);
      comm.allReduce(buf, DType.FLOAT64, ReduceOp.AVG);
      double avg = buf.getDouble(0);
      buf.putDouble(0, rank).putDouble(8, -rank);
      comm.allReduce(buf, DType.FLOAT64, ReduceOp.MAX);
      System.out.printf("allreduce ByteBuffer: avg %.3f, max %.0f, max of -rank %.0f%n", avg,
          buf.getDouble(0), buf.getDouble(8));
      check(Math.abs(avg - 1.5 * sumOfRanks / size) < 1e-12, "average");
      check(buf.getDouble(0) == size - 1 && buf.getDouble(8) == 0, "maximum");

      // 3. Token ring: 0 -> 1 -> ... -> size-1 -> 0, each adding its rank.
      int next = (rank + 1) % size;
      int prev = (rank + size - 1) % size;
      long[] token = new long[1];
      if (rank == 0) {
        token[0] = 1000;
        comm.send(token, next, 0);
        int from = comm.recv(token, Communicator.ANY_SOURCE, 0);
        System.out.println("token came back from rank " + from + ": " + token[0]);
        check(from == prev && token[0] == 1000 + sumOfRanks, "token after the ring");
      } else {
        comm.recv(token, prev, 0);
        System.out.println("token from rank " + prev + ": " + token[0]);
        check(token[0] == 1000 + (long) rank * (rank - 1) / 2, "token on the way");
        token[0] += rank;
        comm.send(token, next, 0);
      }
      comm.barrier();
    } catch (HcommException e) {
      System.out.println("hcomm error: " + e);
      System.exit(1);
    }
    System.out.println(ok ? "ok" : "FAILED");
    System.exit(ok ? 0 : 1);
  }

  private AllReduceExample() {}
}
