package org.hcomm;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

/**
 * Completes the futures of nonblocking work in the background ({@link Request#future()}, and the
 * futures of {@link Stream} operations), so that dependent actions run without anyone waiting.
 *
 * <p>One daemon thread for the process ("hcomm-completer"), started at first use. It never
 * blocks in the library: each round it looks at every watched item once with a call that
 * returns at once (hcomm_test, hcomm_event_query), then sleeps, 20 us after something new was
 * watched and twice as long after each round up to 2 ms, or 10 ms once nothing was added or
 * finished for a second (work that is slow anyway, e.g. a receive nobody sends to yet); with
 * nothing to watch it sleeps until something is. Its cost is one short look per item per round
 * while work is pending, and none otherwise. A native wait per future would need a thread per
 * future, and would hold its request or stream for up to timeout_ms, so that close() could not
 * free it in the meantime.
 * Waiting on a future itself ({@code get}, {@code join}) does not go through this thread: it
 * waits in the library on the caller's thread, with no added delay.
 *
 * <p>Futures complete, and their dependent actions run, on this thread unless something else
 * saw the work end first: keep those actions short, or use the {@code *Async} variants.
 */
final class Completer {
  /** Something to look at: a nonblocking look, true once there is nothing left to watch. */
  interface Watched {
    boolean poll();
  }

  private static final long FIRST_PAUSE_NS = 20_000;
  private static final long MAX_PAUSE_NS = 2_000_000;
  private static final long SLOW_PAUSE_NS = 10_000_000;
  private static final long SLOW_AFTER_NS = 1_000_000_000;
  private static final Completer INSTANCE = new Completer();

  private final List<Watched> watched = new ArrayList<>(); // guarded by this
  private boolean added; // something was watched since the last round; guarded by this
  private Thread thread; // guarded by this

  private Completer() {}

  /** Watches {@code w} until its poll() returns true (once per call: it may be added again). */
  static void watch(Watched w) {
    INSTANCE.add(w);
  }

  private synchronized void add(Watched w) {
    watched.add(w);
    added = true;
    if (thread == null) {
      thread = new Thread(this::run, "hcomm-completer");
      thread.setDaemon(true);
      thread.start();
    } else {
      notifyAll();
      LockSupport.unpark(thread);
    }
  }

  private void run() {
    List<Watched> round = new ArrayList<>();
    long pause = FIRST_PAUSE_NS;
    long changed = System.nanoTime(); // when something was last added or finished
    while (true) {
      synchronized (this) {
        while (watched.isEmpty()) {
          try {
            wait();
          } catch (InterruptedException e) {
            // Nobody stops this thread; it ends with the JVM.
          }
        }
        if (added) {
          added = false;
          pause = FIRST_PAUSE_NS;
          changed = System.nanoTime();
        }
        round.addAll(watched);
      }
      for (Watched w : round) {
        boolean finished;
        try {
          finished = w.poll();
        } catch (RuntimeException e) {
          finished = true; // a closed handle: whoever closed it completes its futures
        }
        if (finished) {
          changed = System.nanoTime();
          synchronized (this) {
            watched.remove(w); // one entry: w may have been added again meanwhile
          }
        }
      }
      round.clear();
      boolean sleep;
      synchronized (this) {
        sleep = !added && !watched.isEmpty();
      }
      if (sleep) {
        LockSupport.parkNanos(this, pause);
        Thread.interrupted(); // parkNanos returns at once while the flag is set
        long cap = System.nanoTime() - changed < SLOW_AFTER_NS ? MAX_PAUSE_NS : SLOW_PAUSE_NS;
        pause = Math.min(2 * pause, cap);
      }
    }
  }
}
