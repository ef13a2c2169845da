package org.hcomm;

/**
 * {@link Status#MISMATCH}: a message larger than the receive buffer, or ranks disagree on a
 * collective.
 *
 * <p>{@link #status()} is {@code Status.MISMATCH.code()}; see {@link HcommException}.
 */
public class MismatchException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status MISMATCH and {@code message}. */
  public MismatchException(String message) {
    super(Status.MISMATCH.code(), message);
  }
}
