package org.hcomm;

/**
 * {@link Status#INVALID_ARGUMENT}: bad input (a null or closed handle, a rank out of range, a
 * buffer too small or of an unsupported kind); the message names the argument. The
 * communicator stays usable.
 *
 * <p>{@link #status()} is {@code Status.INVALID_ARGUMENT.code()}; see {@link HcommException}.
 */
public class InvalidArgumentException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status INVALID_ARGUMENT and {@code message}. */
  public InvalidArgumentException(String message) {
    super(Status.INVALID_ARGUMENT.code(), message);
  }
}
