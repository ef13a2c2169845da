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
 *       read-only one is refused where the call writes.
 *   <li>A heap ByteBuffer (no fixed native address) is the same bytes,
 *       copied into a temporary direct buffer for the call ({@link #view})
 *       and, for what the call writes, back from its position when it
 *       succeeds ({@link #writeBack}); nonblocking calls stage it as they
 *       stage arrays, and copy back on completion.
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
    return new InvalidArgumentException(message);
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
   * ByteBuffer must be writable if {@code output}, and hold a whole number of
   * elements.
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

  /** Whether {@code buf} is a heap (non-direct) ByteBuffer, which is used through a copy. */
  static boolean isHeap(Object buf) {
    return buf instanceof ByteBuffer && !((ByteBuffer) buf).isDirect();
  }

  /**
   * What the native layer gets for {@code buf} in a blocking call: the array itself, a direct
   * ByteBuffer from its position (a slice when the position is not 0), or for a heap ByteBuffer
   * a new direct buffer holding a copy of its bytes from position to limit (hand it to
   * {@link #writeBack} after a call that wrote it).
   */
  static Object view(Object buf) {
    if (buf instanceof ByteBuffer) {
      ByteBuffer b = (ByteBuffer) buf;
      if (!b.isDirect()) {
        ByteBuffer copy = allocate(b.remaining());
        copy.put(b.duplicate());
        copy.clear();
        return copy;
      }
      return b.position() == 0 ? b : b.slice();
    }
    return buf;
  }

  /**
   * After a blocking call wrote into {@code view} (from {@link #view}{@code (buf)}) and
   * succeeded: a heap ByteBuffer gets the bytes back, from its position (which stays); anything
   * else was written in place, or by the native layer.
   */
  static void writeBack(Object buf, Object view) {
    writeBack(buf, view, Long.MAX_VALUE);
  }

  /** {@link #writeBack(Object, Object)} of the first {@code bytes} bytes only. */
  static void writeBack(Object buf, Object view, long bytes) {
    if (view != null && view != buf && isHeap(buf)) {
      ByteBuffer src = ((ByteBuffer) view).duplicate();
      src.clear();
      src.limit((int) Math.min(bytes, src.capacity()));
      ((ByteBuffer) buf).duplicate().put(src);
    }
  }

  /** A new direct buffer of {@code bytes} bytes in native order; OUT_OF_MEM if there is none. */
  static ByteBuffer allocate(long bytes) {
    if (bytes > Integer.MAX_VALUE) {
      throw invalid("hcomm: " + bytes + " bytes do not fit one direct buffer (2 GiB): pass a "
          + "smaller buffer");
    }
    try {
      return ByteBuffer.allocateDirect((int) bytes).order(ByteOrder.nativeOrder());
    } catch (OutOfMemoryError e) {
      throw new OutOfMemException("hcomm: cannot allocate " + bytes
          + " bytes of direct memory for the operation's native copy (" + e.getMessage() + ")");
    }
  }

  /**
   * Memory that outlives the call for a nonblocking operation: a direct buffer's view, or a new
   * direct buffer holding a copy of a heap ByteBuffer's bytes from its position, or of an
   * array's first {@code count} elements (zeros unless {@code copyIn}).
   */
  static ByteBuffer stable(Object buf, DType dtype, int count, boolean copyIn) {
    if (buf instanceof ByteBuffer) {
      ByteBuffer b = (ByteBuffer) buf;
      if (b.isDirect()) {
        return (ByteBuffer) view(buf);
      }
      ByteBuffer s = allocate(b.remaining());
      if (copyIn) {
        s.put(b.duplicate());
        s.clear();
      }
      return s;
    }
    long bytes = (long) count * dtype.size();
    if (bytes > Integer.MAX_VALUE) {
      throw invalid("hcomm: " + count + " " + dtype + " elements (" + bytes
          + " bytes) do not fit one direct buffer (2 GiB): pass a smaller array");
    }
    ByteBuffer s = allocate(bytes);
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

  /**
   * Where a staged copy of {@code buf} goes back to: the array, or for a heap ByteBuffer a
   * duplicate that keeps the position and limit it had when the operation started.
   */
  static Object target(Object buf) {
    return buf instanceof ByteBuffer ? ((ByteBuffer) buf).duplicate() : buf;
  }

  /** Elements of {@code dtype} in a copy-back target (an array, or a heap ByteBuffer's window). */
  static int elements(Object target, DType dtype) {
    if (target instanceof ByteBuffer) {
      return ((ByteBuffer) target).remaining() / dtype.size();
    }
    return java.lang.reflect.Array.getLength(target);
  }

  /**
   * Copies the first {@code count} elements ({@code dtype}) of a staging buffer to {@code target}
   * (see {@link #target}): an array, or a heap ByteBuffer from its position.
   */
  static void copyBack(ByteBuffer staging, Object target, int count, DType dtype) {
    ByteBuffer s = staging.duplicate().order(ByteOrder.nativeOrder());
    s.clear();
    if (target instanceof ByteBuffer) {
      s.limit((int) Math.min((long) count * dtype.size(), s.capacity()));
      ((ByteBuffer) target).duplicate().put(s);
    } else if (target instanceof byte[]) s.get((byte[]) target, 0, count);
    else if (target instanceof int[]) s.asIntBuffer().get((int[]) target, 0, count);
    else if (target instanceof long[]) s.asLongBuffer().get((long[]) target, 0, count);
    else if (target instanceof float[]) s.asFloatBuffer().get((float[]) target, 0, count);
    else s.asDoubleBuffer().get((double[]) target, 0, count);
  }
}
