package org.hcomm;

/**
 * {@link Status#OUT_OF_MEM}: memory (native, or direct memory for a buffer's copy) could not
 * be allocated.
 *
 * <p>{@link #status()} is {@code Status.OUT_OF_MEM.code()}; see {@link HcommException}.
 */
public class OutOfMemException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status OUT_OF_MEM and {@code message}. */
  public OutOfMemException(String message) {
    super(Status.OUT_OF_MEM.code(), message);
  }
}
