package org.hcomm;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import org.hcomm.internal.HcommNative;

/**
 * A nonblocking operation ({@link Communicator#isend}, {@link
 * Communicator#irecv}, {@link Communicator#iallReduce}). Close it (try with
 * resources) when done.
 *
 * <pre>{@code
 * try (Request q = comm.irecv(buf, Communicator.ANY_SOURCE, 7)) {
 *   q.await();                          // throws the HcommException subclass on failure
 *   int from = q.source(), n = q.count();
 * }
 * try (Request q = comm.irecv(buf, 0, 7)) {
 *   if (!q.await(50, TimeUnit.MILLISECONDS)) { ... }      // still pending; q stays valid
 * }
 * Request q = comm.isend(data, 1, 7);
 * q.future().whenComplete((r, e) -> r.close());           // or thenApply, join(), ...
 * }</pre>
 *
 * <p>Buffers: a direct ByteBuffer is used in place and must not be touched
 * until the request completes (the request keeps it reachable). A Java
 * array or a heap ByteBuffer is staged in a direct buffer that the request
 * owns: copied in when the request starts (sends, iallReduce), and back
 * into the array (or into the heap buffer, from the position it had when the
 * request started) when it completes (receives: the elements that arrived;
 * iallReduce: all). Until then it is not written.
 *
 * <p>Completion is seen by {@link #await()}, {@link #await(long, TimeUnit)},
 * {@link #test()}, or the request's {@link #future()}, which also completes
 * by itself (see {@link #future()}).
 *
 * <p>Closing a request that has not completed cancels a receive that no data
 * has reached; otherwise the operation finishes in the background, and its
 * memory is kept until the job's world communicator is closed. Its future,
 * if not complete, is then cancelled. Once closed, completed or not, its
 * other methods (but isCompleted) throw {@link InvalidArgumentException}.
 *
 * <p>THREAD SAFETY: the methods of one request are serialised. A request
 * stays usable after its communicator is closed (pending operations then
 * fail with {@link AbortedException}).
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

  /**
   * The request's future: waiting on it waits for the request on the caller's thread; it
   * completes by itself through the {@link Completer}, and whenever another call sees the
   * request end.
   */
  private static final class RequestFuture extends CompletableFuture<Request> {
    private final Request request;

    RequestFuture(Request request) {
      this.request = request;
    }

    /**
     * Waits for the request (up to the communicator's timeout_ms). Throws InterruptedException
     * (clearing the flag) if the thread is or gets interrupted, and {@link TimeoutException} at
     * timeout_ms, the request still pending.
     */
    @Override
    public Request get() throws InterruptedException, ExecutionException {
      if (!super.isDone()) {
        if (Thread.interrupted()) {
          throw new InterruptedException("Request.future().get(): interrupted before the "
              + "request completed (it is still pending)");
        }
        try {
          request.await();
        } catch (HcommInterruptedException e) {
          Thread.interrupted();
          InterruptedException x = new InterruptedException(e.getMessage());
          x.initCause(e);
          throw x;
        } catch (HcommException e) {
          if (!super.isDone()) {
            throw e; // timed out, or closed meanwhile: still pending
          }
        }
      }
      return super.get();
    }

    /**
     * As {@link #get()}, failures wrapped in CompletionException; an interrupt throws
     * {@link HcommInterruptedException} (the flag stays set).
     */
    @Override
    public Request join() {
      if (!super.isDone()) {
        try {
          request.await();
        } catch (HcommException e) {
          if (!super.isDone()) {
            throw e;
          }
        }
      }
      return super.join();
    }

    /** {@link Request#await(long, TimeUnit)}, then the result. */
    @Override
    public Request get(long timeout, TimeUnit unit)
        throws InterruptedException, ExecutionException, java.util.concurrent.TimeoutException {
      if (!super.isDone()) {
        if (Thread.interrupted()) {
          throw new InterruptedException("Request.future().get(timeout): interrupted before the "
              + "request completed (it is still pending)");
        }
        boolean done;
        try {
          done = request.await(timeout, unit);
        } catch (HcommInterruptedException e) {
          Thread.interrupted();
          InterruptedException x = new InterruptedException(e.getMessage());
          x.initCause(e);
          throw x;
        } catch (HcommException e) {
          if (!super.isDone()) {
            throw e;
          }
          done = true;
        }
        if (!done && !super.isDone()) {
          throw new java.util.concurrent.TimeoutException("hcomm: the request has not completed "
              + "after " + timeout + " " + unit.toString().toLowerCase(Locale.ROOT));
        }
      }
      return super.get();
    }

    /** Whether the request has ended: looks at it now, without waiting. */
    @Override
    public boolean isDone() {
      if (!super.isDone()) {
        request.poll();
      }
      return super.isDone();
    }

    void finish() {
      super.complete(request);
    }

    void fail(HcommException e) {
      super.completeExceptionally(e);
    }

    void abandon() {
      super.cancel(false);
    }
  }

  /** The first and longest pause of {@link #await(long, TimeUnit)} between two looks. */
  private static final long FIRST_PAUSE_NS = 10_000;
  private static final long MAX_PAUSE_NS = 1_000_000;

  private final Communicator comm; // keeps the communicator (and the world) reachable
  private final Pending pending;
  private final NativeHandle handle;
  private final Object target; // copied back into on completion (array, heap buffer), or null
  private final ByteBuffer staging;
  private final DType dtype;
  private final boolean copyAll;
  private final ReentrantLock lock = new ReentrantLock();
  private volatile boolean completed; // written under lock
  private HcommException failure; // the operation's error, once seen; guarded by lock
  private RequestFuture future; // guarded by lock
  private int source;
  private int tag;
  private int count;

  Request(Communicator comm, long req, ByteBuffer memory, Object target, DType dtype,
      boolean copyAll) {
    this.comm = comm;
    this.pending = new Pending(memory, comm.orphans());
    this.handle = new NativeHandle(this, req, "request", pending::free);
    this.target = target;
    this.staging = memory;
    this.dtype = dtype;
    this.copyAll = copyAll;
  }

  /**
   * Waits until the operation ends (up to the communicator's timeout_ms) and
   * throws its error, if any. After {@link TimeoutException} the request is
   * still pending and may be awaited again; so it is after {@link
   * HcommInterruptedException}, when the thread was interrupted while it
   * waited. Returns at once when already completed.
   */
  public void await() {
    lock.lock();
    try {
      if (completed && !handle.isClosed()) {
        return;
      }
      long h = handle.enter();
      try {
        try {
          HcommNative.hcomm_wait(h);
        } catch (HcommException e) {
          ended(e);
          throw e;
        }
        complete(h);
      } finally {
        handle.exit();
      }
    } finally {
      unlockAndSettle();
    }
  }

  /**
   * Waits at most {@code timeout} for the operation to end: true once it has (as {@link
   * #test()}: its error, if it failed, is thrown), false if it is still pending then (the
   * request stays valid). A timeout of 0 or less looks once. The wait does not spin: it
   * looks at the request with doubling pauses of 10 us up to 1 ms between looks.
   *
   * @throws HcommInterruptedException if the thread is interrupted while it waits (the flag
   *     stays set; the request stays valid)
   * @throws InvalidArgumentException if {@code unit} is null or the request is closed
   */
  public boolean await(long timeout, TimeUnit unit) {
    if (unit == null) {
      throw Buffers.invalid("Request.await: unit is null");
    }
    final long start = System.nanoTime();
    final long total = Math.max(0, unit.toNanos(timeout));
    long pause = FIRST_PAUSE_NS;
    while (true) {
      boolean locked;
      try {
        locked = lock.tryLock(Math.max(0, total - (System.nanoTime() - start)),
            TimeUnit.NANOSECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw interrupted(timeout, unit);
      }
      if (!locked) {
        return completed; // another thread held it until the deadline, waiting for it
      }
      try {
        if (testLocked()) {
          return true;
        }
      } finally {
        unlockAndSettle();
      }
      long left = total - (System.nanoTime() - start);
      if (left <= 0) {
        return false;
      }
      if (Thread.currentThread().isInterrupted()) {
        throw interrupted(timeout, unit);
      }
      LockSupport.parkNanos(this, Math.min(pause, left));
      pause = Math.min(2 * pause, MAX_PAUSE_NS);
    }
  }

  private static HcommInterruptedException interrupted(long timeout, TimeUnit unit) {
    return new HcommInterruptedException("Request.await(" + timeout + ", " + unit
        + "): interrupted (Thread.interrupt()); the request is still pending");
  }

  /**
   * True once the operation has ended successfully (and, for a receive into
   * an array, the data has been copied back); false while it is pending.
   * Never blocks. Throws the operation's error if it failed.
   */
  public boolean test() {
    lock.lock();
    try {
      return testLocked();
    } finally {
      unlockAndSettle();
    }
  }

  private boolean testLocked() {
    if (completed && !handle.isClosed()) {
      return true;
    }
    long h = handle.enter();
    try {
      boolean done;
      try {
        done = HcommNative.hcomm_test(h);
      } catch (HcommException e) {
        ended(e);
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

  /**
   * Returns a future of this request: it completes with this request once the operation has
   * ended successfully (its data copied back, {@link #source()} and the others valid), or
   * exceptionally with the operation's {@link HcommException} subclass (e.g. {@link
   * MismatchException}). It is cancelled if the request is closed before it ended. The same
   * future on every call.
   *
   * <p>It completes by itself: a daemon thread of the binding looks at pending requests with
   * hcomm_test (never blocking in the library; again within 2 ms, or 10 ms once nothing changed
   * for a second), and any call that sees the request end ({@link #await()}, {@link #test()})
   * completes it too. Dependent actions may run on that thread: keep them short, or use the
   * {@code *Async} variants. {@code get()} and {@code join()} wait in the library on the caller's thread (up to
   * timeout_ms; {@link TimeoutException} then, the request and the future still pending);
   * {@code get()} throws InterruptedException once the thread is interrupted, {@code join()}
   * {@link HcommInterruptedException}. Completing or cancelling the future yourself does not
   * touch the operation. The request still has to be closed (e.g. in a dependent action).
   *
   * @throws InvalidArgumentException if the request is closed
   */
  public CompletableFuture<Request> future() {
    RequestFuture f;
    lock.lock();
    try {
      if (handle.isClosed()) {
        throw handle.closedException();
      }
      if (future == null) {
        future = new RequestFuture(this);
        if (!completed && failure == null) {
          Completer.watch(this::poll);
        }
      }
      f = future;
    } finally {
      unlockAndSettle();
    }
    return f;
  }

  /**
   * The Completer's look (and the future's isDone): tests the request unless another thread
   * holds it (that thread settles the future). True once there is nothing left to look for.
   */
  private boolean poll() {
    if (!lock.tryLock()) {
      return false;
    }
    boolean finished;
    try {
      if (!completed && failure == null) {
        long h = handle.tryEnter();
        if (h != 0) {
          try {
            if (HcommNative.hcomm_test(h)) {
              complete(h);
            }
          } catch (HcommException e) {
            ended(e);
          } finally {
            handle.exit();
          }
        }
      }
      finished = completed || failure != null || handle.isClosed();
    } finally {
      unlockAndSettle();
    }
    return finished;
  }

  /** A failed wait or test: the operation's error, unless it is still pending. */
  private void ended(HcommException e) {
    if (!(e instanceof HcommInterruptedException) && e.kind() != Status.TIMEOUT) {
      pending.ended = true;
      failure = e;
    }
  }

  /** Unlocks, then completes the future (outside the lock) if the request has ended. */
  private void unlockAndSettle() {
    RequestFuture f = future;
    boolean ok = completed;
    HcommException x = failure;
    boolean closed = f != null && !ok && x == null && handle.isClosed();
    lock.unlock();
    if (f == null) {
      return;
    }
    if (ok) {
      f.finish();
    } else if (x != null) {
      f.fail(x);
    } else if (closed) {
      f.abandon();
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
    if (target != null) {
      Buffers.copyBack(staging, target, copyAll ? Buffers.elements(target, dtype) : count, dtype);
    }
    completed = true;
  }

  /**
   * The rank the message came from (for a send: the destination; not
   * meaningful for iallReduce). Only after completion.
   */
  public int source() {
    lock.lock();
    try {
      checkCompleted();
      return source;
    } finally {
      lock.unlock();
    }
  }

  /** The message's tag (for a send: its tag). Only after completion. */
  public int tag() {
    lock.lock();
    try {
      checkCompleted();
      return tag;
    } finally {
      lock.unlock();
    }
  }

  /** Elements that arrived (for a send: elements sent). Only after completion. */
  public int count() {
    lock.lock();
    try {
      checkCompleted();
      return count;
    } finally {
      lock.unlock();
    }
  }

  /** True once {@link #await()}, {@link #test()} or the future has seen it succeed. */
  public boolean isCompleted() {
    return completed;
  }

  private void checkCompleted() {
    if (handle.isClosed()) {
      throw handle.closedException();
    }
    if (!completed) {
      throw Buffers.invalid(
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

  /**
   * Frees the request (see the class comment for one still pending); its future, if not
   * complete, is cancelled. Idempotent.
   */
  @Override
  public void close() {
    lock.lock();
    try {
      handle.close();
    } finally {
      unlockAndSettle();
    }
  }

  /** The communicator the request was made on. */
  public Communicator communicator() {
    return comm;
  }
}
