package org.hcomm;

import java.nio.ByteBuffer;
import java.util.Arrays;
import org.hcomm.internal.HcommNative;

/**
 * A named FIFO of messages in this host's shared memory
 * ({@code hcomm_channel_*}), for local processes that share no communicator,
 * e.g. a parameter server handing weights to local workers. Any number of
 * processes and threads may write and read; each message goes whole to one
 * reader.
 *
 * <pre>{@code
 * try (SharedMemoryChannel ch = SharedMemoryChannel.create("weights", 1 << 20)) {
 *   ch.write(bytes, 1000);
 *   ...
 * }
 * try (SharedMemoryChannel ch = SharedMemoryChannel.open("weights")) {   // another process
 *   byte[] m = ch.read(5000);
 * }
 * }</pre>
 *
 * <p>Channel "x" is /dev/shm/hcomm-ch-x (mode 0600). The creator's close
 * removes the name. Timeouts are in milliseconds: 0 tries once, a positive
 * value waits up to that long; nothing waits forever.
 */
public final class SharedMemoryChannel implements AutoCloseable {
  /** The timeout of {@link #write(byte[])} and {@link #read()}: 30 s. */
  public static final int DEFAULT_TIMEOUT_MS = 30_000;

  private static final int MAX_ARRAY = Integer.MAX_VALUE - 8;

  private final NativeHandle handle;
  private final String name;
  private volatile int sizeHint = 4096; // the last message size read, to size the next buffer

  private SharedMemoryChannel(long ch, String name) {
    this.name = name;
    this.handle = new NativeHandle(this, ch, "channel", HcommNative::hcomm_channel_close);
  }

  /**
   * Creates ({@code create}) or opens the channel {@code name} (1 to 200
   * characters, no '/'). Creating reserves {@code capacityBytes} of /dev/shm
   * (1 to 2^30; a message of n bytes takes 8 + n rounded up to 8) and fails
   * if the name exists; opening ignores it and is {@link Status#NO_DEVICE}
   * when no creator has the name open.
   */
  public static SharedMemoryChannel open(String name, long capacityBytes, boolean create) {
    Buffers.checkCString(name, "SharedMemoryChannel: name " + Buffers.quote(name));
    if (capacityBytes < 0) {
      // C takes a size_t: -5 would arrive as 2^64 - 5.
      throw Buffers.invalid("SharedMemoryChannel " + Buffers.quote(name) + ": capacityBytes "
          + capacityBytes + " is negative");
    }
    long ch = HcommNative.hcomm_channel_open(name, capacityBytes, create ? 1 : 0);
    return new SharedMemoryChannel(ch, name);
  }

  /** {@link #open(String, long, boolean)} creating the channel. */
  public static SharedMemoryChannel create(String name, long capacityBytes) {
    return open(name, capacityBytes, true);
  }

  /** {@link #open(String, long, boolean)} opening an existing channel. */
  public static SharedMemoryChannel open(String name) {
    return open(name, 0, false);
  }

  /** The channel's name. */
  public String name() {
    return name;
  }

  /**
   * Appends one message, waiting up to {@code timeoutMs} for room
   * ({@link Status#TIMEOUT} after that). An empty message is a message.
   */
  public void write(byte[] data, int timeoutMs) {
    if (data == null) {
      throw Buffers.invalid("SharedMemoryChannel.write: data is null");
    }
    writeImpl(data, data.length, timeoutMs);
  }

  /** {@link #write(byte[], int)} with {@link #DEFAULT_TIMEOUT_MS}. */
  public void write(byte[] data) {
    write(data, DEFAULT_TIMEOUT_MS);
  }

  /**
   * Appends the bytes from the position to the limit of a ByteBuffer
   * (zero copy when direct; a heap one is copied; position unchanged).
   */
  public void write(ByteBuffer data, int timeoutMs) {
    int n = Buffers.count(data, DType.UINT8, false, "SharedMemoryChannel.write: data");
    writeImpl(Buffers.view(data), n, timeoutMs);
  }

  private void writeImpl(Object data, int n, int timeoutMs) {
    long h = handle.enter();
    try {
      HcommNative.hcomm_channel_write(h, data, n, timeoutMs);
    } finally {
      handle.exit();
    }
  }

  /**
   * Takes the next message, waiting up to {@code timeoutMs} for one
   * ({@link Status#TIMEOUT} after that).
   */
  public byte[] read(int timeoutMs) {
    int cap = sizeHint;
    long[] n = new long[1];
    while (true) {
      byte[] buf = new byte[cap];
      long h = handle.enter();
      try {
        HcommNative.hcomm_channel_read(h, buf, cap, n, timeoutMs);
      } catch (HcommException e) {
        // Too large for buf: the message stays; grow and read again (another
        // reader may take it first, and then we get the next one).
        if (e.status() != Status.MISMATCH.code() || n[0] <= cap) {
          throw e;
        }
        if (n[0] > MAX_ARRAY) {
          throw new NotSupportedException("SharedMemoryChannel.read: a message of "
              + n[0] + " bytes does not fit a Java array");
        }
        cap = (int) n[0];
        continue;
      } finally {
        handle.exit();
      }
      int got = (int) n[0];
      sizeHint = Math.max(got, 64);
      return got == cap ? buf : Arrays.copyOf(buf, got);
    }
  }

  /** {@link #read(int)} with {@link #DEFAULT_TIMEOUT_MS}. */
  public byte[] read() {
    return read(DEFAULT_TIMEOUT_MS);
  }

  /**
   * Reads the next message into a ByteBuffer (from its position, zero copy
   * when direct, through a copy when on the heap; position unchanged) and
   * returns its size. A message larger than
   * the remaining bytes is {@link Status#MISMATCH} and stays in the channel.
   */
  public int read(ByteBuffer dst, int timeoutMs) {
    int cap = Buffers.count(dst, DType.UINT8, true, "SharedMemoryChannel.read: dst");
    Object v = Buffers.view(dst);
    long[] n = new long[1];
    long h = handle.enter();
    try {
      HcommNative.hcomm_channel_read(h, v, cap, n, timeoutMs);
      Buffers.writeBack(dst, v, n[0]);
    } finally {
      handle.exit();
    }
    return (int) n[0];
  }

  /** True after {@link #close()}. */
  public boolean isClosed() {
    return handle.isClosed();
  }

  /**
   * Unmaps the channel; the creator's close also removes its name (handles
   * open elsewhere keep working). Idempotent.
   */
  @Override
  public void close() {
    handle.close();
  }
}
