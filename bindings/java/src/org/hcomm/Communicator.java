package org.hcomm;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.StringJoiner;
import org.hcomm.internal.HcommNative;

/**
 * A group of ranks that exchange messages and run collectives: the Java face
 * of {@code hcomm_comm_t} (see c_api/include/hcomm/hcomm.h for each call's
 * contract).
 *
 * <pre>{@code
 * try (Communicator c = Communicator.init()) {      // RANK, WORLD_SIZE, ... (hcomm_run sets them)
 *   float[] grad = new float[1024];
 *   c.allReduce(grad, ReduceOp.SUM);
 *   if (c.rank() == 0) c.send(new int[] {42}, 1, 7);
 *   else if (c.rank() == 1) c.recv(new int[1], 0, 7);
 * }
 * }</pre>
 *
 * <p>Buffers ({@code T}) are {@code byte[]} (INT8), {@code int[]} (INT32),
 * {@code long[]} (INT64), {@code float[]} (FLOAT32), {@code double[]}
 * (FLOAT64) or a {@link ByteBuffer} (UINT8 unless a {@link DType} is given;
 * the bytes from its position to its limit, which stay unchanged). A direct
 * ByteBuffer is used in place (zero copy); a heap one is copied into a
 * temporary direct buffer and back from its position. Arrays are copied to
 * native memory and back around each blocking call (they are not pinned,
 * since the call may block on the network); see {@link Request} for
 * nonblocking calls. Counts come from the buffers: one-buffer calls use the
 * whole buffer, two-buffer calls check that the other one is large enough.
 *
 * <p>Errors throw the {@link HcommException} subclass of the C status
 * ({@link MismatchException}, {@link TimeoutException}, ...) with
 * hcomm_last_error()'s message. Collectives must be called in the same order
 * on every rank. Every blocking call ends by the communicator's
 * {@code timeout_ms} ({@link #set(String, String)}), or early, with {@link
 * HcommInterruptedException}, once its thread is interrupted ({@link
 * Thread#interrupt()}; the library looks after 100 ms of waiting and every
 * 100 ms after that).
 *
 * <p>THREAD SAFETY: point-to-point calls may come from several threads at
 * once, collectives from one at a time. {@link #close()} waits for calls in
 * progress on other threads; {@link #abort()} does not, and makes them fail
 * promptly with {@link Status#ABORTED}.
 */
public final class Communicator implements AutoCloseable {
  /** Receive from any rank (hcomm's HCOMM_ANY_SOURCE). */
  public static final int ANY_SOURCE = -1;
  /** Receive with any tag (HCOMM_ANY_TAG). */
  public static final int ANY_TAG = -1;
  /** The color of a rank that joins no communicator in {@link #split(int, int)}. */
  public static final int UNDEFINED = -1;

  /**
   * Memory of requests closed before they completed: the operation may still
   * write into it, so it is kept until the world communicator is destroyed.
   * Shared by a world and every communicator made from it.
   */
  static final class Orphans {
    private final List<Object> kept = new ArrayList<>();
    private boolean released;

    synchronized void keep(Object memory) {
      if (!released && memory != null) {
        kept.add(memory);
      }
    }

    synchronized void release() {
      released = true;
      kept.clear();
    }
  }

  private final NativeHandle handle;
  private final Communicator parent; // keeps the world (and its connections) alive
  private final Orphans orphans;
  private final int rank;
  private final int size;

  private Communicator(long comm, Communicator parent) {
    this.parent = parent;
    this.orphans = parent == null ? new Orphans() : parent.orphans;
    try {
      this.rank = HcommNative.hcomm_comm_rank(comm);
      this.size = HcommNative.hcomm_comm_size(comm);
    } catch (RuntimeException e) {
      HcommNative.hcomm_comm_destroy(comm);
      throw e;
    }
    final Orphans kept = orphans;
    final boolean world = parent == null;
    this.handle = new NativeHandle(this, comm, "communicator", h -> {
      try {
        HcommNative.hcomm_comm_destroy(h);
      } finally {
        if (world) {
          kept.release(); // the connections are gone: nothing writes any more
        }
      }
    });
  }

  /**
   * Joins the job, configured entirely from the environment (RANK and
   * WORLD_SIZE or HCOMM_RANK and HCOMM_WORLD_SIZE, MASTER_ADDR/MASTER_PORT
   * or HCOMM_STORE_ADDR, HCOMM_JOB_TOKEN, HCOMM_TIMEOUT_MS, ...).
   * Collective over all ranks; blocks until they have all joined or
   * timeout_ms passes.
   */
  public static Communicator init() {
    return new Communicator(HcommNative.hcomm_comm_init(0), null);
  }

  /**
   * Joins the job with these configuration keys (rank, world_size,
   * store_addr, job_token, timeout_ms, transports, algo, host_id, plugins); keys not
   * given come from the environment. An unknown key or a bad value is
   * {@link Status#INVALID_ARGUMENT}. A null map is {@link #init()}.
   */
  public static Communicator init(Map<String, String> config) {
    if (config == null) {
      return init();
    }
    for (Map.Entry<String, String> e : config.entrySet()) {
      String key = Buffers.quote(e.getKey());
      Buffers.checkCString(e.getKey(), "Communicator.init: config key " + key);
      Buffers.checkCString(e.getValue(), "Communicator.init: config value of " + key);
    }
    long cfg = HcommNative.hcomm_config_create();
    try {
      for (Map.Entry<String, String> e : config.entrySet()) {
        HcommNative.hcomm_config_set(cfg, e.getKey(), e.getValue());
      }
      return new Communicator(HcommNative.hcomm_comm_init(cfg), null);
    } finally {
      HcommNative.hcomm_config_destroy(cfg);
    }
  }

  /** The library's version, "MAJOR.MINOR.PATCH". */
  public static String version() {
    int[] major = new int[1];
    int[] minor = new int[1];
    int[] patch = new int[1];
    HcommNative.hcomm_version(major, minor, patch);
    return major[0] + "." + minor[0] + "." + patch[0];
  }

  /** This process's rank in the communicator. */
  public int rank() {
    checkOpen();
    return rank;
  }

  /** The number of ranks. */
  public int size() {
    checkOpen();
    return size;
  }

  /**
   * Changes a setting of the live communicator; only {@code timeout_ms},
   * {@code algo}, {@code fusion_bytes}, {@code compression} (see
   * {@link #setCompression(Compression...)}) and {@code delta_cache_bytes}
   * may change after init. Applies to calls started afterwards.
   */
  public void set(String key, String value) {
    Buffers.checkCString(key, "Communicator.set: key " + Buffers.quote(key));
    Buffers.checkCString(value, "Communicator.set: value");
    long h = handle.enter();
    try {
      HcommNative.hcomm_comm_set(h, key, value);
    } finally {
      handle.exit();
    }
  }

  /**
   * Compresses what this rank sends from now on (the config key
   * {@code compression}): {@link Compression#FP16} or {@link Compression#BF16}
   * (at most one), {@link Compression#DELTA}, or both kinds, e.g.
   * {@code setCompression(Compression.FP16, Compression.DELTA)}; no argument
   * turns compression off. Applies to calls started afterwards; call it at
   * the same point on every rank (a collective expects the same setting on
   * every rank; a receive decodes whatever comes). FP16/BF16 stay off over
   * shared memory, where the conversion costs more than it saves, so
   * results there are exact.
   *
   * @throws HcommException {@link Status#INVALID_ARGUMENT} for FP16 with
   *     BF16, a null array or a null element; nothing changes then
   */
  public void setCompression(Compression... kinds) {
    if (kinds == null) {
      throw Buffers.invalid("setCompression: kinds is null; pass no argument to turn "
          + "compression off");
    }
    setCompression(Arrays.asList(kinds), "setCompression: kinds " + Arrays.toString(kinds));
  }

  /**
   * {@link #setCompression(Compression...)} with a set, e.g.
   * {@code EnumSet.of(Compression.BF16, Compression.DELTA)}; an empty set
   * turns compression off.
   */
  public void setCompression(Set<Compression> kinds) {
    if (kinds == null) {
      throw Buffers.invalid("setCompression: kinds is null; pass an empty set to turn "
          + "compression off");
    }
    setCompression(new ArrayList<>(kinds), "setCompression: kinds " + kinds);
  }

  private void setCompression(List<Compression> kinds, String what) {
    EnumSet<Compression> chosen = EnumSet.noneOf(Compression.class);
    for (Compression k : kinds) {
      if (k == null) {
        throw Buffers.invalid(what + " holds null");
      }
      chosen.add(k);
    }
    if (chosen.contains(Compression.FP16) && chosen.contains(Compression.BF16)) {
      throw Buffers.invalid(what + " holds both FP16 and BF16; data travels in at most one "
          + "16-bit format (FP16 with DELTA and BF16 with DELTA are allowed)");
    }
    StringJoiner value = new StringJoiner(",");
    for (Compression k : chosen) {
      value.add(k.value());
    }
    set("compression", chosen.isEmpty() ? "none" : value.toString());
  }

  /**
   * The transport that carries messages between this rank and {@code peer}:
   * "shm", "tcp", or "self" (peer == own rank).
   */
  public String transport(int peer) {
    long h = handle.enter();
    try {
      return HcommNative.hcomm_comm_transport(h, peer);
    } finally {
      handle.exit();
    }
  }

  /**
   * Makes every pending and later operation on this communicator fail
   * promptly with {@link Status#ABORTED}. May be called from any thread,
   * also while others are blocked in calls; does nothing once closed.
   * Aborting the world fails its groups too; aborting a group ends that
   * group alone (its members' calls on it with this rank fail with
   * {@link Status#PEER_FAILURE}).
   */
  public void abort() {
    long h = handle.tryEnter();
    if (h == 0) {
      return;
    }
    try {
      HcommNative.hcomm_comm_abort(h);
    } finally {
      handle.exit();
    }
  }

  /** True after {@link #close()}. */
  public boolean isClosed() {
    return handle.isClosed();
  }

  /**
   * Destroys the communicator (hcomm_comm_destroy): local, not collective;
   * first waits (up to timeout_ms) until this rank's sends have been
   * delivered. Waits for calls in progress on other threads. Pending requests
   * fail with {@link Status#ABORTED}. Closing a world communicator ends
   * every communicator made from it. Idempotent; throws if the destroy
   * reported an error (the communicator is released anyway).
   */
  @Override
  public void close() {
    handle.close();
  }

  /**
   * A communicator of {@code ranks} (ranks of this one, no duplicates; new
   * rank = index in the array), or null on ranks not listed. Collective:
   * every rank calls it with the same list.
   */
  public Communicator newGroup(int[] ranks) {
    if (ranks == null) {
      throw refused(Buffers.invalid("newGroup: ranks is null"),
          h -> HcommNative.hcomm_comm_create_group(h, new int[] {-1}));
    }
    long h = handle.enter();
    long child;
    try {
      child = HcommNative.hcomm_comm_create_group(h, ranks);
    } finally {
      handle.exit();
    }
    return child == 0 ? null : new Communicator(child, this);
  }

  /**
   * Splits this communicator: ranks passing the same {@code color} (>= 0)
   * form a new one, ordered by ({@code key}, rank here). Returns null for
   * {@link #UNDEFINED}. Collective over this communicator.
   */
  public Communicator split(int color, int key) {
    long h = handle.enter();
    long child;
    try {
      child = HcommNative.hcomm_comm_split(h, color, key);
    } finally {
      handle.exit();
    }
    return child == 0 ? null : new Communicator(child, this);
  }

  /**
   * After a rank failed ({@link Status#PEER_FAILURE}): the surviving ranks
   * agree on which ranks are gone and get a new communicator of the living
   * ones, renumbered in their old order (hcomm_comm_shrink). Collective over
   * the survivors; without a failure, a communicator of every rank. This
   * communicator is left as it is (its collectives keep failing): close it
   * when done. Throws {@link Status#TIMEOUT} naming the ranks waited for
   * where a survivor does not call it within timeout_ms.
   */
  public Communicator shrink() {
    long h = handle.enter();
    long child;
    try {
      child = HcommNative.hcomm_comm_shrink(h);
    } finally {
      handle.exit();
    }
    return new Communicator(child, this);
  }

  /**
   * A new {@link Stream} of this communicator with {@code priority} (a higher number is served
   * first where streams compete; 0 is the default): an ordered queue of operations that run in
   * the background. Collective: every rank makes its streams of a communicator in the same order.
   */
  public Stream stream(int priority) {
    return new Stream(this, priority);
  }

  /** Returns once every rank has entered the barrier. */
  public void barrier() {
    long h = handle.enter();
    try {
      HcommNative.hcomm_barrier(h);
    } finally {
      handle.exit();
    }
  }

  @Override
  public String toString() {
    return isClosed() ? "Communicator(closed)" : "Communicator(rank " + rank + " of " + size + ")";
  }

  // --- typed overloads ---------------------------------------------------------------------

  /**
   * Sends {@code buf} to rank {@code dst} with {@code tag} (>= 0); returns once the buffer may be
   * reused. {@code byte[]} is INT8.
   */
  public void send(byte[] buf, int dst, int tag) {
    sendImpl(buf, DType.INT8, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code int[]} (INT32). */
  public void send(int[] buf, int dst, int tag) {
    sendImpl(buf, DType.INT32, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code long[]} (INT64). */
  public void send(long[] buf, int dst, int tag) {
    sendImpl(buf, DType.INT64, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code float[]} (FLOAT32). */
  public void send(float[] buf, int dst, int tag) {
    sendImpl(buf, DType.FLOAT32, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for {@code double[]} (FLOAT64). */
  public void send(double[] buf, int dst, int tag) {
    sendImpl(buf, DType.FLOAT64, dst, tag);
  }

  /** {@link #send(byte[], int, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void send(ByteBuffer buf, int dst, int tag) {
    sendImpl(buf, DType.UINT8, dst, tag);
  }

  /**
   * {@link #send(byte[], int, int)} for a ByteBuffer of {@code dtype} elements (zero copy when
   * direct).
   */
  public void send(ByteBuffer buf, DType dtype, int dst, int tag) {
    sendImpl(buf, dtype, dst, tag);
  }

  /**
   * Receives into {@code buf} (its capacity) from {@code src} (or {@link #ANY_SOURCE}) with
   * {@code tag} (or {@link #ANY_TAG}); returns the source. A larger message is
   * {@link Status#MISMATCH}. {@code byte[]} is INT8.
   */
  public int recv(byte[] buf, int src, int tag) {
    return recvImpl(buf, DType.INT8, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code int[]} (INT32). */
  public int recv(int[] buf, int src, int tag) {
    return recvImpl(buf, DType.INT32, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code long[]} (INT64). */
  public int recv(long[] buf, int src, int tag) {
    return recvImpl(buf, DType.INT64, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code float[]} (FLOAT32). */
  public int recv(float[] buf, int src, int tag) {
    return recvImpl(buf, DType.FLOAT32, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for {@code double[]} (FLOAT64). */
  public int recv(double[] buf, int src, int tag) {
    return recvImpl(buf, DType.FLOAT64, src, tag);
  }

  /** {@link #recv(byte[], int, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public int recv(ByteBuffer buf, int src, int tag) {
    return recvImpl(buf, DType.UINT8, src, tag);
  }

  /**
   * {@link #recv(byte[], int, int)} for a ByteBuffer of {@code dtype} elements (zero copy when
   * direct).
   */
  public int recv(ByteBuffer buf, DType dtype, int src, int tag) {
    return recvImpl(buf, dtype, src, tag);
  }

  /**
   * Starts sending {@code buf}; see {@link Request} for the buffer's lifetime. {@code byte[]} is
   * INT8.
   */
  public Request isend(byte[] buf, int dst, int tag) {
    return isendImpl(buf, DType.INT8, dst, tag);
  }

  /** {@link #isend(byte[], int, int)} for {@code int[]} (INT32). */
  public Request isend(int[] buf, int dst, int tag) {
    return isendImpl(buf, DType.INT32, dst, tag);
  }

  /** {@link #isend(byte[], int, int)} for {@code long[]} (INT64). */
  public Request isend(long[] buf, int dst, int tag) {
    return isendImpl(buf, DType.INT64, dst, tag);
  }

  /** {@link #isend(byte[], int, int)} for {@code float[]} (FLOAT32). */
  public Request isend(float[] buf, int dst, int tag) {
    return isendImpl(buf, DType.FLOAT32, dst, tag);
  }

  /** {@link #isend(byte[], int, int)} for {@code double[]} (FLOAT64). */
  public Request isend(double[] buf, int dst, int tag) {
    return isendImpl(buf, DType.FLOAT64, dst, tag);
  }

  /** {@link #isend(byte[], int, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public Request isend(ByteBuffer buf, int dst, int tag) {
    return isendImpl(buf, DType.UINT8, dst, tag);
  }

  /**
   * {@link #isend(byte[], int, int)} for a ByteBuffer of {@code dtype} elements (zero copy when
   * direct).
   */
  public Request isend(ByteBuffer buf, DType dtype, int dst, int tag) {
    return isendImpl(buf, dtype, dst, tag);
  }

  /**
   * Starts receiving into {@code buf}; see {@link Request} for the buffer's lifetime.
   * {@code byte[]} is INT8.
   */
  public Request irecv(byte[] buf, int src, int tag) {
    return irecvImpl(buf, DType.INT8, src, tag);
  }

  /** {@link #irecv(byte[], int, int)} for {@code int[]} (INT32). */
  public Request irecv(int[] buf, int src, int tag) {
    return irecvImpl(buf, DType.INT32, src, tag);
  }

  /** {@link #irecv(byte[], int, int)} for {@code long[]} (INT64). */
  public Request irecv(long[] buf, int src, int tag) {
    return irecvImpl(buf, DType.INT64, src, tag);
  }

  /** {@link #irecv(byte[], int, int)} for {@code float[]} (FLOAT32). */
  public Request irecv(float[] buf, int src, int tag) {
    return irecvImpl(buf, DType.FLOAT32, src, tag);
  }

  /** {@link #irecv(byte[], int, int)} for {@code double[]} (FLOAT64). */
  public Request irecv(double[] buf, int src, int tag) {
    return irecvImpl(buf, DType.FLOAT64, src, tag);
  }

  /** {@link #irecv(byte[], int, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public Request irecv(ByteBuffer buf, int src, int tag) {
    return irecvImpl(buf, DType.UINT8, src, tag);
  }

  /**
   * {@link #irecv(byte[], int, int)} for a ByteBuffer of {@code dtype} elements (zero copy when
   * direct).
   */
  public Request irecv(ByteBuffer buf, DType dtype, int src, int tag) {
    return irecvImpl(buf, dtype, src, tag);
  }

  /**
   * In place: every rank's {@code buf} becomes {@code op} over all ranks' buffers. {@code byte[]}
   * is INT8.
   */
  public void allReduce(byte[] buf, ReduceOp op) {
    allReduceImpl(buf, DType.INT8, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code int[]} (INT32). */
  public void allReduce(int[] buf, ReduceOp op) {
    allReduceImpl(buf, DType.INT32, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code long[]} (INT64). */
  public void allReduce(long[] buf, ReduceOp op) {
    allReduceImpl(buf, DType.INT64, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code float[]} (FLOAT32). */
  public void allReduce(float[] buf, ReduceOp op) {
    allReduceImpl(buf, DType.FLOAT32, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for {@code double[]} (FLOAT64). */
  public void allReduce(double[] buf, ReduceOp op) {
    allReduceImpl(buf, DType.FLOAT64, op);
  }

  /** {@link #allReduce(byte[], ReduceOp)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void allReduce(ByteBuffer buf, ReduceOp op) {
    allReduceImpl(buf, DType.UINT8, op);
  }

  /**
   * {@link #allReduce(byte[], ReduceOp)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public void allReduce(ByteBuffer buf, DType dtype, ReduceOp op) {
    allReduceImpl(buf, dtype, op);
  }

  /**
   * Starts an in-place allReduce that completes through the returned {@link Request}.
   * {@code byte[]} is INT8.
   */
  public Request iallReduce(byte[] buf, ReduceOp op) {
    return iallReduceImpl(buf, DType.INT8, op);
  }

  /** {@link #iallReduce(byte[], ReduceOp)} for {@code int[]} (INT32). */
  public Request iallReduce(int[] buf, ReduceOp op) {
    return iallReduceImpl(buf, DType.INT32, op);
  }

  /** {@link #iallReduce(byte[], ReduceOp)} for {@code long[]} (INT64). */
  public Request iallReduce(long[] buf, ReduceOp op) {
    return iallReduceImpl(buf, DType.INT64, op);
  }

  /** {@link #iallReduce(byte[], ReduceOp)} for {@code float[]} (FLOAT32). */
  public Request iallReduce(float[] buf, ReduceOp op) {
    return iallReduceImpl(buf, DType.FLOAT32, op);
  }

  /** {@link #iallReduce(byte[], ReduceOp)} for {@code double[]} (FLOAT64). */
  public Request iallReduce(double[] buf, ReduceOp op) {
    return iallReduceImpl(buf, DType.FLOAT64, op);
  }

  /** {@link #iallReduce(byte[], ReduceOp)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public Request iallReduce(ByteBuffer buf, ReduceOp op) {
    return iallReduceImpl(buf, DType.UINT8, op);
  }

  /**
   * {@link #iallReduce(byte[], ReduceOp)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public Request iallReduce(ByteBuffer buf, DType dtype, ReduceOp op) {
    return iallReduceImpl(buf, dtype, op);
  }

  /** Copies rank {@code root}'s {@code buf} to every rank's. {@code byte[]} is INT8. */
  public void broadcast(byte[] buf, int root) {
    broadcastImpl(buf, DType.INT8, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code int[]} (INT32). */
  public void broadcast(int[] buf, int root) {
    broadcastImpl(buf, DType.INT32, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code long[]} (INT64). */
  public void broadcast(long[] buf, int root) {
    broadcastImpl(buf, DType.INT64, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code float[]} (FLOAT32). */
  public void broadcast(float[] buf, int root) {
    broadcastImpl(buf, DType.FLOAT32, root);
  }

  /** {@link #broadcast(byte[], int)} for {@code double[]} (FLOAT64). */
  public void broadcast(double[] buf, int root) {
    broadcastImpl(buf, DType.FLOAT64, root);
  }

  /** {@link #broadcast(byte[], int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void broadcast(ByteBuffer buf, int root) {
    broadcastImpl(buf, DType.UINT8, root);
  }

  /**
   * {@link #broadcast(byte[], int)} for a ByteBuffer of {@code dtype} elements (zero copy when
   * direct).
   */
  public void broadcast(ByteBuffer buf, DType dtype, int root) {
    broadcastImpl(buf, dtype, root);
  }

  /**
   * In place at {@code root}: its {@code buf} becomes {@code op} over all ranks' buffers (the
   * others' are left unchanged). {@code byte[]} is INT8.
   */
  public void reduce(byte[] buf, ReduceOp op, int root) {
    reduceImpl(buf, DType.INT8, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code int[]} (INT32). */
  public void reduce(int[] buf, ReduceOp op, int root) {
    reduceImpl(buf, DType.INT32, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code long[]} (INT64). */
  public void reduce(long[] buf, ReduceOp op, int root) {
    reduceImpl(buf, DType.INT64, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code float[]} (FLOAT32). */
  public void reduce(float[] buf, ReduceOp op, int root) {
    reduceImpl(buf, DType.FLOAT32, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for {@code double[]} (FLOAT64). */
  public void reduce(double[] buf, ReduceOp op, int root) {
    reduceImpl(buf, DType.FLOAT64, op, root);
  }

  /** {@link #reduce(byte[], ReduceOp, int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void reduce(ByteBuffer buf, ReduceOp op, int root) {
    reduceImpl(buf, DType.UINT8, op, root);
  }

  /**
   * {@link #reduce(byte[], ReduceOp, int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public void reduce(ByteBuffer buf, DType dtype, ReduceOp op, int root) {
    reduceImpl(buf, dtype, op, root);
  }

  /**
   * {@code recv} (at least size &times; send elements) gets every rank's {@code send}, in rank
   * order. {@code byte[]} is INT8.
   */
  public void allGather(byte[] send, byte[] recv) {
    allGatherImpl(send, recv, DType.INT8);
  }

  /** {@link #allGather(byte[], byte[])} for {@code int[]} (INT32). */
  public void allGather(int[] send, int[] recv) {
    allGatherImpl(send, recv, DType.INT32);
  }

  /** {@link #allGather(byte[], byte[])} for {@code long[]} (INT64). */
  public void allGather(long[] send, long[] recv) {
    allGatherImpl(send, recv, DType.INT64);
  }

  /** {@link #allGather(byte[], byte[])} for {@code float[]} (FLOAT32). */
  public void allGather(float[] send, float[] recv) {
    allGatherImpl(send, recv, DType.FLOAT32);
  }

  /** {@link #allGather(byte[], byte[])} for {@code double[]} (FLOAT64). */
  public void allGather(double[] send, double[] recv) {
    allGatherImpl(send, recv, DType.FLOAT64);
  }

  /** {@link #allGather(byte[], byte[])} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void allGather(ByteBuffer send, ByteBuffer recv) {
    allGatherImpl(send, recv, DType.UINT8);
  }

  /**
   * {@link #allGather(byte[], byte[])} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public void allGather(ByteBuffer send, ByteBuffer recv, DType dtype) {
    allGatherImpl(send, recv, dtype);
  }

  /**
   * {@code send} holds size blocks; rank r's {@code recv} gets {@code op} over all ranks' block r.
   * {@code byte[]} is INT8.
   */
  public void reduceScatter(byte[] send, byte[] recv, ReduceOp op) {
    reduceScatterImpl(send, recv, DType.INT8, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code int[]} (INT32). */
  public void reduceScatter(int[] send, int[] recv, ReduceOp op) {
    reduceScatterImpl(send, recv, DType.INT32, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code long[]} (INT64). */
  public void reduceScatter(long[] send, long[] recv, ReduceOp op) {
    reduceScatterImpl(send, recv, DType.INT64, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code float[]} (FLOAT32). */
  public void reduceScatter(float[] send, float[] recv, ReduceOp op) {
    reduceScatterImpl(send, recv, DType.FLOAT32, op);
  }

  /** {@link #reduceScatter(byte[], byte[], ReduceOp)} for {@code double[]} (FLOAT64). */
  public void reduceScatter(double[] send, double[] recv, ReduceOp op) {
    reduceScatterImpl(send, recv, DType.FLOAT64, op);
  }

  /**
   * {@link #reduceScatter(byte[], byte[], ReduceOp)} for a ByteBuffer of UINT8 (zero copy when
   * direct).
   */
  public void reduceScatter(ByteBuffer send, ByteBuffer recv, ReduceOp op) {
    reduceScatterImpl(send, recv, DType.UINT8, op);
  }

  /**
   * {@link #reduceScatter(byte[], byte[], ReduceOp)} for a ByteBuffer of {@code dtype}
   * elements (zero copy when direct).
   */
  public void reduceScatter(ByteBuffer send, ByteBuffer recv, DType dtype, ReduceOp op) {
    reduceScatterImpl(send, recv, dtype, op);
  }

  /**
   * Block j of {@code send} (size blocks) goes to rank j; block i of {@code recv} comes from rank
   * i. {@code byte[]} is INT8.
   */
  public void allToAll(byte[] send, byte[] recv) {
    allToAllImpl(send, recv, DType.INT8);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code int[]} (INT32). */
  public void allToAll(int[] send, int[] recv) {
    allToAllImpl(send, recv, DType.INT32);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code long[]} (INT64). */
  public void allToAll(long[] send, long[] recv) {
    allToAllImpl(send, recv, DType.INT64);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code float[]} (FLOAT32). */
  public void allToAll(float[] send, float[] recv) {
    allToAllImpl(send, recv, DType.FLOAT32);
  }

  /** {@link #allToAll(byte[], byte[])} for {@code double[]} (FLOAT64). */
  public void allToAll(double[] send, double[] recv) {
    allToAllImpl(send, recv, DType.FLOAT64);
  }

  /** {@link #allToAll(byte[], byte[])} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void allToAll(ByteBuffer send, ByteBuffer recv) {
    allToAllImpl(send, recv, DType.UINT8);
  }

  /**
   * {@link #allToAll(byte[], byte[])} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public void allToAll(ByteBuffer send, ByteBuffer recv, DType dtype) {
    allToAllImpl(send, recv, dtype);
  }

  /**
   * {@code root}'s {@code recv} (size &times; send elements) gets every rank's {@code send} in rank
   * order; {@code recv} is ignored (may be null) on the other ranks. {@code byte[]} is INT8.
   */
  public void gather(byte[] send, byte[] recv, int root) {
    gatherImpl(send, recv, DType.INT8, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code int[]} (INT32). */
  public void gather(int[] send, int[] recv, int root) {
    gatherImpl(send, recv, DType.INT32, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code long[]} (INT64). */
  public void gather(long[] send, long[] recv, int root) {
    gatherImpl(send, recv, DType.INT64, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code float[]} (FLOAT32). */
  public void gather(float[] send, float[] recv, int root) {
    gatherImpl(send, recv, DType.FLOAT32, root);
  }

  /** {@link #gather(byte[], byte[], int)} for {@code double[]} (FLOAT64). */
  public void gather(double[] send, double[] recv, int root) {
    gatherImpl(send, recv, DType.FLOAT64, root);
  }

  /** {@link #gather(byte[], byte[], int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void gather(ByteBuffer send, ByteBuffer recv, int root) {
    gatherImpl(send, recv, DType.UINT8, root);
  }

  /**
   * {@link #gather(byte[], byte[], int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public void gather(ByteBuffer send, ByteBuffer recv, DType dtype, int root) {
    gatherImpl(send, recv, dtype, root);
  }

  /**
   * Block r of {@code root}'s {@code send} (size &times; recv elements) goes to rank r's
   * {@code recv}; {@code send} is ignored (may be null) on the other ranks. {@code byte[]} is INT8.
   */
  public void scatter(byte[] send, byte[] recv, int root) {
    scatterImpl(send, recv, DType.INT8, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code int[]} (INT32). */
  public void scatter(int[] send, int[] recv, int root) {
    scatterImpl(send, recv, DType.INT32, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code long[]} (INT64). */
  public void scatter(long[] send, long[] recv, int root) {
    scatterImpl(send, recv, DType.INT64, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code float[]} (FLOAT32). */
  public void scatter(float[] send, float[] recv, int root) {
    scatterImpl(send, recv, DType.FLOAT32, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for {@code double[]} (FLOAT64). */
  public void scatter(double[] send, double[] recv, int root) {
    scatterImpl(send, recv, DType.FLOAT64, root);
  }

  /** {@link #scatter(byte[], byte[], int)} for a ByteBuffer of UINT8 (zero copy when direct). */
  public void scatter(ByteBuffer send, ByteBuffer recv, int root) {
    scatterImpl(send, recv, DType.UINT8, root);
  }

  /**
   * {@link #scatter(byte[], byte[], int)} for a ByteBuffer of {@code dtype} elements (zero
   * copy when direct).
   */
  public void scatter(ByteBuffer send, ByteBuffer recv, DType dtype, int root) {
    scatterImpl(send, recv, dtype, root);
  }

  // --- implementation ------------------------------------------------------------------------

  Orphans orphans() {
    return orphans;
  }

  /** hcomm_stream_create on this communicator (see {@link Stream}). */
  long createStream(int priority) {
    long h = handle.enter();
    try {
      return HcommNative.hcomm_stream_create(h, priority);
    } finally {
      handle.exit();
    }
  }

  private void checkOpen() {
    handle.enter();
    handle.exit();
  }

  /** A native call with this communicator's handle. */
  private interface NativeCall {
    void run(long h);
  }

  /** No hcomm_dtype_t: the library refuses a collective given it (see {@link #refused}). */
  private static final int BAD_DTYPE = -1;

  /**
   * A collective this binding refused by its own checks ({@code e}) never reached the library,
   * while the other ranks' calls of it did: so that it still takes its turn among the
   * communicator's collectives there (their call then fails at once with MISMATCH naming this
   * rank, and later calls stay paired), the library is handed the same collective with a dtype it
   * refuses in turn ({@code call}; hcomm.h). Returns {@code e}, to be thrown.
   */
  private HcommException refused(HcommException e, NativeCall call) {
    long h;
    try {
      h = handle.enter();
    } catch (HcommException closed) {
      return e;
    }
    try {
      call.run(h);
    } catch (HcommException expected) {
      // the library's refusal
    } finally {
      handle.exit();
    }
    return e;
  }

  /** Whether a nonblocking call works on a staged copy of {@code buf} (array, heap buffer). */
  private static boolean copied(Object buf) {
    return !(buf instanceof ByteBuffer) || Buffers.isHeap(buf);
  }

  private static int opCode(ReduceOp op) {
    if (op == null) {
      throw Buffers.invalid("op is null");
    }
    return op.code();
  }

  private void sendImpl(Object buf, DType dtype, int dst, int tag) {
    int n = Buffers.count(buf, dtype, false, "send: buf");
    Object v = Buffers.view(buf);
    long h = handle.enter();
    try {
      HcommNative.hcomm_send(v, n, dtype.code(), dst, tag, h);
    } finally {
      handle.exit();
    }
  }

  private int recvImpl(Object buf, DType dtype, int src, int tag) {
    int n = Buffers.count(buf, dtype, true, "recv: buf");
    if (src == ANY_SOURCE) {
      // hcomm_recv does not say who sent; a request does.
      try (Request r = irecvImpl(buf, dtype, src, tag)) {
        r.await();
        return r.source();
      }
    }
    Object v = Buffers.view(buf);
    long h = handle.enter();
    try {
      HcommNative.hcomm_recv(v, n, dtype.code(), src, tag, h);
      Buffers.writeBack(buf, v);
    } finally {
      handle.exit();
    }
    return src;
  }

  private Request isendImpl(Object buf, DType dtype, int dst, int tag) {
    int n = Buffers.count(buf, dtype, false, "isend: buf");
    ByteBuffer memory = Buffers.stable(buf, dtype, n, true);
    long h = handle.enter();
    try {
      long req = HcommNative.hcomm_java_isend(memory, n, dtype.code(), dst, tag, h);
      return new Request(this, req, memory, null, dtype, false);
    } finally {
      handle.exit();
    }
  }

  private Request irecvImpl(Object buf, DType dtype, int src, int tag) {
    int n = Buffers.count(buf, dtype, true, "irecv: buf");
    ByteBuffer memory = Buffers.stable(buf, dtype, n, false);
    Object target = copied(buf) ? Buffers.target(buf) : null;
    long h = handle.enter();
    try {
      long req = HcommNative.hcomm_java_irecv(memory, n, dtype.code(), src, tag, h);
      return new Request(this, req, memory, target, dtype, false);
    } finally {
      handle.exit();
    }
  }

  private void allReduceImpl(Object buf, DType dtype, ReduceOp op) {
    int n;
    int o;
    try {
      n = Buffers.count(buf, dtype, true, "allReduce: buf");
      o = opCode(op);
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_allreduce(null, null, 0, BAD_DTYPE, 0, h));
    }
    Object v = Buffers.view(buf);
    long h = handle.enter();
    try {
      HcommNative.hcomm_allreduce(v, v, n, dtype.code(), o, h);
      Buffers.writeBack(buf, v);
    } finally {
      handle.exit();
    }
  }

  private Request iallReduceImpl(Object buf, DType dtype, ReduceOp op) {
    int n;
    int o;
    ByteBuffer memory;
    try {
      n = Buffers.count(buf, dtype, true, "iallReduce: buf");
      o = opCode(op);
      memory = Buffers.stable(buf, dtype, n, true); // may fail: too large, out of memory
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_allreduce(null, null, 0, BAD_DTYPE, 0, h));
    }
    Object target = copied(buf) ? Buffers.target(buf) : null;
    long h = handle.enter();
    try {
      long req = HcommNative.hcomm_java_iallreduce(memory, memory, n, dtype.code(), o, h);
      return new Request(this, req, memory, target, dtype, true);
    } finally {
      handle.exit();
    }
  }

  private void broadcastImpl(Object buf, DType dtype, int root) {
    int n;
    try {
      n = Buffers.count(buf, dtype, true, "broadcast: buf");
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_broadcast(null, 0, BAD_DTYPE, 0, h));
    }
    Object v = Buffers.view(buf);
    long h = handle.enter();
    try {
      HcommNative.hcomm_broadcast(v, n, dtype.code(), root, h);
      Buffers.writeBack(buf, v);
    } finally {
      handle.exit();
    }
  }

  private void reduceImpl(Object buf, DType dtype, ReduceOp op, int root) {
    int n;
    int o;
    try {
      n = Buffers.count(buf, dtype, true, "reduce: buf");
      o = opCode(op);
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_reduce(null, null, 0, BAD_DTYPE, 0, 0, h));
    }
    Object v = Buffers.view(buf);
    long h = handle.enter();
    try {
      HcommNative.hcomm_reduce(v, v, n, dtype.code(), o, root, h);
      Buffers.writeBack(buf, v);
    } finally {
      handle.exit();
    }
  }

  /** Throws unless {@code have} >= {@code need} elements. */
  private static void checkRoom(String what, long have, long need, String why) {
    if (have < need) {
      throw Buffers.invalid(what + " holds " + have + " elements but needs " + need + " (" + why
          + ")");
    }
  }

  /** Elements per block of a buffer split into one block per rank. */
  private int blocks(String what, int n) {
    if (n % size != 0) {
      throw Buffers.invalid(what + " holds " + n + " elements, not a multiple of the "
          + size + " ranks");
    }
    return n / size;
  }

  private void allGatherImpl(Object send, Object recv, DType dtype) {
    int ns;
    try {
      ns = Buffers.count(send, dtype, false, "allGather: send");
      int nr = Buffers.count(recv, dtype, true, "allGather: recv");
      checkOpen();
      checkRoom("allGather: recv", nr, (long) size * ns, size + " ranks x " + ns);
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_allgather(null, null, 0, BAD_DTYPE, h));
    }
    Object vs = Buffers.view(send);
    Object vr = recv == send ? vs : Buffers.view(recv);
    long h = handle.enter();
    try {
      HcommNative.hcomm_allgather(vs, vr, ns, dtype.code(), h);
      Buffers.writeBack(recv, vr);
    } finally {
      handle.exit();
    }
  }

  private void reduceScatterImpl(Object send, Object recv, DType dtype, ReduceOp op) {
    int o;
    int block;
    try {
      int ns = Buffers.count(send, dtype, false, "reduceScatter: send");
      int nr = Buffers.count(recv, dtype, true, "reduceScatter: recv");
      o = opCode(op);
      checkOpen();
      block = blocks("reduceScatter: send", ns);
      checkRoom("reduceScatter: recv", nr, block, "one block of send");
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_reduce_scatter(null, null, 0, BAD_DTYPE, 0, h));
    }
    Object vs = Buffers.view(send);
    Object vr = recv == send ? vs : Buffers.view(recv);
    long h = handle.enter();
    try {
      HcommNative.hcomm_reduce_scatter(vs, vr, block, dtype.code(), o, h);
      Buffers.writeBack(recv, vr);
    } finally {
      handle.exit();
    }
  }

  private void allToAllImpl(Object send, Object recv, DType dtype) {
    int block;
    try {
      int ns = Buffers.count(send, dtype, false, "allToAll: send");
      int nr = Buffers.count(recv, dtype, true, "allToAll: recv");
      checkOpen();
      block = blocks("allToAll: send", ns);
      checkRoom("allToAll: recv", nr, ns, "as many as send");
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_alltoall(null, null, 0, BAD_DTYPE, h));
    }
    Object vs = Buffers.view(send);
    Object vr = recv == send ? vs : Buffers.view(recv);
    long h = handle.enter();
    try {
      HcommNative.hcomm_alltoall(vs, vr, block, dtype.code(), h);
      Buffers.writeBack(recv, vr);
    } finally {
      handle.exit();
    }
  }

  private void gatherImpl(Object send, Object recv, DType dtype, int root) {
    int ns;
    Object vr = null; // only the root's recv is used
    try {
      ns = Buffers.count(send, dtype, false, "gather: send");
      checkOpen();
      if (rank == root) {
        int nr = Buffers.count(recv, dtype, true, "gather: recv");
        checkRoom("gather: recv", nr, (long) size * ns, size + " ranks x " + ns);
        vr = Buffers.view(recv);
      }
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_gather(null, null, 0, BAD_DTYPE, 0, h));
    }
    Object vs = Buffers.view(send);
    long h = handle.enter();
    try {
      HcommNative.hcomm_gather(vs, vr, ns, dtype.code(), root, h);
      Buffers.writeBack(recv, vr);
    } finally {
      handle.exit();
    }
  }

  private void scatterImpl(Object send, Object recv, DType dtype, int root) {
    int nr;
    Object vs = null; // only the root's send is used
    try {
      nr = Buffers.count(recv, dtype, true, "scatter: recv");
      checkOpen();
      if (rank == root) {
        int ns = Buffers.count(send, dtype, false, "scatter: send");
        checkRoom("scatter: send", ns, (long) size * nr, size + " ranks x " + nr);
        vs = Buffers.view(send);
      }
    } catch (HcommException e) {
      throw refused(e, h -> HcommNative.hcomm_scatter(null, null, 0, BAD_DTYPE, 0, h));
    }
    Object vr = Buffers.view(recv);
    long h = handle.enter();
    try {
      HcommNative.hcomm_scatter(vs, vr, nr, dtype.code(), root, h);
      Buffers.writeBack(recv, vr);
    } finally {
      handle.exit();
    }
  }
}
