package org.hcomm;

/**
 * Reduction operations ({@code hcomm_reduce_op_t}). {@link #AVG} divides by
 * the communicator's size (integer types truncate).
 */
public enum ReduceOp {
  SUM(0),
  PROD(1),
  MIN(2),
  MAX(3),
  AVG(4);

  private final int code;

  ReduceOp(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }
}
