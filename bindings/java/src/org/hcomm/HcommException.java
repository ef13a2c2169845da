package org.hcomm;

/**
 * A failed hcomm call. {@link #status()} is the C status code
 * ({@code hcomm_status_t}; see {@link Status}); {@link #getMessage()} is the
 * message of {@code hcomm_last_error()}, which names the rank, peer, tag and
 * sizes involved. Arguments the Java layer rejects itself (a heap ByteBuffer,
 * a buffer too small, a closed handle) are {@link Status#INVALID_ARGUMENT}
 * too.
 *
 * <p>After an exception the communicator stays usable, except after
 * {@link Status#ABORTED} and, usually, {@link Status#PEER_FAILURE}.
 */
public class HcommException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int status;

  /** Made by the native layer with hcomm_last_error(), and by the Java layer. */
  public HcommException(int status, String message) {
    super(message);
    this.status = status;
  }

  HcommException(Status status, String message) {
    this(status.code(), message);
  }

  /** The C status code, e.g. 4 ({@code HCOMM_ERR_TIMEOUT}). */
  public int status() {
    return status;
  }

  /** The status as a constant. */
  public Status kind() {
    return Status.of(status);
  }

  /** "org.hcomm.HcommException: TIMEOUT (4): message". */
  @Override
  public String toString() {
    return getClass().getName() + ": " + kind() + " (" + status + "): " + getMessage();
  }
}
