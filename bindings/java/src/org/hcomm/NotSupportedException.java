package org.hcomm;

/**
 * {@link Status#NOT_SUPPORTED}: the operation is not supported here (e.g. by this transport).
 *
 * <p>{@link #status()} is {@code Status.NOT_SUPPORTED.code()}; see {@link HcommException}.
 */
public class NotSupportedException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status NOT_SUPPORTED and {@code message}. */
  public NotSupportedException(String message) {
    super(Status.NOT_SUPPORTED.code(), message);
  }
}
