package org.hcomm;

/**
 * {@link Status#TIMEOUT}: the communicator's {@code timeout_ms} passed; the message says what
 * was pending. A request that timed out is still pending and may be awaited again. Not to be
 * confused with {@link java.util.concurrent.TimeoutException}, which
 * {@code Future.get(timeout, unit)} throws. A call ended by {@link Thread#interrupt()} throws
 * {@link HcommInterruptedException} instead.
 *
 * <p>{@link #status()} is {@code Status.TIMEOUT.code()}; see {@link HcommException}.
 */
public class TimeoutException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status TIMEOUT and {@code message}. */
  public TimeoutException(String message) {
    super(Status.TIMEOUT.code(), message);
  }
}
