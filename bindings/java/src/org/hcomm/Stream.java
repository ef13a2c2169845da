package org.hcomm;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import org.hcomm.internal.HcommNative;

/**
 * An ordered queue of operations on a communicator, run by the library in the background: the
 * Java face of {@code hcomm_stream_t} (c_api/include/hcomm/hcomm.h, "Streams, priorities and
 * fusion", has the contract). Each call returns at once with a {@link CompletableFuture} that
 * completes when the operation has run.
 *
 * <pre>{@code
 * try (Stream grads = c.stream(10); Stream bulk = c.stream(0)) {   // collective, in this order
 *   CompletableFuture<Void> f = grads.allReduce(g, ReduceOp.SUM);  // returns at once
 *   bulk.allReduce(w, ReduceOp.SUM);
 *   f.join();                            // g holds the sum (HcommException, wrapped, if it failed)
 *   bulk.synchronize();                  // w too; throws the stream's first error
 * }
 * }</pre>
 *
 * <p>Operations of one stream run one after another in the order they were queued, and every
 * rank queues the same operations in the same order. A stream is a matching context of its own:
 * its sends and receives never match those of other streams or of the communicator's blocking
 * calls. A higher {@code priority} is served first where streams compete. A failed operation
 * fails the rest of the stream with the same status until {@link #synchronize()} throws it.
 *
 * <p>Buffers ({@code T}) are those of {@link Communicator}. They belong to the library from the
 * call until the operation has run. A direct ByteBuffer is used in place. An array (or a heap
 * ByteBuffer: its bytes from position to limit) is staged in a direct buffer, copied in when a
 * queued operation first uses it; every later operation of any stream that uses the same array
 * before it is released works on that same copy (so operations chain through an array as they
 * do through a C buffer, also across streams ordered by an {@link Event}), and the copy is
 * written back into the array (when some operation writes it) once the last of them is seen to
 * have run, by each stream that used it. Until then the array is not written, and what is
 * written into it is not seen. A heap ByteBuffer must keep its position and limit while it is
 * staged ({@link InvalidArgumentException} otherwise).
 *
 * <p>When the futures complete: the library runs the queue on its own thread, and this binding
 * records a mark (a pooled {@code hcomm_event_t}) after each operation; a future completes, and
 * its arrays are written back, when the binding sees that mark reached. A daemon thread of the
 * binding looks at the marks of streams with pending futures (hcomm_event_query, never
 * blocking; again within 2 ms, or 10 ms once nothing changed for a second), so futures complete,
 * and their dependent actions run, by themselves. Other calls see marks reached too:
 * {@link #synchronize()}, {@link #query()}, {@link #close()}, {@link Event#synchronize()} and
 * {@link Event#query()} of an event recorded on this stream, the next call that queues an
 * operation, and {@code get()}, {@code join()} and {@code isDone()} of the future itself (which
 * wait for, or look at, that operation's mark); and when another stream that waited for an event
 * recorded on this one ({@link #waitEvent}) is seen past that wait, so is what came before the
 * event here. Futures of one stream complete in queue order, on the thread that saw them done:
 * keep their dependent actions short, or use the {@code *Async} variants. A failed operation
 * completes its future exceptionally with its {@link HcommException} subclass (the status of the
 * failure that made it fail); the stream keeps that error for {@link #synchronize()}. After a
 * failure, arrays hold what the library left in the staged copy, as a C buffer would (operations
 * skipped after a failure write nothing). Completing or cancelling a future yourself does not
 * touch the operation.
 *
 * <p>Errors throw the {@link HcommException} subclass of their status; a wait ended by {@link
 * Thread#interrupt()} throws {@link HcommInterruptedException}. A collective that this binding
 * refuses by its own checks (a null buffer, a recv too small) still takes its turn on the
 * stream, so that the other ranks' operation fails at once with {@link Status#MISMATCH} instead
 * of waiting.
 *
 * <p>THREAD SAFETY: every method may be called from any thread; operations queued from several
 * threads at once run in the order the stream took them. {@link #close()} waits for calls in
 * progress on other threads.
 */
public final class Stream implements AutoCloseable {
  /**
   * The direct copy of an array or a heap ByteBuffer, shared by every queued operation (of any
   * stream) that uses it.
   */
  private static final class Staged {
    final Object array; // the user's array or heap buffer: the key in STAGED
    final Object target; // where the copy goes back (Buffers.target: a heap buffer's window)
    final ByteBuffer memory;
    int users; // queued operations that use it; guarded by STAGED
    boolean written; // one of them writes it; guarded by STAGED

    Staged(Object array, ByteBuffer memory) {
      this.array = array;
      this.target = Buffers.target(array);
      this.memory = memory;
    }
  }

  /** Arrays and heap buffers in use by queued operations of any stream, by identity. */
  private static final Map<Object, Staged> STAGED = new IdentityHashMap<>();

  /** One queued operation, or a wait for another stream's mark (waitEvent). */
  private static final class Op {
    final long seq; // 1 for the stream's first operation
    final OpFuture future; // null for a wait
    final List<Staged> staged; // the arrays it uses
    final Object sendMemory; // the memory the library uses, kept reachable until it has run
    final Object recvMemory;
    final Queue upstream; // a wait's: the stream whose mark it waits for
    long event; // the mark after it; 0 once collected, or when it could not be recorded
    HcommException failure; // the operation's error, once collected

    Op(long seq, OpFuture future, List<Staged> staged, Object sendMemory, Object recvMemory,
        Queue upstream, long event) {
      this.seq = seq;
      this.future = future;
      this.staged = staged;
      this.sendMemory = sendMemory;
      this.recvMemory = recvMemory;
      this.upstream = upstream;
      this.event = event;
    }
  }

  /**
   * The queued operations and the events that mark them: what the handle's destroy (also run by
   * the Cleaner) needs, without referring to the Stream. Every native call with one of the events
   * is made holding the stream's handle (the read lock, or the write lock while it is destroyed),
   * so an event is never destroyed under a call.
   */
  private static final class Queue {
    NativeHandle handle; // set once, right after construction
    private final ArrayDeque<Op> pending = new ArrayDeque<>(); // guarded by this
    private final ArrayDeque<Op> ready = new ArrayDeque<>(); // collected, future not completed
    private final ArrayDeque<Long> spare = new ArrayDeque<>(); // events free for reuse
    private long queued; // operations (and waits) queued so far; guarded by this
    private long synced; // operations known to have run (synchronize); guarded by this
    /**
     * Streams whose marks collected waits of this one waited for: what ran there before those
     * marks can be collected too (see wake()). Guarded by this.
     */
    private final List<Queue> woken = new ArrayList<>();
    /** Held while completing futures, so that they complete in order. */
    private final ReentrantLock completing = new ReentrantLock();
    /** The Completer looks at this queue (see poll()); guarded by this. */
    private boolean watched;

    /** An event for the next operation's mark: a spare one, or a new one. */
    long takeEvent() {
      synchronized (this) {
        Long e = spare.pollFirst();
        if (e != null) {
          return e;
        }
      }
      return HcommNative.hcomm_event_create();
    }

    synchronized void giveEvent(long e) {
      spare.addLast(e);
    }

    /**
     * Queues one operation and records its mark; the caller holds the handle ({@code h}). Throws
     * if the library refused the operation (nothing is then queued here).
     */
    synchronized OpFuture push(long h, int kind, Object send, Object recv, long count, int dtype,
        int op, int peerOrRoot, int tag, List<Staged> staged, long event) {
      HcommNative.hcomm_java_stream_enqueue(h, kind, send, recv, count, dtype, op, peerOrRoot,
          tag);
      OpFuture f = new OpFuture(this);
      Op o = new Op(++queued, f, staged, send, recv, null, event);
      f.op = o;
      pending.addLast(o);
      if (!watched) {
        watched = true;
        Completer.watch(this::poll);
      }
      try {
        HcommNative.hcomm_event_record(event, h);
      } catch (HcommException e) {
        // Not with live handles. Without its mark the future fails now, and the operation's
        // arrays are released at the next synchronize().
        o.event = 0;
        o.failure = e;
        spare.addLast(event);
        f.fail(e);
      }
      return f;
    }

    /**
     * Queues a wait for event {@code e}'s latest mark, recorded on {@code upstream} (null: never
     * recorded), with its own mark {@code event} after it; the caller holds both handles and
     * the event's monitor, so that upstream is the stream of that mark.
     */
    synchronized void pushWait(long h, long e, Queue upstream, long event) {
      try {
        HcommNative.hcomm_stream_wait_event(h, e);
      } catch (HcommException x) {
        spare.addLast(event);
        throw x;
      }
      if (upstream == null) {
        spare.addLast(event);
        return;
      }
      Op o = new Op(++queued, null, new ArrayList<>(0), null, null, upstream, event);
      pending.addLast(o);
      try {
        HcommNative.hcomm_event_record(event, h);
      } catch (HcommException x) {
        o.event = 0; // not with live handles; then it is collected at synchronize()
        spare.addLast(event);
      }
    }

    synchronized long queued() {
      return queued;
    }

    /** Everything queued up to {@code seq} has run (a synchronize returned). */
    synchronized void synced(long seq) {
      synced = Math.max(synced, seq);
    }

    /**
     * Moves the operations whose mark is reached, in order, from pending to ready: their error
     * taken, their event made spare, their arrays released. The caller holds the handle.
     */
    void collect() {
      synchronized (this) {
        for (Op o; (o = pending.peekFirst()) != null; ) {
          if (o.seq > synced) {
            if (o.event == 0) {
              break; // no mark: known to have run once a synchronize says so
            }
            boolean reached;
            try {
              reached = HcommNative.hcomm_event_query(o.event);
            } catch (HcommException e) {
              reached = true;
              o.failure = e;
            }
            if (!reached) {
              break;
            }
          }
          if (o.event != 0) {
            if (o.failure == null) {
              try {
                HcommNative.hcomm_event_synchronize(o.event); // reached: only its status
              } catch (HcommException e) {
                o.failure = e;
              }
            }
            spare.addLast(o.event);
            o.event = 0;
          }
          pending.pollFirst();
          release(o.staged);
          if (o.upstream != null) {
            woken.add(o.upstream);
          }
          if (o.future != null) {
            ready.addLast(o);
          }
        }
      }
    }

    /**
     * Collects, on the streams whose marks this one's collected waits waited for, what ran
     * before those marks (an array used on both streams is then written back). Called holding
     * no handle and no monitor.
     */
    void wake() {
      List<Queue> up;
      synchronized (this) {
        if (woken.isEmpty()) {
          return;
        }
        up = new ArrayList<>(woken);
        woken.clear();
      }
      for (Queue q : up) {
        q.progress(false);
      }
    }

    /**
     * Completes the futures of collected operations, in order. With {@code wait}, waits for
     * another thread that is completing some; without, leaves them to it.
     */
    void drain(boolean wait) {
      while (true) {
        if (wait) {
          completing.lock();
        } else if (!completing.tryLock()) {
          return; // its holder looks again after it lets go
        }
        try {
          for (Op o; (o = takeReady()) != null; ) {
            if (o.failure == null) {
              o.future.finish();
            } else {
              o.future.fail(o.failure);
            }
          }
        } finally {
          completing.unlock();
        }
        synchronized (this) {
          if (ready.isEmpty()) {
            return;
          }
        }
      }
    }

    private synchronized Op takeReady() {
      return ready.pollFirst();
    }

    /**
     * The Completer's look: progress(false), then true (done watching) once nothing pending has
     * a mark to look at: everything ran, or what is left is known only at synchronize().
     */
    boolean poll() {
      progress(false);
      synchronized (this) {
        Op first = pending.peekFirst();
        if (first == null || (first.event == 0 && first.seq > synced)) {
          watched = false;
          return true;
        }
        return false;
      }
    }

    /** collect(), wake() and drain() from a thread that holds no handle. */
    void progress(boolean wait) {
      if (handle.tryEnter() != 0) { // 0: closed, or being closed, which completes everything
        try {
          collect();
        } finally {
          handle.exit();
        }
      }
      wake();
      drain(wait);
    }

    /**
     * Waits for {@code o}'s mark and completes the futures up to it. TIMEOUT (the stream went
     * timeout_ms without finishing an operation) is thrown, and o stays pending.
     */
    void await(Op o) {
      if (handle.tryEnter() != 0) {
        try {
          long e;
          synchronized (this) {
            e = o.event;
          }
          if (e != 0) {
            try {
              HcommNative.hcomm_event_synchronize(e);
            } catch (HcommException x) {
              if (x.kind() == Status.TIMEOUT && !collectedOrReached(o, e)) {
                throw x;
              }
            }
          }
          collect();
        } finally {
          handle.exit();
        }
      }
      wake();
      drain(true);
    }

    /** Whether o was collected, or its mark reached (its own failure was a TIMEOUT). */
    private synchronized boolean collectedOrReached(Op o, long e) {
      return o.event != e || HcommNative.hcomm_event_query(e);
    }

    /**
     * The handle's destroy: runs out the queue (hcomm_stream_destroy), completes everything and
     * destroys the events. Throws the error the destroy returned, after all that.
     */
    void destroy(long h) {
      try {
        HcommNative.hcomm_stream_destroy(h);
      } finally {
        synchronized (this) {
          synced = queued; // the destroy ran everything
        }
        collect();
        synchronized (this) {
          for (Long e : spare) {
            HcommNative.hcomm_event_destroy(e);
          }
          spare.clear();
        }
        drain(false); // close() drains again once the handle is released
      }
    }
  }

  /**
   * The future of one queued operation: waiting on it (or asking whether it is done) looks at
   * that operation's mark itself, so it completes without another call on the stream.
   */
  private static final class OpFuture extends CompletableFuture<Void> {
    private final Queue queue;
    Op op; // set right after construction

    OpFuture(Queue queue) {
      this.queue = queue;
    }

    void finish() {
      super.complete(null);
    }

    void fail(HcommException e) {
      super.completeExceptionally(e);
    }

    /**
     * Waits until the operation has run. Throws {@link TimeoutException}, the operation still
     * pending, once the stream went the communicator's timeout_ms without finishing one, and
     * InterruptedException (clearing the flag) if the thread is or gets interrupted.
     */
    @Override
    public Void get() throws InterruptedException, ExecutionException {
      if (!super.isDone()) {
        if (Thread.interrupted()) {
          throw new InterruptedException("Stream future get(): interrupted before the operation "
              + "ran (it is still queued)");
        }
        try {
          queue.await(op);
        } catch (HcommInterruptedException e) {
          Thread.interrupted(); // InterruptedException's contract: the flag is cleared
          InterruptedException x = new InterruptedException(e.getMessage());
          x.initCause(e);
          throw x;
        }
      }
      return super.get();
    }

    /**
     * As {@link #get()}, failures wrapped in CompletionException; an interrupt throws
     * {@link HcommInterruptedException} (the flag stays set).
     */
    @Override
    public Void join() {
      if (!super.isDone()) {
        queue.await(op);
      }
      return super.join();
    }

    /** Looks at the operation's mark now and then (at most every millisecond) until the timeout. */
    @Override
    public Void get(long timeout, TimeUnit unit)
        throws InterruptedException, ExecutionException, TimeoutException {
      final long deadline = System.nanoTime() + unit.toNanos(timeout);
      long pause = 10_000;
      while (true) {
        queue.progress(false);
        if (super.isDone()) {
          return super.get();
        }
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          throw new TimeoutException("hcomm: the stream operation has not run after " + timeout
              + " " + unit.toString().toLowerCase(java.util.Locale.ROOT));
        }
        LockSupport.parkNanos(this, Math.min(pause, left));
        if (Thread.interrupted()) {
          throw new InterruptedException();
        }
        pause = Math.min(2 * pause, 1_000_000);
      }
    }

    /** Whether the operation has run: looks at its mark, without waiting. */
    @Override
    public boolean isDone() {
      if (!super.isDone()) {
        queue.progress(false);
      }
      return super.isDone();
    }
  }

  /** No hcomm_dtype_t: the library refuses an operation given it (see {@link #refused}). */
  private static final int BAD_DTYPE = -1;

  private final NativeHandle handle;
  private final Queue queue;
  private final int priority;
  private final int rank;
  private final int size;

  /**
   * A new stream of {@code comm} (hcomm_stream_create). Collective over comm: every rank makes
   * its streams of comm in the same order (the k-th stream of each rank meets the k-th of the
   * others). A higher {@code priority} is served first where streams compete; 0 is the default.
   * The stream keeps working after comm is closed; close it too. Same as {@link
   * Communicator#stream(int)}.
   */
  public Stream(Communicator comm, int priority) {
    if (comm == null) {
      throw Buffers.invalid("Stream: comm is null");
    }
    this.rank = comm.rank();
    this.size = comm.size();
    this.priority = priority;
    long s = comm.createStream(priority);
    final Queue q = new Queue();
    this.queue = q;
    this.handle = new NativeHandle(this, s, "stream", q::destroy);
    q.handle = handle;
  }

  /** The priority the stream was made with. */
  public int priority() {
    return priority;
  }

  /**
   * Waits until everything queued before the call has run (up to the communicator's timeout_ms
   * without progress), completes those operations' futures and writes back their arrays. Then
   * throws the stream's first error since the last synchronize, if any, which it clears: later
   * operations run again. Throws {@link Status#TIMEOUT} once the stream went timeout_ms without
   * finishing an operation (the message says what runs and what is queued); the work goes on.
   */
  public void synchronize() {
    long h = handle.enter();
    HcommException failure = null;
    try {
      long upTo = queue.queued();
      try {
        HcommNative.hcomm_stream_synchronize(h);
      } catch (HcommException e) {
        failure = e;
      }
      if (failure == null || failure.kind() != Status.TIMEOUT) {
        queue.synced(upTo);
      }
      queue.collect();
    } finally {
      handle.exit();
    }
    queue.wake();
    queue.drain(true);
    if (failure != null) {
      throw failure;
    }
  }

  /**
   * True when everything queued so far has run (hcomm_stream_query); completes the futures of
   * the operations that have. Never blocks on the stream.
   */
  public boolean query() {
    long h = handle.enter();
    boolean idle;
    try {
      idle = HcommNative.hcomm_stream_query(h);
      queue.collect();
    } finally {
      handle.exit();
    }
    queue.wake();
    queue.drain(false);
    return idle;
  }

  /**
   * This stream's later operations wait until {@code event}'s latest mark (recorded before this
   * call) is reached (hcomm_stream_wait_event). Returns at once. Once this stream is seen past
   * the wait, the operations before the mark on the stream it was recorded on are seen done too
   * (their futures complete, their arrays are written back).
   */
  public void waitEvent(Event event) {
    if (event == null) {
      throw Buffers.invalid("Stream.waitEvent: event is null");
    }
    long h = handle.enter();
    try {
      long e = event.handle().enter();
      try {
        long mark = queue.takeEvent();
        synchronized (event) {
          Stream up = event.recordedOn();
          queue.pushWait(h, e, up == null ? null : up.queue, mark);
        }
      } finally {
        event.handle().exit();
      }
    } finally {
      handle.exit();
    }
  }

  /** Records {@code event} at the end of what is queued now (Event.record). */
  void record(Event event) {
    long h = handle.enter();
    try {
      long e = event.handle().enter();
      try {
        synchronized (event) { // waitEvent sees the stream of the mark it waits for
          HcommNative.hcomm_event_record(e, h);
          event.recordedOn(this);
        }
      } finally {
        event.handle().exit();
      }
    } finally {
      handle.exit();
    }
  }

  /** What an event recorded on this stream drives when it is reached. */
  void progress(boolean wait) {
    queue.progress(wait);
  }

  /** True after {@link #close()}. */
  public boolean isClosed() {
    return handle.isClosed();
  }

  /**
   * Runs what is queued, then ends the stream (hcomm_stream_destroy); every future is then
   * complete and every array written back. Waits for calls in progress on other threads.
   * Idempotent; throws an error that {@link #synchronize()} has not thrown yet, if any (the
   * stream is released anyway).
   */
  @Override
  public void close() {
    try {
      handle.close();
    } finally {
      queue.wake();
      queue.drain(true);
    }
  }

  @Override
  public String toString() {
    return isClosed() ? "Stream(closed)" : "Stream(priority " + priority + ", rank " + rank
        + " of " + size + ")";
  }

  /**
   * Queues a barrier: its future completes once every rank's stream has reached it.
   */
  public CompletableFuture<Void> barrier() {
    return submit(HcommNative.HCOMM_OP_BARRIER, null, null, 0, DType.UINT8, 0, 0, 0);
  }

  // --- typed overloads ---------------------------------------------------------------------

  /**
   * In place: every rank's {@code buf} becomes {@code op} over all ranks' buffers.
   * {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> allReduce(byte[] buf, ReduceOp op) {
    return allReduceImpl(buf, DType.INT8, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> allReduce(int[] buf, ReduceOp op) {
    return allReduceImpl(buf, DType.INT32, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> allReduce(long[] buf, ReduceOp op) {
    return allReduceImpl(buf, DType.INT64, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> allReduce(float[] buf, ReduceOp op) {
    return allReduceImpl(buf, DType.FLOAT32, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> allReduce(double[] buf, ReduceOp op) {
    return allReduceImpl(buf, DType.FLOAT64, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> allReduce(ByteBuffer buf, ReduceOp op) {
    return allReduceImpl(buf, DType.UINT8, op);
  }

  /**
   * {@link #allReduce(byte[], ReduceOp)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> allReduce(ByteBuffer buf, DType dtype, ReduceOp op) {
    return allReduceImpl(buf, dtype, op);
  }

  /**
   * Copies rank {@code root}'s {@code buf} to every rank's. {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> broadcast(byte[] buf, int root) {
    return broadcastImpl(buf, DType.INT8, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> broadcast(int[] buf, int root) {
    return broadcastImpl(buf, DType.INT32, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> broadcast(long[] buf, int root) {
    return broadcastImpl(buf, DType.INT64, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> broadcast(float[] buf, int root) {
    return broadcastImpl(buf, DType.FLOAT32, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> broadcast(double[] buf, int root) {
    return broadcastImpl(buf, DType.FLOAT64, root);
  }

  /** {@link #broadcast(byte[], int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> broadcast(ByteBuffer buf, int root) {
    return broadcastImpl(buf, DType.UINT8, root);
  }

  /**
   * {@link #broadcast(byte[], int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> broadcast(ByteBuffer buf, DType dtype, int root) {
    return broadcastImpl(buf, dtype, root);
  }

  /**
   * In place at {@code root}: its {@code buf} becomes {@code op} over all ranks' buffers (the
   * others' are left unchanged). {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> reduce(byte[] buf, ReduceOp op, int root) {
    return reduceImpl(buf, DType.INT8, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> reduce(int[] buf, ReduceOp op, int root) {
    return reduceImpl(buf, DType.INT32, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> reduce(long[] buf, ReduceOp op, int root) {
    return reduceImpl(buf, DType.INT64, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> reduce(float[] buf, ReduceOp op, int root) {
    return reduceImpl(buf, DType.FLOAT32, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> reduce(double[] buf, ReduceOp op, int root) {
    return reduceImpl(buf, DType.FLOAT64, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> reduce(ByteBuffer buf, ReduceOp op, int root) {
    return reduceImpl(buf, DType.UINT8, op, root);
  }

  /**
   * {@link #reduce(byte[], ReduceOp, int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> reduce(ByteBuffer buf, DType dtype, ReduceOp op, int root) {
    return reduceImpl(buf, dtype, op, root);
  }

  /**
   * {@code recv} (at least size &times; send elements) gets every rank's {@code send}, in rank
   * order. {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> allGather(byte[] send, byte[] recv) {
    return allGatherImpl(send, recv, DType.INT8);
  }

  /** {@link #allGather(byte[], byte[])} for {@code int[]} (INT32). */
  public CompletableFuture<Void> allGather(int[] send, int[] recv) {
    return allGatherImpl(send, recv, DType.INT32);
  }

  /** {@link #allGather(byte[], byte[])} for {@code long[]} (INT64). */
  public CompletableFuture<Void> allGather(long[] send, long[] recv) {
    return allGatherImpl(send, recv, DType.INT64);
  }

  /** {@link #allGather(byte[], byte[])} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> allGather(float[] send, float[] recv) {
    return allGatherImpl(send, recv, DType.FLOAT32);
  }

  /** {@link #allGather(byte[], byte[])} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> allGather(double[] send, double[] recv) {
    return allGatherImpl(send, recv, DType.FLOAT64);
  }

  /** {@link #allGather(byte[], byte[])} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> allGather(ByteBuffer send, ByteBuffer recv) {
    return allGatherImpl(send, recv, DType.UINT8);
  }

  /**
   * {@link #allGather(byte[], byte[])} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> allGather(ByteBuffer send, ByteBuffer recv, DType dtype) {
    return allGatherImpl(send, recv, dtype);
  }

  /**
   * {@code send} holds size blocks; rank r's {@code recv} gets {@code op} over all ranks' block r.
   * {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> reduceScatter(byte[] send, byte[] recv, ReduceOp op) {
    return reduceScatterImpl(send, recv, DType.INT8, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> reduceScatter(int[] send, int[] recv, ReduceOp op) {
    return reduceScatterImpl(send, recv, DType.INT32, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> reduceScatter(long[] send, long[] recv, ReduceOp op) {
    return reduceScatterImpl(send, recv, DType.INT64, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> reduceScatter(float[] send, float[] recv, ReduceOp op) {
    return reduceScatterImpl(send, recv, DType.FLOAT32, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> reduceScatter(double[] send, double[] recv, ReduceOp op) {
    return reduceScatterImpl(send, recv, DType.FLOAT64, op);
  }

  /**
   * {@link #reduceScatter(byte[], byte[], ReduceOp)} for a ByteBuffer of UINT8 (zero copy when
   * direct).
   */
  public CompletableFuture<Void> reduceScatter(ByteBuffer send, ByteBuffer recv, ReduceOp op) {
    return reduceScatterImpl(send, recv, DType.UINT8, op);
  }

  /**
   * {@link #reduceScatter(byte[], byte[], ReduceOp)} for a ByteBuffer of {@code dtype}
   * elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> reduceScatter(ByteBuffer send, ByteBuffer recv, DType dtype,
      ReduceOp op) {
    return reduceScatterImpl(send, recv, dtype, op);
  }

  /**
   * Block j of {@code send} (size blocks) goes to rank j; block i of {@code recv} comes from rank
   * i. {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> allToAll(byte[] send, byte[] recv) {
    return allToAllImpl(send, recv, DType.INT8);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code int[]} (INT32). */
  public CompletableFuture<Void> allToAll(int[] send, int[] recv) {
    return allToAllImpl(send, recv, DType.INT32);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code long[]} (INT64). */
  public CompletableFuture<Void> allToAll(long[] send, long[] recv) {
    return allToAllImpl(send, recv, DType.INT64);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> allToAll(float[] send, float[] recv) {
    return allToAllImpl(send, recv, DType.FLOAT32);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> allToAll(double[] send, double[] recv) {
    return allToAllImpl(send, recv, DType.FLOAT64);
  }

  /** {@link #allToAll(byte[], byte[])} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> allToAll(ByteBuffer send, ByteBuffer recv) {
    return allToAllImpl(send, recv, DType.UINT8);
  }

  /**
   * {@link #allToAll(byte[], byte[])} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> allToAll(ByteBuffer send, ByteBuffer recv, DType dtype) {
    return allToAllImpl(send, recv, dtype);
  }

  /**
   * {@code root}'s {@code recv} (size &times; send elements) gets every rank's {@code send} in rank
   * order; {@code recv} is ignored (may be null) on the other ranks. {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> gather(byte[] send, byte[] recv, int root) {
    return gatherImpl(send, recv, DType.INT8, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> gather(int[] send, int[] recv, int root) {
    return gatherImpl(send, recv, DType.INT32, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> gather(long[] send, long[] recv, int root) {
    return gatherImpl(send, recv, DType.INT64, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> gather(float[] send, float[] recv, int root) {
    return gatherImpl(send, recv, DType.FLOAT32, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> gather(double[] send, double[] recv, int root) {
    return gatherImpl(send, recv, DType.FLOAT64, root);
  }

  /** {@link #gather(byte[], byte[], int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> gather(ByteBuffer send, ByteBuffer recv, int root) {
    return gatherImpl(send, recv, DType.UINT8, root);
  }

  /**
   * {@link #gather(byte[], byte[], int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> gather(ByteBuffer send, ByteBuffer recv, DType dtype, int root) {
    return gatherImpl(send, recv, dtype, root);
  }

  /**
   * Block r of {@code root}'s {@code send} (size &times; recv elements) goes to rank r's
   * {@code recv}; {@code send} is ignored (may be null) on the other ranks.
   * {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> scatter(byte[] send, byte[] recv, int root) {
    return scatterImpl(send, recv, DType.INT8, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> scatter(int[] send, int[] recv, int root) {
    return scatterImpl(send, recv, DType.INT32, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> scatter(long[] send, long[] recv, int root) {
    return scatterImpl(send, recv, DType.INT64, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> scatter(float[] send, float[] recv, int root) {
    return scatterImpl(send, recv, DType.FLOAT32, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> scatter(double[] send, double[] recv, int root) {
    return scatterImpl(send, recv, DType.FLOAT64, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> scatter(ByteBuffer send, ByteBuffer recv, int root) {
    return scatterImpl(send, recv, DType.UINT8, root);
  }

  /**
   * {@link #scatter(byte[], byte[], int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> scatter(ByteBuffer send, ByteBuffer recv, DType dtype, int root) {
    return scatterImpl(send, recv, dtype, root);
  }

  /**
   * Sends {@code buf} to rank {@code dst} with {@code tag} (>= 0), in the stream's own matching
   * context: only a recv of this stream on {@code dst} takes it. {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> send(byte[] buf, int dst, int tag) {
    return sendImpl(buf, DType.INT8, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> send(int[] buf, int dst, int tag) {
    return sendImpl(buf, DType.INT32, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> send(long[] buf, int dst, int tag) {
    return sendImpl(buf, DType.INT64, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> send(float[] buf, int dst, int tag) {
    return sendImpl(buf, DType.FLOAT32, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> send(double[] buf, int dst, int tag) {
    return sendImpl(buf, DType.FLOAT64, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> send(ByteBuffer buf, int dst, int tag) {
    return sendImpl(buf, DType.UINT8, dst, tag);
  }

  /**
   * {@link #send(byte[], int, int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> send(ByteBuffer buf, DType dtype, int dst, int tag) {
    return sendImpl(buf, dtype, dst, tag);
  }

  /**
   * Receives into {@code buf} (its capacity; a shorter message fills its front) from {@code src}
   * with {@code tag}, sent by a send of this stream on {@code src}; a larger message fails the
   * operation with {@link Status#MISMATCH}. {@code byte[]} is INT8.
   */
  public CompletableFuture<Void> recv(byte[] buf, int src, int tag) {
    return recvImpl(buf, DType.INT8, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code int[]} (INT32). */
  public CompletableFuture<Void> recv(int[] buf, int src, int tag) {
    return recvImpl(buf, DType.INT32, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code long[]} (INT64). */
  public CompletableFuture<Void> recv(long[] buf, int src, int tag) {
    return recvImpl(buf, DType.INT64, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code float[]} (FLOAT32). */
  public CompletableFuture<Void> recv(float[] buf, int src, int tag) {
    return recvImpl(buf, DType.FLOAT32, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code double[]} (FLOAT64). */
  public CompletableFuture<Void> recv(double[] buf, int src, int tag) {
    return recvImpl(buf, DType.FLOAT64, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public CompletableFuture<Void> recv(ByteBuffer buf, int src, int tag) {
    return recvImpl(buf, DType.UINT8, src, tag);
  }

  /**
   * {@link #recv(byte[], int, int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public CompletableFuture<Void> recv(ByteBuffer buf, DType dtype, int src, int tag) {
    return recvImpl(buf, dtype, src, tag);
  }


  // --- implementation ------------------------------------------------------------------------

  /**
   * The memory the library gets for {@code buf} (checked already): a direct buffer's view, or the
   * staged copy of an array or a heap buffer (held for the operation in {@code held}).
   */
  private static Object memory(Object buf, DType dtype, boolean output, List<Staged> held) {
    if (buf instanceof ByteBuffer && ((ByteBuffer) buf).isDirect()) {
      return Buffers.view(buf);
    }
    synchronized (STAGED) {
      Staged s = STAGED.get(buf);
      if (s == null) {
        s = new Staged(buf, Buffers.stable(buf, dtype, Buffers.elements(buf, dtype), true));
        STAGED.put(buf, s);
      } else if (buf instanceof ByteBuffer) {
        ByteBuffer now = (ByteBuffer) buf;
        ByteBuffer then = (ByteBuffer) s.target;
        if (now.position() != then.position() || now.limit() != then.limit()) {
          throw Buffers.invalid("Stream: a heap ByteBuffer queued by an operation that has not "
              + "run yet with position " + then.position() + " and limit " + then.limit()
              + " is used again with position " + now.position() + " and limit " + now.limit()
              + "; use one window per buffer until the stream is synchronized");
        }
      }
      s.users++;
      s.written |= output;
      held.add(s);
      return s.memory;
    }
  }

  /** Lets go of staged arrays; the last user writes the copy back into a written array. */
  private static void release(List<Staged> held) {
    synchronized (STAGED) {
      for (Staged s : held) {
        if (--s.users == 0) {
          STAGED.remove(s.array);
          if (s.written) {
            // UINT8: an array's length in elements, a heap buffer's window in bytes
            Buffers.copyBack(s.memory, s.target, Buffers.elements(s.target, DType.UINT8),
                DType.UINT8);
          }
        }
      }
      held.clear();
    }
  }

  private static boolean isCollective(int kind) {
    return kind != HcommNative.HCOMM_OP_SEND && kind != HcommNative.HCOMM_OP_RECV;
  }

  /**
   * Queues one operation of {@code kind} on {@code send} (read; may be {@code recv}, for in
   * place) and {@code recv} (written), user buffers already checked, or null.
   */
  private CompletableFuture<Void> submit(int kind, Object send, Object recv, long count,
      DType dtype, int op, int peerOrRoot, int tag) {
    List<Staged> staged = new ArrayList<>(2);
    OpFuture f;
    long h = handle.enter();
    try {
      Object r;
      Object s;
      long event;
      try {
        r = recv == null ? null : memory(recv, dtype, true, staged);
        s = send == null ? null : send == recv ? r : memory(send, dtype, false, staged);
        event = queue.takeEvent();
      } catch (RuntimeException e) {
        release(staged);
        if (isCollective(kind)) {
          refuse(h, kind);
        }
        throw e;
      }
      try {
        f = queue.push(h, kind, s, r, count, dtype.code(), op, peerOrRoot, tag, staged, event);
      } catch (RuntimeException e) {
        release(staged); // refused by the library, which took the collective's turn itself
        queue.giveEvent(event);
        throw e;
      }
      queue.collect(); // completes what has run meanwhile
    } finally {
      handle.exit();
    }
    queue.wake();
    queue.drain(false);
    return f;
  }

  /**
   * A collective this binding refused by its own checks ({@code e}) never reached the library,
   * while the other ranks' operation did: so that it still takes its turn on the stream (their
   * operation then fails at once with MISMATCH naming this rank, and later ones stay paired),
   * the library is handed the same kind of operation with a dtype it refuses in turn
   * (hcomm.h). Returns {@code e}, to be thrown.
   */
  private HcommException refused(HcommException e, int kind) {
    long h;
    try {
      h = handle.enter();
    } catch (HcommException closed) {
      return e;
    }
    try {
      refuse(h, kind);
    } finally {
      handle.exit();
    }
    return e;
  }

  private static void refuse(long h, int kind) {
    try {
      HcommNative.hcomm_java_stream_enqueue(h, kind, null, null, 0, BAD_DTYPE, 0, 0, 0);
    } catch (HcommException expected) {
      // the library's refusal
    }
  }

  private static int opCode(String what, ReduceOp op) {
    if (op == null) {
      throw Buffers.invalid(what + ": op is null");
    }
    return op.code();
  }

  /** Throws unless {@code have} >= {@code need} elements. */
  private static void checkRoom(String what, long have, long need, String why) {
    if (have < need) {
      throw Buffers.invalid(what + " holds " + have + " elements but needs " + need + " (" + why
          + ")");
    }
  }

  /** Elements per block of a buffer split into one block per rank. */
  private int blocks(String what, int n) {
    if (n % size != 0) {
      throw Buffers.invalid(what + " holds " + n + " elements, not a multiple of the " + size
          + " ranks");
    }
    return n / size;
  }

  private CompletableFuture<Void> sendImpl(Object buf, DType dtype, int dst, int tag) {
    int n = Buffers.count(buf, dtype, false, "Stream.send: buf");
    return submit(HcommNative.HCOMM_OP_SEND, buf, null, n, dtype, 0, dst, tag);
  }

  private CompletableFuture<Void> recvImpl(Object buf, DType dtype, int src, int tag) {
    int n = Buffers.count(buf, dtype, true, "Stream.recv: buf");
    return submit(HcommNative.HCOMM_OP_RECV, null, buf, n, dtype, 0, src, tag);
  }

  private CompletableFuture<Void> allReduceImpl(Object buf, DType dtype, ReduceOp op) {
    final int kind = HcommNative.HCOMM_OP_ALLREDUCE;
    int n;
    int o;
    try {
      n = Buffers.count(buf, dtype, true, "Stream.allReduce: buf");
      o = opCode("Stream.allReduce", op);
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, buf, buf, n, dtype, o, 0, 0);
  }

  private CompletableFuture<Void> broadcastImpl(Object buf, DType dtype, int root) {
    final int kind = HcommNative.HCOMM_OP_BROADCAST;
    int n;
    try {
      n = Buffers.count(buf, dtype, true, "Stream.broadcast: buf");
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, null, buf, n, dtype, 0, root, 0);
  }

  private CompletableFuture<Void> reduceImpl(Object buf, DType dtype, ReduceOp op, int root) {
    final int kind = HcommNative.HCOMM_OP_REDUCE;
    int n;
    int o;
    try {
      n = Buffers.count(buf, dtype, true, "Stream.reduce: buf");
      o = opCode("Stream.reduce", op);
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, buf, buf, n, dtype, o, root, 0);
  }

  private CompletableFuture<Void> allGatherImpl(Object send, Object recv, DType dtype) {
    final int kind = HcommNative.HCOMM_OP_ALLGATHER;
    int ns;
    try {
      ns = Buffers.count(send, dtype, false, "Stream.allGather: send");
      int nr = Buffers.count(recv, dtype, true, "Stream.allGather: recv");
      checkRoom("Stream.allGather: recv", nr, (long) size * ns, size + " ranks x " + ns);
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, send, recv, ns, dtype, 0, 0, 0);
  }

  private CompletableFuture<Void> reduceScatterImpl(Object send, Object recv, DType dtype,
      ReduceOp op) {
    final int kind = HcommNative.HCOMM_OP_REDUCE_SCATTER;
    int o;
    int block;
    try {
      int ns = Buffers.count(send, dtype, false, "Stream.reduceScatter: send");
      int nr = Buffers.count(recv, dtype, true, "Stream.reduceScatter: recv");
      o = opCode("Stream.reduceScatter", op);
      block = blocks("Stream.reduceScatter: send", ns);
      checkRoom("Stream.reduceScatter: recv", nr, block, "one block of send");
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, send, recv, block, dtype, o, 0, 0);
  }

  private CompletableFuture<Void> allToAllImpl(Object send, Object recv, DType dtype) {
    final int kind = HcommNative.HCOMM_OP_ALLTOALL;
    int block;
    try {
      int ns = Buffers.count(send, dtype, false, "Stream.allToAll: send");
      int nr = Buffers.count(recv, dtype, true, "Stream.allToAll: recv");
      block = blocks("Stream.allToAll: send", ns);
      checkRoom("Stream.allToAll: recv", nr, ns, "as many as send");
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, send, recv, block, dtype, 0, 0, 0);
  }

  private CompletableFuture<Void> gatherImpl(Object send, Object recv, DType dtype, int root) {
    final int kind = HcommNative.HCOMM_OP_GATHER;
    int ns;
    Object r = null; // only the root's recv is used
    try {
      ns = Buffers.count(send, dtype, false, "Stream.gather: send");
      if (rank == root) {
        int nr = Buffers.count(recv, dtype, true, "Stream.gather: recv");
        checkRoom("Stream.gather: recv", nr, (long) size * ns, size + " ranks x " + ns);
        r = recv;
      }
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, send, r, ns, dtype, 0, root, 0);
  }

  private CompletableFuture<Void> scatterImpl(Object send, Object recv, DType dtype, int root) {
    final int kind = HcommNative.HCOMM_OP_SCATTER;
    int nr;
    Object s = null; // only the root's send is used
    try {
      nr = Buffers.count(recv, dtype, true, "Stream.scatter: recv");
      if (rank == root) {
        int ns = Buffers.count(send, dtype, false, "Stream.scatter: send");
        checkRoom("Stream.scatter: send", ns, (long) size * nr, size + " ranks x " + nr);
        s = send;
      }
    } catch (HcommException e) {
      throw refused(e, kind);
    }
    return submit(kind, s, recv, nr, dtype, 0, root, 0);
  }
}
