package org.hcomm;

/**
 * {@link Status#PERMISSION_DENIED}: a peer or the store rejected our job token.
 *
 * <p>{@link #status()} is {@code Status.PERMISSION_DENIED.code()}; see {@link HcommException}.
 */
public class PermissionDeniedException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status PERMISSION_DENIED and {@code message}. */
  public PermissionDeniedException(String message) {
    super(Status.PERMISSION_DENIED.code(), message);
  }
}
