package org.hcomm;

/**
 * {@link Status#NO_DEVICE}: the requested transport or device is absent.
 *
 * <p>{@link #status()} is {@code Status.NO_DEVICE.code()}; see {@link HcommException}.
 */
public class NoDeviceException extends HcommException {
  private static final long serialVersionUID = 1L;

  /** An error with status NO_DEVICE and {@code message}. */
  public NoDeviceException(String message) {
    super(Status.NO_DEVICE.code(), message);
  }
}
