package org.hcomm;

/**
 * What {@link Communicator#setCompression(Compression...)} turns on (the
 * config key {@code compression}). {@link #FP16} or {@link #BF16}: FLOAT32
 * data travels as 16-bit floats (reductions still accumulate in float32;
 * other dtypes are never compressed); at most one of the two.
 * {@link #DELTA}: point-to-point and broadcast send only what changed since
 * the previous message of the same size, losslessly. None of them: no
 * compression.
 */
public enum Compression {
  FP16("fp16"),
  BF16("bf16"),
  DELTA("delta");

  private final String value;

  Compression(String value) {
    this.value = value;
  }

  /** Its item in the value of the config key {@code compression}, e.g. "fp16". */
  public String value() {
    return value;
  }
}
