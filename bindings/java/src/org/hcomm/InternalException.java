package org.hcomm;

/**
 * {@link Status#INTERNAL}: a bug in hcomm; the message says where.
 *
 * <p>{@link #status()} is {@code Status.INTERNAL.code()}; see {@link HcommException}.
 */
public class InternalException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status INTERNAL and {@code message}. */
  public InternalException(String message) {
    super(Status.INTERNAL.code(), message);
  }
}
