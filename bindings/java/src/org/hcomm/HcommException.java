package org.hcomm;

/**
 * A failed hcomm call. {@link #status()} is the C status code
 * ({@code hcomm_status_t}; see {@link Status}); {@link #getMessage()} is the
 * message of {@code hcomm_last_error()}, which names the rank, peer, tag and
 * sizes involved. Arguments the Java layer rejects itself (a buffer too
 * small, a closed handle) are {@link Status#INVALID_ARGUMENT} too.
 *
 * <p>Every error is thrown as the subclass of its status, so that callers
 * can catch what they handle: {@link InvalidArgumentException}, {@link
 * NoDeviceException}, {@link OutOfMemException}, {@link TimeoutException},
 * {@link PeerFailureException}, {@link MismatchException}, {@link
 * AbortedException}, {@link UnavailableException}, {@link
 * PermissionDeniedException}, {@link NotSupportedException}, {@link
 * InternalException}; a blocking call ended by {@link Thread#interrupt()}
 * throws {@link HcommInterruptedException}. A code this binding does not
 * know (from a newer library) is a plain HcommException. All are unchecked.
 *
 * <p>After an exception the communicator stays usable, except after
 * {@link Status#ABORTED} and, usually, {@link Status#PEER_FAILURE}.
 */
public class HcommException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int status;

  /**
   * An error with C status {@code status}. Prefer {@link #of(int, String)}, which makes the
   * subclass of the status.
   */
  public HcommException(int status, String message) {
    super(message);
    this.status = status;
  }

  /**
   * The exception for C status {@code status} (not {@code HCOMM_SUCCESS}): the subclass of
   * that status, or a plain HcommException for a code this binding does not know.
   */
  public static HcommException of(int status, String message) {
    switch (Status.of(status)) {
      case INVALID_ARGUMENT:
        return new InvalidArgumentException(message);
      case NO_DEVICE:
        return new NoDeviceException(message);
      case OUT_OF_MEM:
        return new OutOfMemException(message);
      case TIMEOUT:
        return new TimeoutException(message);
      case PEER_FAILURE:
        return new PeerFailureException(message);
      case MISMATCH:
        return new MismatchException(message);
      case ABORTED:
        return new AbortedException(message);
      case UNAVAILABLE:
        return new UnavailableException(message);
      case PERMISSION_DENIED:
        return new PermissionDeniedException(message);
      case NOT_SUPPORTED:
        return new NotSupportedException(message);
      case INTERNAL:
        return new InternalException(message);
      default:
        return new HcommException(status, message);
    }
  }

  /**
   * Made by the native layer (hcomm_java.i) for a failed call: {@code interrupted} when the
   * call ended because the calling thread was interrupted (the library's interrupt check,
   * registered by the native layer, said so while the call waited).
   */
  static HcommException fromNative(int status, boolean interrupted, String message) {
    if (interrupted) {
      return new HcommInterruptedException(status, message.replace(
          "interrupted (a signal handler raised)", "interrupted (Thread.interrupt())"));
    }
    return of(status, message);
  }

  /** The C status code, e.g. 4 ({@code HCOMM_ERR_TIMEOUT}). */
  public int status() {
    return status;
  }

  /** The status as a constant. */
  public Status kind() {
    return Status.of(status);
  }

  /** "org.hcomm.TimeoutException: TIMEOUT (4): message". */
  @Override
  public String toString() {
    return getClass().getName() + ": " + kind() + " (" + status + "): " + getMessage();
  }
}
