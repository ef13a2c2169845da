package org.hcomm;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * How the Java layer hands buffers to the native one (see also
 * bindings/java/hcomm_java.i).
 *
 * <ul>
 *   <li>A direct {@link ByteBuffer} is used in place (zero copy): the bytes
 *       from its position to its limit, which the call leaves unchanged. A
 *       heap ByteBuffer is refused (it has no fixed address); so is a
 *       read-only one where the call writes.
 *   <li>A primitive array is the whole array. Blocking calls copy it into
 *       native memory for the duration of the call and, for what the call
 *       writes, back when it succeeds (no pinning: the calls block on the
 *       network). Nonblocking calls stage it in a direct buffer that their
 *       {@link Request} keeps; a receive copies back on completion.
 * </ul>
 */
final class Buffers {
  private Buffers() {}

  static HcommException invalid(String message) {
    return new HcommException(Status.INVALID_ARGUMENT, message);
  }

  /**
   * Checks {@code s}, for a {@code const char*} parameter: INVALID_ARGUMENT if
   * it holds a NUL character, which a C string cannot (JNI would pass it as the
   * bytes C0 80, a name that no other binding can spell). {@code what} names
   * the argument, quoting it where that is no secret (config values may be
   * job tokens). null passes: C rejects a NULL string itself.
   */
  static void checkCString(String s, String what) {
    if (s != null && s.indexOf('\0') >= 0) {
      throw invalid(what + " contains a NUL character, which a C string cannot hold");
    }
  }

  /** {@code s} in double quotes, a NUL shown as \0 (for messages). */
  static String quote(String s) {
    return s == null ? "null" : "\"" + s.replace("\0", "\\0") + "\"";
  }

  /** The dtype an array implies; {@link DType#UINT8} for a ByteBuffer. */
  static DType dtypeOf(Object buf, String what) {
    if (buf instanceof byte[]) return DType.INT8;
    if (buf instanceof int[]) return DType.INT32;
    if (buf instanceof long[]) return DType.INT64;
    if (buf instanceof float[]) return DType.FLOAT32;
    if (buf instanceof double[]) return DType.FLOAT64;
    if (buf instanceof ByteBuffer) return DType.UINT8;
    if (buf == null) throw invalid(what + " is null");
    throw invalid(what + ": unsupported buffer type " + buf.getClass().getName());
  }

  /**
   * Checks {@code buf} (of {@code dtype}) and returns its element count. A
   * ByteBuffer must be direct, writable if {@code output}, and hold a whole
   * number of elements.
   */
  static int count(Object buf, DType dtype, boolean output, String what) {
    if (buf == null) {
      throw invalid(what + " is null");
    }
    if (dtype == null) {
      throw invalid(what + ": dtype is null");
    }
    if (buf instanceof ByteBuffer) {
      ByteBuffer b = (ByteBuffer) buf;
      if (!b.isDirect()) {
        throw invalid(what + ": a heap ByteBuffer has no fixed native address; use "
            + "ByteBuffer.allocateDirect (zero copy) or a primitive array");
      }
      if (output && b.isReadOnly()) {
        throw invalid(what + ": the ByteBuffer is read-only but the call writes into it");
      }
      int bytes = b.remaining();
      if (bytes % dtype.size() != 0) {
        throw invalid(what + ": " + bytes + " bytes remaining is not a whole number of "
            + dtype + " elements (" + dtype.size() + " bytes each)");
      }
      return bytes / dtype.size();
    }
    DType implied = dtypeOf(buf, what);
    if (implied != dtype) {
      throw invalid(what + ": a " + buf.getClass().getSimpleName() + " holds " + implied
          + ", not " + dtype);
    }
    return java.lang.reflect.Array.getLength(buf);
  }

  /**
   * What the native layer gets for {@code buf}: the array itself, or the
   * ByteBuffer from its position (a slice when the position is not 0).
   */
  static Object view(Object buf) {
    if (buf instanceof ByteBuffer) {
      ByteBuffer b = (ByteBuffer) buf;
      return b.position() == 0 ? b : b.slice();
    }
    return buf;
  }

  /**
   * Memory that outlives the call for a nonblocking operation: a direct
   * buffer's view, or a new direct buffer holding a copy of the array's
   * first {@code count} elements (zeros unless {@code copyIn}).
   */
  static ByteBuffer stable(Object buf, DType dtype, int count, boolean copyIn) {
    if (buf instanceof ByteBuffer) {
      return (ByteBuffer) view(buf);
    }
    long bytes = (long) count * dtype.size();
    if (bytes > Integer.MAX_VALUE) {
      throw invalid("hcomm: " + count + " " + dtype + " elements (" + bytes
          + " bytes) do not fit one direct buffer (2 GiB): pass a smaller array");
    }
    ByteBuffer s;
    try {
      s = ByteBuffer.allocateDirect((int) bytes).order(ByteOrder.nativeOrder());
    } catch (OutOfMemoryError e) {
      throw new HcommException(Status.OUT_OF_MEM, "hcomm: cannot allocate " + bytes
          + " bytes of direct memory for the operation's native copy (" + e.getMessage() + ")");
    }
    if (copyIn) {
      if (buf instanceof byte[]) s.put((byte[]) buf, 0, count);
      else if (buf instanceof int[]) s.asIntBuffer().put((int[]) buf, 0, count);
      else if (buf instanceof long[]) s.asLongBuffer().put((long[]) buf, 0, count);
      else if (buf instanceof float[]) s.asFloatBuffer().put((float[]) buf, 0, count);
      else s.asDoubleBuffer().put((double[]) buf, 0, count);
      s.clear();
    }
    return s;
  }

  /** Copies the first {@code count} elements of a staging buffer to {@code array}. */
  static void copyBack(ByteBuffer staging, Object array, int count) {
    ByteBuffer s = staging.duplicate().order(ByteOrder.nativeOrder());
    s.clear();
    if (array instanceof byte[]) s.get((byte[]) array, 0, count);
    else if (array instanceof int[]) s.asIntBuffer().get((int[]) array, 0, count);
    else if (array instanceof long[]) s.asLongBuffer().get((long[]) array, 0, count);
    else if (array instanceof float[]) s.asFloatBuffer().get((float[]) array, 0, count);
    else s.asDoubleBuffer().get((double[]) array, 0, count);
  }
}
