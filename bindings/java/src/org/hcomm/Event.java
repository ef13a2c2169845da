package org.hcomm;

import org.hcomm.internal.HcommNative;

/**
 * A mark in a stream's queue ({@code hcomm_event_t}): recorded on a {@link Stream}, it is reached
 * when everything queued on that stream before the record has run. Other streams can wait for it
 * ({@link Stream#waitEvent}) without blocking the caller; {@link #synchronize()} blocks.
 *
 * <pre>{@code
 * try (Event produced = new Event()) {
 *   a.allReduce(x, ReduceOp.SUM);
 *   produced.record(a);
 *   b.waitEvent(produced);                 // b's later work runs after a's allReduce
 *   b.reduceScatter(x, y, ReduceOp.SUM);
 *   produced.record(b);
 *   produced.synchronize();                // y holds the result, its future is complete
 * }
 * }</pre>
 *
 * <p>An event never recorded counts as reached. Reaching an event completes the futures of the
 * operations queued before it on the stream it was recorded on, and writes back their arrays, as
 * soon as {@link #synchronize()} or {@link #query()} sees it reached; so does a stream that
 * waited for it, once that stream is seen past the wait.
 *
 * <p>THREAD SAFETY: every method may be called from any thread; {@link #close()} waits for calls
 * in progress on other threads. Streams waiting on a closed event keep their marks.
 */
public final class Event implements AutoCloseable {
  private final NativeHandle handle;
  private Stream recorded; // the stream of the latest record, or null; guarded by this

  /** A new event (hcomm_event_create), not recorded. */
  public Event() {
    this.handle = new NativeHandle(this, HcommNative.hcomm_event_create(), "event",
        HcommNative::hcomm_event_destroy);
  }

  /**
   * Moves the mark to the end of what is queued on {@code stream} now (hcomm_event_record).
   * Returns at once.
   */
  public void record(Stream stream) {
    if (stream == null) {
      throw Buffers.invalid("Event.record: stream is null");
    }
    stream.record(this);
  }

  /**
   * Waits until the latest mark is reached (up to the communicator's timeout_ms without progress
   * on that stream: {@link Status#TIMEOUT}), and completes the futures of the operations before
   * it. Throws the stream's error if an operation before the mark failed (the stream keeps it for
   * its own {@link Stream#synchronize()}).
   */
  public void synchronize() {
    long e = handle.enter();
    try {
      HcommNative.hcomm_event_synchronize(e);
    } finally {
      handle.exit();
      Stream s = recordedOn();
      if (s != null) {
        s.progress(true);
      }
    }
  }

  /**
   * True when the latest mark is reached (then the futures before it complete). Never blocks.
   */
  public boolean query() {
    long e = handle.enter();
    boolean done;
    try {
      done = HcommNative.hcomm_event_query(e);
    } finally {
      handle.exit();
    }
    Stream s = recordedOn();
    if (done && s != null) {
      s.progress(false);
    }
    return done;
  }

  /** True after {@link #close()}. */
  public boolean isClosed() {
    return handle.isClosed();
  }

  /** Destroys the event (hcomm_event_destroy). Idempotent. */
  @Override
  public void close() {
    handle.close();
  }

  NativeHandle handle() {
    return handle;
  }

  synchronized Stream recordedOn() {
    return recorded;
  }

  /** Set by Stream.record, holding this monitor across the native record. */
  synchronized void recordedOn(Stream s) {
    recorded = s;
  }

  @Override
  public String toString() {
    return isClosed() ? "Event(closed)" : "Event";
  }
}
