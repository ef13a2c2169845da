package org.hcomm;

/**
 * {@link Status#UNAVAILABLE}: the rendezvous store is unreachable, or init could not complete.
 *
 * <p>{@link #status()} is {@code Status.UNAVAILABLE.code()}; see {@link HcommException}.
 */
public class UnavailableException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status UNAVAILABLE and {@code message}. */
  public UnavailableException(String message) {
    super(Status.UNAVAILABLE.code(), message);
  }
}
