package org.hcomm;

/**
 * Element types of the C API ({@code hcomm_dtype_t}), with their C values
 * and sizes. Java arrays imply theirs: {@code byte[]} is {@link #INT8},
 * {@code int[]} {@link #INT32}, {@code long[]} {@link #INT64},
 * {@code float[]} {@link #FLOAT32}, {@code double[]} {@link #FLOAT64}. A
 * direct {@link java.nio.ByteBuffer} is {@link #UINT8} unless a call is given
 * another; its bytes are then read in the machine's byte order (give the
 * buffer {@code order(ByteOrder.nativeOrder())} before putting numbers in it).
 */
public enum DType {
  INT8(0, 1),
  UINT8(1, 1),
  INT32(2, 4),
  UINT32(3, 4),
  INT64(4, 8),
  UINT64(5, 8),
  FLOAT16(6, 2),
  BFLOAT16(7, 2),
  FLOAT32(8, 4),
  FLOAT64(9, 8);

  private final int code;
  private final int size;

  DType(int code, int size) {
    this.code = code;
    this.size = size;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** Bytes per element. */
  public int size() {
    return size;
  }
}
