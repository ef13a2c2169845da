package org.hcomm;

/**
 * {@link Status#ABORTED}: {@link Communicator#abort()} was called, or the communicator was
 * closed with the operation pending.
 *
 * <p>{@link #status()} is {@code Status.ABORTED.code()}; see {@link HcommException}.
 */
public class AbortedException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status ABORTED and {@code message}. */
  public AbortedException(String message) {
    super(Status.ABORTED.code(), message);
  }
}
