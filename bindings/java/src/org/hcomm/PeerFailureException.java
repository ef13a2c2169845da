package org.hcomm;

/**
 * {@link Status#PEER_FAILURE}: a peer died or its connection broke; {@link
 * Communicator#shrink()} makes a communicator of the survivors.
 *
 * <p>{@link #status()} is {@code Status.PEER_FAILURE.code()}; see {@link HcommException}.
 */
public class PeerFailureException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status PEER_FAILURE and {@code message}. */
  public PeerFailureException(String message) {
    super(Status.PEER_FAILURE.code(), message);
  }
}
