package org.hcomm;

/**
 * The status codes of the C API ({@code hcomm_status_t}), with the same
 * numeric values. {@link HcommException#status()} returns {@link #code()};
 * {@link HcommException#kind()} returns the constant.
 */
public enum Status {
  SUCCESS(0),
  /** Bad input: a null or closed handle, a rank out of range, a buffer too small. */
  INVALID_ARGUMENT(1),
  /** The requested transport or device is absent. */
  NO_DEVICE(2),
  OUT_OF_MEM(3),
  /** The deadline ({@code timeout_ms}) passed; the message says what was pending. */
  TIMEOUT(4),
  /** A peer died or its connection broke. */
  PEER_FAILURE(5),
  /** A message larger than the receive buffer, or ranks disagree on a collective. */
  MISMATCH(6),
  /** {@link Communicator#abort()} was called. */
  ABORTED(7),
  /** The rendezvous store is unreachable, or init could not complete. */
  UNAVAILABLE(8),
  /** A peer or the store rejected our job token. */
  PERMISSION_DENIED(9),
  NOT_SUPPORTED(10),
  INTERNAL(11),
  /** A code this version of the binding does not know (from a newer library). */
  UNKNOWN(-1);

  private final int code;

  Status(int code) {
    this.code = code;
  }

  /** The C value, e.g. 4 for {@link #TIMEOUT}. */
  public int code() {
    return code;
  }

  /** The constant for C value {@code code}; {@link #UNKNOWN} if there is none. */
  public static Status of(int code) {
    for (Status s : values()) {
      if (s.code == code && s != UNKNOWN) {
        return s;
      }
    }
    return UNKNOWN;
  }
}
