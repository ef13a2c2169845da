package org.hcomm;

/**
 * A blocking call ended early because its thread was interrupted ({@link Thread#interrupt()}).
 *
 * <p>The library looks at the thread's interrupt status after a call has waited 100 ms, and
 * every 100 ms after that; once it is set, the call ends as it would at its deadline (a receive
 * is withdrawn, a collective fails on this rank, a request stays pending and may be awaited
 * again). A call that does not have to wait is not interrupted. {@link #status()} is the status
 * that ending gave, {@link Status#TIMEOUT} for most calls.
 *
 * <p>As with {@link java.nio.channels.ClosedByInterruptException}, the thread's interrupt status
 * stays set: the code that catches this exception decides what the interrupt means (clear it
 * with {@link Thread#interrupted()} to carry on). {@code Future.get()} of the futures this
 * binding makes throws {@link InterruptedException} instead, and clears it, as that method's
 * contract says.
 */
public class HcommInterruptedException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An interrupted call that ended with C status {@code status}. */
  public HcommInterruptedException(int status, String message) {
    super(status, message);
  }

  /** An interrupted wait of the Java layer (status TIMEOUT). */
  HcommInterruptedException(String message) {
    super(Status.TIMEOUT.code(), message);
  }
}
