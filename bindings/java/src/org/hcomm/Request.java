package org.hcomm;

import java.nio.ByteBuffer;
import java.util.List;
import org.hcomm.internal.HcommNative;

/**
 * A nonblocking operation ({@link Communicator#isend}, {@link
 * Communicator#irecv}, {@link Communicator#iallReduce}). Close it (try with
 * resources) when done.
 *
 * <pre>{@code
 * try (Request q = comm.irecv(buf, Communicator.ANY_SOURCE, 7)) {
 *   q.await();                          // throws HcommException on failure
 *   int from = q.source(), n = q.count();
 * }
 * }</pre>
 *
 * <p>Buffers: a direct ByteBuffer is used in place and must not be touched
 * until the request completes (the request keeps it reachable). A Java
 * array is staged in a direct buffer that the request owns: copied in when
 * the request starts (sends), and back into the array when it completes
 * through {@link #await()} or {@link #test()} (receives: the elements that
 * arrived; iallReduce: all). Until then the array is not written.
 *
 * <p>Closing a request that has not completed cancels a receive that no data
 * has reached; otherwise the operation finishes in the background, and its
 * memory is kept until the job's world communicator is closed. Once closed,
 * completed or not, its other methods (but isCompleted) throw
 * {@link Status#INVALID_ARGUMENT}.
 *
 * <p>THREAD SAFETY: the methods of one request are serialised. A request
 * stays usable after its communicator is closed (pending operations then
 * fail with {@link Status#ABORTED}).
 */
public final class Request implements AutoCloseable {
  /** What close() needs, without referring to the Request. */
  private static final class Pending {
    final Object memory;
    final Communicator.Orphans orphans;
    volatile boolean ended;

    Pending(Object memory, Communicator.Orphans orphans) {
      this.memory = memory;
      this.orphans = orphans;
    }

    void free(long h) {
      boolean ended = this.ended;
      if (!ended) {
        try {
          ended = HcommNative.hcomm_test(h);
        } catch (HcommException e) {
          ended = true; // it ended, with an error
        }
      }
      if (!ended) {
        orphans.keep(memory);
      }
      HcommNative.hcomm_request_free(h);
    }
  }

  private final Communicator comm; // keeps the communicator (and the world) reachable
  private final Pending pending;
  private final NativeHandle handle;
  private final Object array; // copied back into on completion, or null
  private final ByteBuffer staging;
  private final boolean copyAll;
  private boolean completed;
  private int source;
  private int tag;
  private int count;

  Request(Communicator comm, long req, ByteBuffer memory, Object array, boolean copyAll) {
    this.comm = comm;
    this.pending = new Pending(memory, comm.orphans());
    this.handle = new NativeHandle(this, req, "request", pending::free);
    this.array = array;
    this.staging = memory;
    this.copyAll = copyAll;
  }

  /**
   * Waits until the operation ends (up to the communicator's timeout_ms) and
   * throws its error, if any. After {@link Status#TIMEOUT} the request is
   * still pending and may be awaited again. Returns at once when already
   * completed.
   */
  public synchronized void await() {
    if (completed && !handle.isClosed()) {
      return;
    }
    long h = handle.enter();
    try {
      try {
        HcommNative.hcomm_wait(h);
      } catch (HcommException e) {
        if (e.status() != Status.TIMEOUT.code()) {
          pending.ended = true;
        }
        throw e;
      }
      complete(h);
    } finally {
      handle.exit();
    }
  }

  /**
   * True once the operation has ended successfully (and, for a receive into
   * an array, the data has been copied back); false while it is pending.
   * Never blocks. Throws the operation's error if it failed.
   */
  public synchronized boolean test() {
    if (completed && !handle.isClosed()) {
      return true;
    }
    long h = handle.enter();
    try {
      boolean done;
      try {
        done = HcommNative.hcomm_test(h);
      } catch (HcommException e) {
        pending.ended = true;
        throw e;
      }
      if (done) {
        complete(h);
      }
      return done;
    } finally {
      handle.exit();
    }
  }

  private void complete(long h) {
    int[] src = new int[1];
    int[] tg = new int[1];
    long[] n = new long[1];
    HcommNative.hcomm_request_info(h, src, tg, n);
    pending.ended = true;
    source = src[0];
    tag = tg[0];
    count = (int) n[0];
    if (array != null) {
      Buffers.copyBack(staging, array, copyAll ? java.lang.reflect.Array.getLength(array) : count);
    }
    completed = true;
  }

  /**
   * The rank the message came from (for a send: the destination; not
   * meaningful for iallReduce). Only after completion.
   */
  public synchronized int source() {
    checkCompleted();
    return source;
  }

  /** The message's tag (for a send: its tag). Only after completion. */
  public synchronized int tag() {
    checkCompleted();
    return tag;
  }

  /** Elements that arrived (for a send: elements sent). Only after completion. */
  public synchronized int count() {
    checkCompleted();
    return count;
  }

  /** True once {@link #await()} or {@link #test()} has seen it succeed. */
  public synchronized boolean isCompleted() {
    return completed;
  }

  private void checkCompleted() {
    if (handle.isClosed()) {
      throw handle.closedException();
    }
    if (!completed) {
      throw new HcommException(Status.INVALID_ARGUMENT,
          "hcomm: the request has not completed (call await() or test() first)");
    }
  }

  /**
   * Waits for every request, even after one fails, then throws the first
   * failure (as hcomm_waitall). Null entries are skipped.
   */
  public static void awaitAll(Request... requests) {
    HcommException first = null;
    for (Request r : requests) {
      if (r == null) {
        continue;
      }
      try {
        r.await();
      } catch (HcommException e) {
        if (first == null) {
          first = e;
        }
      }
    }
    if (first != null) {
      throw first;
    }
  }

  /** {@link #awaitAll(Request...)} over a list. */
  public static void awaitAll(List<Request> requests) {
    awaitAll(requests.toArray(new Request[0]));
  }

  /** Frees the request (see the class comment for one still pending). Idempotent. */
  @Override
  public synchronized void close() {
    handle.close();
  }

  /** The communicator the request was made on. */
  public Communicator communicator() {
    return comm;
  }
}
