package org.hcomm;

import static org.hcomm.CommunicatorTest.direct;
import static org.hcomm.CommunicatorTest.expect;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.junit.Test;

/** SharedMemoryChannel within one process (two handles on one channel). */
public class ChannelTest {
  private static String unique(String what) {
    return "java-test-" + what + "-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
  }

  @Test
  public void writeAndReadAcrossHandles() {
    String name = unique("rw");
    try (SharedMemoryChannel w = SharedMemoryChannel.create(name, 1 << 16);
         SharedMemoryChannel r = SharedMemoryChannel.open(name)) {
      assertEquals(name, r.name());
      w.write("hello".getBytes(StandardCharsets.UTF_8), 100);
      w.write(new byte[0], 100);
      byte[] big = new byte[20000];
      for (int i = 0; i < big.length; ++i) {
        big[i] = (byte) (i * 7);
      }
      w.write(big);
      assertEquals("hello", new String(r.read(100), StandardCharsets.UTF_8));
      assertEquals(0, r.read(100).length);
      assertArrayEquals(big, r.read()); // grows past its first guess

      ByteBuffer out = direct(16);
      out.putLong(0, 1234).putLong(8, -1);
      out.limit(8);
      w.write(out, 100);
      ByteBuffer in = direct(32);
      assertEquals(8, r.read(in, 100));
      assertEquals(1234, in.getLong(0));
      assertEquals(0, in.position());
    }
  }

  @Test
  public void errors() {
    String name = unique("err");
    expect(Status.NO_DEVICE, () -> SharedMemoryChannel.open(name));
    expect(Status.INVALID_ARGUMENT, () -> SharedMemoryChannel.create("bad/name", 64));
    expect(Status.INVALID_ARGUMENT, () -> SharedMemoryChannel.create(name, 0));
    // Negative: not passed to C as a huge size_t.
    HcommException neg =
        expect(Status.INVALID_ARGUMENT, () -> SharedMemoryChannel.create(name, -5));
    assertTrue(neg.getMessage(), neg.getMessage().contains("capacityBytes -5 is negative"));
    HcommException nul =
        expect(Status.INVALID_ARGUMENT, () -> SharedMemoryChannel.create(name + "\0x", 64));
    assertTrue(nul.getMessage(), nul.getMessage().contains("NUL"));
    SharedMemoryChannel ch = SharedMemoryChannel.create(name, 64);
    expect(Status.INVALID_ARGUMENT, () -> SharedMemoryChannel.create(name, 64)); // exists
    HcommException e = expect(Status.TIMEOUT, () -> ch.read(0));
    assertTrue(e.getMessage(), e.getMessage().contains(name));
    expect(Status.INVALID_ARGUMENT, () -> ch.write(new byte[100], 0)); // never fits
    expect(Status.INVALID_ARGUMENT, () -> ch.write(new byte[1], -1));
    ch.write(new byte[24], 0);
    ByteBuffer small = direct(8);
    expect(Status.MISMATCH, () -> ch.read(small, 0)); // stays in the channel
    assertEquals(24, ch.read(0).length);
    // Heap buffers: the bytes from position to limit go, and come back from the position.
    ByteBuffer out = ByteBuffer.wrap(new byte[] {9, 1, 2, 3, 9});
    out.position(1).limit(4);
    ch.write(out, 0);
    ByteBuffer in = ByteBuffer.allocate(6);
    in.position(2);
    assertEquals(3, ch.read(in, 0));
    assertArrayEquals(new byte[] {0, 0, 1, 2, 3, 0}, in.array());
    assertEquals(2, in.position());
    assertEquals(1, out.position());
    ch.close();
    ch.close();
    assertTrue(ch.isClosed());
    expect(Status.INVALID_ARGUMENT, () -> ch.write(new byte[1], 0));
    expect(Status.INVALID_ARGUMENT, () -> ch.read(0));
    expect(Status.NO_DEVICE, () -> SharedMemoryChannel.open(name)); // creator closed it
  }
}
