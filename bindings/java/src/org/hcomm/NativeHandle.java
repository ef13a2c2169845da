package org.hcomm;

import java.lang.ref.Cleaner;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.LongConsumer;

/**
 * One native handle (communicator, request or channel) owned by a Java
 * object: explicit close, the handle zeroed after it is destroyed, and a
 * {@link Cleaner} that destroys it if the owner is dropped unclosed (a safety
 * net only: it runs at an unknown time, on another thread).
 *
 * <p>Calls take the read lock around their native call ({@link #enter()} /
 * {@link #exit()}), so any number may run at once; destroying takes the
 * write lock, so a handle is never destroyed under a running call, whether
 * by close() on another thread or by the Cleaner. This object never refers
 * to its owner, or the owner could never become unreachable.
 */
final class NativeHandle implements Runnable {
  static final Cleaner CLEANER = Cleaner.create();

  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  private final String what;
  private final LongConsumer destroy;
  private final Cleaner.Cleanable cleanable;
  private long handle; // 0 once destroyed; written under the write lock

  /**
   * Takes ownership of {@code handle} for {@code owner}; {@code destroy}
   * releases it (and must not refer to the owner). {@code what} names the
   * kind of handle in messages ("communicator").
   */
  NativeHandle(Object owner, long handle, String what, LongConsumer destroy) {
    this.handle = handle;
    this.what = what;
    this.destroy = destroy;
    this.cleanable = CLEANER.register(owner, this);
  }

  /**
   * The live handle, with the read lock held: pair with {@link #exit()} in a
   * finally block. Throws INVALID_ARGUMENT once closed.
   */
  long enter() {
    lock.readLock().lock();
    if (handle == 0) {
      lock.readLock().unlock();
      throw closedException();
    }
    return handle;
  }

  void exit() {
    lock.readLock().unlock();
  }

  /**
   * Like enter(), but returns 0 (holding nothing) instead of waiting while
   * the handle is being destroyed, or when it is closed. For calls that
   * must not wait behind close(), such as abort.
   */
  long tryEnter() {
    if (!lock.readLock().tryLock()) {
      return 0;
    }
    if (handle == 0) {
      lock.readLock().unlock();
      return 0;
    }
    return handle;
  }

  boolean isClosed() {
    lock.readLock().lock();
    try {
      return handle == 0;
    } finally {
      lock.readLock().unlock();
    }
  }

  InvalidArgumentException closedException() {
    return new InvalidArgumentException("hcomm: this " + what + " is closed");
  }

  /**
   * Destroys the handle once (later calls do nothing), waiting for calls in
   * progress; a failure of the destroy call is thrown, but the handle is
   * released either way.
   */
  void close() {
    try {
      long h;
      lock.writeLock().lock();
      try {
        h = handle;
        handle = 0;
        if (h != 0) {
          destroy.accept(h);
        }
      } finally {
        lock.writeLock().unlock();
      }
    } finally {
      cleanable.clean(); // unregisters; run() finds nothing left to do
    }
  }

  /** The Cleaner's action (and clean()'s): close() without throwing. */
  @Override
  public void run() {
    lock.writeLock().lock();
    try {
      long h = handle;
      handle = 0;
      if (h != 0) {
        destroy.accept(h);
      }
    } catch (RuntimeException e) {
      // Nobody to tell: the owner is gone.
    } finally {
      lock.writeLock().unlock();
    }
  }
}
