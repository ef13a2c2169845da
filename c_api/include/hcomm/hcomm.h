/* hcomm: point-to-point messages and collectives between processes.
 *
 * This header is the whole public surface of libhcomm_c. It is C99 and needs
 * no C++ to include. The contract it implements is ../shared/API.md; names,
 * signatures and numeric values here are binding.
 *
 * Example (two ranks started by `hcomm_run -n 2 -- ./app`):
 *
 *   hcomm_comm_t comm;
 *   if (hcomm_comm_init(NULL, &comm) != HCOMM_SUCCESS) {
 *     fprintf(stderr, "init: %s\n", hcomm_last_error());
 *     return 1;
 *   }
 *   int rank;
 *   hcomm_comm_rank(comm, &rank);
 *   int32_t v = 42;
 *   if (rank == 0) hcomm_send(&v, 1, HCOMM_INT32, 1, 7, comm);
 *   else           hcomm_recv(&v, 1, HCOMM_INT32, 0, 7, comm);
 *   hcomm_comm_destroy(comm);
 *
 * Conventions that hold for every function below:
 * - Every function returns hcomm_status_t; results come back through out
 *   pointers. Nothing aborts the process, prints to stdout, or blocks past the
 *   communicator's `timeout_ms`.
 * - After a failed call, hcomm_last_error() describes it (rank, peer, tag,
 *   sizes). A failed call changes nothing unless its comment says otherwise.
 * - Destroy/free calls accept NULL and do nothing; every other call given a
 *   NULL handle returns HCOMM_ERR_INVALID_ARGUMENT.
 * - `count` is in elements of `dtype`, never bytes.
 * - fork(): communicators and requests belong to the process that made
 *   them. In the child of a fork they answer hcomm_comm_rank, _size and
 *   _transport; every other call with one returns
 *   HCOMM_ERR_INVALID_ARGUMENT (the message names the fork), except that
 *   hcomm_comm_destroy and hcomm_request_free succeed at once and touch
 *   nothing the parent uses, so a child that exits (atexit handlers and
 *   all) leaves the parent's job alone. The child closes its copies of the
 *   parent's sockets at once, so its peers still see the parent die.
 *   Channels are shared between processes and work in the child; its close
 *   of one the parent created leaves the name.
 */
#ifndef HCOMM_HCOMM_H_
#define HCOMM_HCOMM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HCOMM_API __attribute__((visibility("default")))
#else
#define HCOMM_API
#endif

#define HCOMM_VERSION_MAJOR 0
#define HCOMM_VERSION_MINOR 4
#define HCOMM_VERSION_PATCH 0

/* Status codes. Append-only; values are part of the ABI. */
typedef enum {
  HCOMM_SUCCESS = 0,
  HCOMM_ERR_INVALID_ARGUMENT = 1,
  HCOMM_ERR_NO_DEVICE = 2,          /* requested transport/device absent */
  HCOMM_ERR_OUT_OF_MEM = 3,
  HCOMM_ERR_TIMEOUT = 4,            /* deadline passed; message says what was pending */
  HCOMM_ERR_PEER_FAILURE = 5,       /* a peer died or its connection broke */
  HCOMM_ERR_MISMATCH = 6,           /* message larger than recv buffer, or ranks disagree */
  HCOMM_ERR_ABORTED = 7,            /* hcomm_comm_abort was called */
  HCOMM_ERR_UNAVAILABLE = 8,        /* rendezvous store unreachable, or init could not complete */
  HCOMM_ERR_PERMISSION_DENIED = 9,  /* peer or store rejected our job token */
  HCOMM_ERR_NOT_SUPPORTED = 10,
  HCOMM_ERR_INTERNAL = 11
} hcomm_status_t;

/* Element types. Append-only. */
typedef enum {
  HCOMM_INT8 = 0,
  HCOMM_UINT8 = 1,
  HCOMM_INT32 = 2,
  HCOMM_UINT32 = 3,
  HCOMM_INT64 = 4,
  HCOMM_UINT64 = 5,
  HCOMM_FLOAT16 = 6,
  HCOMM_BFLOAT16 = 7,
  HCOMM_FLOAT32 = 8,
  HCOMM_FLOAT64 = 9
} hcomm_dtype_t;

/* Reduction operations. Append-only. */
typedef enum {
  HCOMM_SUM = 0,
  HCOMM_PROD = 1,
  HCOMM_MIN = 2,
  HCOMM_MAX = 3,
  HCOMM_AVG = 4
} hcomm_reduce_op_t;

#define HCOMM_ANY_SOURCE (-1)
#define HCOMM_ANY_TAG (-1)
#define HCOMM_UNDEFINED (-1) /* color for hcomm_comm_split: not a member */

typedef struct hcomm_config_s* hcomm_config_t;
typedef struct hcomm_comm_s* hcomm_comm_t;
typedef struct hcomm_request_s* hcomm_request_t;

/* ------------------------------------------------------------------------ */
/* Library                                                                  */
/* ------------------------------------------------------------------------ */

/* The name of a status code, e.g. "HCOMM_ERR_TIMEOUT"; "HCOMM_UNKNOWN_STATUS"
 * for a value that is not a status. Never NULL; the string is static.
 * THREAD SAFETY: safe from any thread. */
HCOMM_API const char* hcomm_status_string(hcomm_status_t status);

/* A human-readable message for the last failed hcomm call on the calling
 * thread ("" if none failed yet). Never NULL. The string stays valid until
 * the next hcomm call on this thread.
 * THREAD SAFETY: thread-local; each thread sees its own last error. */
HCOMM_API const char* hcomm_last_error(void);

/* The library's version (compare with the HCOMM_VERSION_* macros of the
 * header that the program was compiled with). Any pointer may be NULL.
 * THREAD SAFETY: safe from any thread. */
HCOMM_API hcomm_status_t hcomm_version(int* major, int* minor, int* patch);

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

/* Creates an empty configuration. *out is owned by the caller until
 * hcomm_config_destroy. Keys not set fall back to the environment
 * (HCOMM_<KEY>, then torchrun / Open MPI / PMI / Slurm variables).
 * Errors: INVALID_ARGUMENT (out is NULL). */
HCOMM_API hcomm_status_t hcomm_config_create(hcomm_config_t* out);

/* Sets one key; an explicit set wins over the environment. Keys: rank,
 * world_size, store_addr, job_token, timeout_ms, transports, algo, host_id,
 * plugins (transport plugins to load at init: hcomm/hcomm_transport.h),
 * fusion_bytes ("auto" or bytes; see "Streams, priorities and fusion"),
 * chunk_bytes, profile ("1": record spans; rank 0 writes profile_file at
 * the world communicator's destroy), profile_max_events, profile_file,
 * compression ("none", "fp16", "bf16", "delta", "fp16,delta", "bf16,delta":
 * docs/compression.md), delta_cache_bytes, switch_id, topology (a file
 * mapping hosts to switches: docs/topology.md), switch_link_mbit (the
 * bandwidth between switches the cost model assumes; 0: as between hosts),
 * unexpected_bytes (the most bytes of unreceived messages a rank holds from
 * any one peer; docs/reliability.md, "Flow control"), flight_recorder (how
 * many of its last operations a rank keeps for hang reports; 0: none),
 * flight_recorder_file (where a rank dumps them as JSON on a timeout or
 * failure and at destroy; "%r" becomes the rank; docs/reliability.md,
 * "Flight recorder").
 * The value is validated now. Neither string is retained.
 * Errors: INVALID_ARGUMENT (NULL argument, unknown key, or a value that does
 * not parse; the message names the key).
 * THREAD SAFETY: one configuration must not be used from two threads at once. */
HCOMM_API hcomm_status_t hcomm_config_set(hcomm_config_t cfg, const char* key,
                                          const char* value);

/* Releases a configuration. NULL is a no-op. The handle keeps a few bytes
 * so that a later call with it, destroy included, returns INVALID_ARGUMENT. */
HCOMM_API hcomm_status_t hcomm_config_destroy(hcomm_config_t cfg);

/* ------------------------------------------------------------------------ */
/* Communicators                                                            */
/* ------------------------------------------------------------------------ */

/* Joins the job: connects to the rendezvous store (rank 0 serves it), proves
 * the job token, exchanges addresses and connects to every peer. cfg may be
 * NULL (everything from the environment); it is not retained.
 * BLOCKS until every rank has joined or `timeout_ms` passes. COLLECTIVE over
 * all ranks of the job.
 * Errors: INVALID_ARGUMENT (bad or missing rank/world_size/store_addr, a
 * world_size other than rank 0's, a rank another process claimed first, a
 * TCP congestion control the kernel refuses), UNAVAILABLE ("k of n ranks
 * joined; missing: ..."), PERMISSION_DENIED (the store or a peer refused our
 * job token), NO_DEVICE (a `transports` name no transport has, a plugin
 * that cannot be loaded, or a rank no allowed transport reaches, each named
 * with the reason), NOT_SUPPORTED (a plugin of a transport ABI version this
 * library does not know), PEER_FAILURE (another rank's init failed; its
 * error is quoted).
 * THREAD SAFETY: safe from any thread; each call makes a new communicator. */
HCOMM_API hcomm_status_t hcomm_comm_init(hcomm_config_t cfg, hcomm_comm_t* out);

/* This process's rank / the number of ranks. Never blocks. */
HCOMM_API hcomm_status_t hcomm_comm_rank(hcomm_comm_t comm, int* rank);
HCOMM_API hcomm_status_t hcomm_comm_size(hcomm_comm_t comm, int* size);

/* Changes a setting of a live communicator. Only `timeout_ms`, `algo`,
 * `fusion_bytes`, `compression` and `delta_cache_bytes` may be changed after
 * init; they apply to calls started (streams made) afterwards (change
 * `algo` and `compression` at the same point on every rank: collectives
 * whose ranks differ in either fail with MISMATCH or pair wrongly).
 * Errors: INVALID_ARGUMENT (unknown key, bad value, or a key fixed at init). */
HCOMM_API hcomm_status_t hcomm_comm_set(hcomm_comm_t comm, const char* key,
                                        const char* value);

/* The transport that carries messages between this rank and `peer` of
 * comm: "shm", "tcp", or "self" (peer == own rank). *name is a static
 * string. Never blocks.
 * Errors: INVALID_ARGUMENT (NULL comm or name, peer out of range). */
HCOMM_API hcomm_status_t hcomm_comm_transport(hcomm_comm_t comm, int peer, const char** name);

/* Aborts the communicator: every pending and later operation on it returns
 * HCOMM_ERR_ABORTED promptly (a receive whose message is already arriving
 * completes when it has arrived). Aborting the world closes the job's
 * connections: every group made from it fails as well, and peers see this
 * rank fail (HCOMM_ERR_PEER_FAILURE). Aborting a group ends that group
 * alone; its members are told, and there the group's collectives,
 * point-to-point operations with this rank and receives from
 * HCOMM_ANY_SOURCE pending then fail with HCOMM_ERR_PEER_FAILURE. The
 * world and other groups carry on.
 * THREAD SAFETY: may be called from any thread, while other threads are
 * blocked in calls on the same communicator. */
HCOMM_API hcomm_status_t hcomm_comm_abort(hcomm_comm_t comm);

/* Destroys the communicator. Local, not collective: first waits (up to
 * `timeout_ms`) until this rank's own sends have been delivered, so that
 * peers never see a clean exit as a failure; then fails requests still
 * pending with HCOMM_ERR_ABORTED and releases everything. An iallreduce
 * still pending fails so at once (the other members' part of it fails with
 * HCOMM_ERR_PEER_FAILURE, as after an abort). Requests made on this
 * communicator stay valid handles until hcomm_request_free, and may be
 * waited on from another thread while the communicator is destroyed. Groups
 * made from a communicator outlive it: the connections they share close
 * with the last of them destroyed.
 * Everything is released whatever it returns. It returns, for the last
 * communicator over the connections: HCOMM_ERR_PEER_FAILURE where a rank
 * this one sent messages to failed before confirming it had read them all
 * (the message names it: the last of them may be lost), or
 * HCOMM_ERR_TIMEOUT where this rank's sends were still not delivered at
 * the deadline (named; they are dropped); else HCOMM_SUCCESS.
 * NULL is a no-op. The handle keeps a few bytes so that a later call with
 * it, destroy included, returns INVALID_ARGUMENT ("comm is NULL or
 * destroyed"). In the child of a fork, destroying the parent's
 * communicator only lets go of it (see the conventions above).
 * THREAD SAFETY: no other thread may be using the communicator. */
HCOMM_API hcomm_status_t hcomm_comm_destroy(hcomm_comm_t comm);

/* ------------------------------------------------------------------------ */
/* Point-to-point                                                           */
/* ------------------------------------------------------------------------ */
/* Messages between one (sender, receiver, tag, communicator) are received in
 * the order they were sent. Tags are >= 0; receives may use HCOMM_ANY_SOURCE
 * and HCOMM_ANY_TAG. A receive's `count` is its capacity: a message that fits
 * completes with its own count (hcomm_request_info); a larger one fails the
 * receive with HCOMM_ERR_MISMATCH and writes nothing, while the matching send
 * completes normally. A send to oneself works.
 *
 * Errors common to all: INVALID_ARGUMENT (NULL handle, NULL buffer with
 * count > 0, peer out of range, unknown dtype, negative tag other than
 * HCOMM_ANY_TAG on a receive), TIMEOUT (names peer, tag and bytes pending),
 * PEER_FAILURE (the peer died or its connection broke), ABORTED.
 * THREAD SAFETY: one communicator may be used for point-to-point from
 * several threads at once. */

/* Blocking send; returns once the message has been handed to the transport
 * (the buffer may be reused). */
HCOMM_API hcomm_status_t hcomm_send(const void* buf, size_t count, hcomm_dtype_t dtype,
                                    int peer, int tag, hcomm_comm_t comm);

/* Blocking receive into buf (capacity count elements). At timeout_ms it
 * returns TIMEOUT; if a message was still arriving then, the connection to
 * its sender is closed (a stream cut mid-message cannot resume), so that
 * nothing is written into buf after the call returns. */
HCOMM_API hcomm_status_t hcomm_recv(void* buf, size_t count, hcomm_dtype_t dtype,
                                    int peer, int tag, hcomm_comm_t comm);

/* Nonblocking send/receive. *req is owned by the caller until
 * hcomm_request_free; buf must stay valid until the request completes. */
HCOMM_API hcomm_status_t hcomm_isend(const void* buf, size_t count, hcomm_dtype_t dtype,
                                     int peer, int tag, hcomm_comm_t comm,
                                     hcomm_request_t* req);
HCOMM_API hcomm_status_t hcomm_irecv(void* buf, size_t count, hcomm_dtype_t dtype,
                                     int peer, int tag, hcomm_comm_t comm,
                                     hcomm_request_t* req);

/* Waits for a request and returns the operation's own status. BLOCKS up to
 * the communicator's timeout_ms as it was when the request was started (a
 * later hcomm_comm_set does not change it); on HCOMM_ERR_TIMEOUT the
 * request is still pending and may be waited on again. The request stays
 * valid until hcomm_request_free. */
HCOMM_API hcomm_status_t hcomm_wait(hcomm_request_t req);

/* Never blocks. Sets *done to 1 once the operation has ended and then returns
 * its status; otherwise *done = 0 and HCOMM_SUCCESS. */
HCOMM_API hcomm_status_t hcomm_test(hcomm_request_t req, int* done);

/* Waits for every request, even after one fails; returns the first failure
 * or HCOMM_SUCCESS. reqs may be NULL only when n == 0. */
HCOMM_API hcomm_status_t hcomm_waitall(int n, hcomm_request_t* reqs);

/* After completion: the source (for a send: the destination), the tag and
 * the element count that arrived (for a send: the count sent; for a receive
 * that failed with HCOMM_ERR_MISMATCH, too small for the message: its
 * sender, its tag and 0). Any out pointer may be NULL. Errors: INVALID_ARGUMENT (NULL request, or a request
 * that has not completed). */
HCOMM_API hcomm_status_t hcomm_request_info(hcomm_request_t req, int* source, int* tag,
                                            size_t* count);

/* Releases a request. A request still pending is cancelled if no data has
 * reached it yet, otherwise it completes in the background (its buffer must
 * then stay valid until the communicator is destroyed). NULL is a no-op.
 * A freed request must not be used again; a call that does gets
 * INVALID_ARGUMENT ("req was freed already") unless more than 1024 other
 * requests were freed since, after which its handle may name a new one.
 * In the child of a fork, freeing the parent's request only lets go of it
 * (see the conventions above). */
HCOMM_API hcomm_status_t hcomm_request_free(hcomm_request_t req);

/* ------------------------------------------------------------------------ */
/* Shared-memory channel                                                    */
/* ------------------------------------------------------------------------ */
/* A named FIFO of messages in host shared memory, for processes on one
 * machine that share no communicator (e.g. a parameter server handing
 * weights to local workers). No communicator is involved.
 *
 * Channel "x" is the POSIX shared-memory object "/hcomm-ch-x" (the file
 * /dev/shm/hcomm-ch-x, mode 0600: only the same user can open it). It holds
 * a ring of capacity_bytes bytes (rounded up to a multiple of 8, at least
 * 16); a message of n bytes takes 8 + (n rounded up to 8) bytes of it, so
 * the largest message is the capacity less 8. Any number of threads and
 * processes may write and read at once: each message is delivered whole to
 * exactly one reader, and the messages of one writer are read in the order
 * they were written. A process killed in the middle of a call leaves the
 * channel usable: a message it was writing never appears, one it was
 * reading stays in the channel.
 *
 * timeout_ms: 0 tries once; > 0 waits up to that many milliseconds for room
 * (write) or for a message (read); negative is HCOMM_ERR_INVALID_ARGUMENT
 * (no call waits forever). Taking the channel's lock, which another call
 * holds only while it copies one message, may wait up to 1 s even when
 * timeout_ms is 0. */
typedef struct hcomm_channel_s* hcomm_channel_t;

/* Creates (create != 0) or opens (create == 0) the channel `name`: 1 to 200
 * characters, no '/'. Creating needs 1 <= capacity_bytes <= 2^30, reserves
 * that much of /dev/shm now, and fails if the name exists (a creator that
 * died without closing leaves its file behind: remove it). Opening ignores
 * capacity_bytes and checks that the segment is an hcomm channel. name is
 * not retained. *out is owned by the caller until hcomm_channel_close; it is
 * set to NULL when the call fails.
 * BLOCKS only while opening a channel that its creator is still setting up
 * (at most about 1 s).
 * Errors: INVALID_ARGUMENT (NULL name or out; name empty, with '/' or too
 * long; capacity_bytes out of range when creating; the name already exists
 * when creating; the segment is not an hcomm channel), NO_DEVICE (opening a
 * name that does not exist: no creator has opened it yet, or it has closed),
 * PERMISSION_DENIED (another user's segment), OUT_OF_MEM (/dev/shm is full),
 * UNAVAILABLE (the segment was never initialised: its creator died while
 * creating it).
 * THREAD SAFETY: safe from any thread; each call makes a new handle. */
HCOMM_API hcomm_status_t hcomm_channel_open(const char* name, size_t capacity_bytes, int create,
                                            hcomm_channel_t* out);

/* Appends one message: nbytes bytes copied from data. data may be NULL only
 * when nbytes == 0 (an empty message is still a message); it is not
 * retained.
 * BLOCKS while the channel lacks room for the message, up to timeout_ms.
 * Errors: INVALID_ARGUMENT (NULL ch; NULL data with nbytes > 0; negative
 * timeout_ms; a message larger than the capacity less 8 bytes, which could
 * never fit: returned at once), TIMEOUT (still no room; names the channel,
 * the bytes needed and the bytes free), INTERNAL (the shared memory has
 * been corrupted).
 * THREAD SAFETY: any number of threads and processes may write to and read
 * from one channel at once, also through one handle. */
HCOMM_API hcomm_status_t hcomm_channel_write(hcomm_channel_t ch, const void* data, size_t nbytes,
                                             int timeout_ms);

/* Reads the next message; *nbytes gets its size. A message larger than cap is
 * HCOMM_ERR_MISMATCH and stays in the channel.
 * On success the message is removed and copied to buf (capacity cap bytes;
 * buf may be NULL only when cap == 0). On MISMATCH nothing is copied or
 * removed, but *nbytes is set to the message's size, so a caller can grow
 * its buffer and read again (with several readers, another one may take
 * the message first). nbytes must not be NULL; on other errors it is left
 * alone.
 * BLOCKS while the channel is empty, up to timeout_ms.
 * Errors: INVALID_ARGUMENT (NULL ch or nbytes, NULL buf with cap > 0,
 * negative timeout_ms), TIMEOUT (still empty; names the channel), MISMATCH
 * (names the message's size and cap), INTERNAL (corrupted shared memory).
 * THREAD SAFETY: as hcomm_channel_write. */
HCOMM_API hcomm_status_t hcomm_channel_read(hcomm_channel_t ch, void* buf, size_t cap,
                                            size_t* nbytes, int timeout_ms);

/* Releases the handle and unmaps the channel. The creator's close also
 * removes the name: handles already open elsewhere keep working until they
 * are closed (messages left when the last one closes are lost); opening the
 * name afterwards is NO_DEVICE, creating it makes a new channel. Other
 * closes only unmap, the close of the creator's handle in the child of a
 * fork among them. NULL is a no-op. The channel is released even when an
 * error is returned; the handle keeps a few bytes so that a later call with
 * it, close included, returns INVALID_ARGUMENT.
 * Errors: INTERNAL (removing the name or unmapping failed).
 * THREAD SAFETY: no other thread may be using the handle. */
HCOMM_API hcomm_status_t hcomm_channel_close(hcomm_channel_t ch);

/* ------------------------------------------------------------------------ */
/* Groups                                                                   */
/* ------------------------------------------------------------------------ */

/* Splits `comm`: ranks passing the same color form a new communicator,
 * ordered by (key, rank in comm). A rank passing HCOMM_UNDEFINED gets
 * *out == NULL and HCOMM_SUCCESS. The new communicator shares comm's
 * connections (no store needed) and has its own message space: its messages
 * never match another communicator's. *out is owned by the caller until
 * hcomm_comm_destroy.
 * COLLECTIVE over comm (every rank calls it); BLOCKS up to timeout_ms.
 * Errors: INVALID_ARGUMENT (NULL comm or out), TIMEOUT, PEER_FAILURE. */
HCOMM_API hcomm_status_t hcomm_comm_split(hcomm_comm_t comm, int color, int key,
                                          hcomm_comm_t* out);

/* Makes a communicator of ranks[0..nranks-1] (ranks of comm, no
 * duplicates); new rank = index in `ranks`. Ranks not listed get
 * *out == NULL and HCOMM_SUCCESS. Every rank of comm must call it with the
 * same list.
 * COLLECTIVE over comm; BLOCKS up to timeout_ms.
 * Errors: INVALID_ARGUMENT (NULL pointers, a rank out of range or listed
 * twice), MISMATCH (ranks passed different lists), TIMEOUT, PEER_FAILURE. */
HCOMM_API hcomm_status_t hcomm_comm_create_group(hcomm_comm_t comm, const int* ranks,
                                                 int nranks, hcomm_comm_t* out);

/* After a peer failure: the surviving ranks agree on who is gone and get a new communicator of
   the living ranks (ranks renumbered in their old order). Collective over the survivors.
 *
 * Every surviving rank of comm calls it (typically after an operation
 * returned HCOMM_ERR_PEER_FAILURE). The survivors exchange which ranks they
 * know failed until all hold the same set (a rank failing meanwhile joins
 * it), then form the new communicator of the others, which works like one
 * made by hcomm_comm_split: point-to-point and every collective, its own
 * message space, comm's connections, no store (the store's host may be
 * among the dead). Without any failure it returns a communicator of every
 * rank of comm. A rank that dies after the survivors agreed stays a member:
 * the new communicator's collectives then fail with PEER_FAILURE, and the
 * survivors shrink it in turn. comm itself is unchanged (its collectives
 * keep failing); destroy it when done with it. *out is owned by the caller
 * until hcomm_comm_destroy.
 * comm and out must not be NULL; *out is NULL on failure.
 * COLLECTIVE over the survivors of comm; BLOCKS until they agree, up to
 * comm's timeout_ms.
 * Errors: INVALID_ARGUMENT (NULL or destroyed comm, NULL out), TIMEOUT (a
 * survivor did not take part; names the ranks it waited for and those known
 * failed), PEER_FAILURE (the survivors count this rank among the failed),
 * ABORTED (comm was aborted or its world destroyed).
 * THREAD SAFETY: as hcomm_comm_split; other threads' calls on comm may run
 * meanwhile (they fail as before). */
HCOMM_API hcomm_status_t hcomm_comm_shrink(hcomm_comm_t comm, hcomm_comm_t* out);

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */
/* Every rank of the communicator calls each collective, in the same order,
 * with matching count, dtype, op and root. `sendbuf == recvbuf` means in
 * place. Counts are per rank as in NCCL; count == 0 is valid and still
 * synchronises. HCOMM_AVG divides by the communicator size (integer types
 * truncate); FLOAT16/BFLOAT16 reductions accumulate in float32. For
 * recvbuf of reduce/gather and sendbuf of scatter only the root's pointer
 * is used; others may pass NULL.
 * The algorithm (ring, tree, direct) is chosen per call by message size,
 * rank count and transport, or forced with the `algo` key; HCOMM_DEBUG=INFO
 * logs each choice with its estimated costs.
 * BLOCKS until this rank's part is done or timeout_ms passes.
 * Errors: INVALID_ARGUMENT (NULL comm, NULL buffer with count > 0, unknown
 * dtype/op, root out of range), TIMEOUT (names the collective and its
 * sequence number), MISMATCH (ranks disagree on the call, or another rank
 * refused its call with INVALID_ARGUMENT), PEER_FAILURE, ABORTED. A call
 * refused with INVALID_ARGUMENT on a valid comm still takes its turn among
 * the collectives, so that later calls stay paired across ranks.
 * THREAD SAFETY: one collective at a time per communicator. */

/* recvbuf[i] = op over ranks of sendbuf[i], i < count, on every rank. */
HCOMM_API hcomm_status_t hcomm_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                         hcomm_dtype_t dtype, hcomm_reduce_op_t op,
                                         hcomm_comm_t comm);

/* buf (count elements) of rank `root` is copied to every rank's buf. */
HCOMM_API hcomm_status_t hcomm_broadcast(void* buf, size_t count, hcomm_dtype_t dtype, int root,
                                         hcomm_comm_t comm);

/* recvbuf of `root` = op over ranks of sendbuf. */
HCOMM_API hcomm_status_t hcomm_reduce(const void* sendbuf, void* recvbuf, size_t count,
                                      hcomm_dtype_t dtype, hcomm_reduce_op_t op, int root,
                                      hcomm_comm_t comm);

/* recvbuf (size * sendcount elements) = every rank's sendbuf, in rank order.
 * In place: sendbuf == recvbuf, with this rank's part already at
 * recvbuf + rank * sendcount. */
HCOMM_API hcomm_status_t hcomm_allgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                         hcomm_dtype_t dtype, hcomm_comm_t comm);

/* sendbuf has size * recvcount elements; rank r's recvbuf = op over ranks of
 * block r of sendbuf. In place: sendbuf == recvbuf (the result goes to the
 * first recvcount elements). */
HCOMM_API hcomm_status_t hcomm_reduce_scatter(const void* sendbuf, void* recvbuf,
                                              size_t recvcount, hcomm_dtype_t dtype,
                                              hcomm_reduce_op_t op, hcomm_comm_t comm);

/* Block j (count elements) of sendbuf goes to rank j; block i of recvbuf
 * comes from rank i. Both have size * count elements. */
HCOMM_API hcomm_status_t hcomm_alltoall(const void* sendbuf, void* recvbuf, size_t count,
                                        hcomm_dtype_t dtype, hcomm_comm_t comm);

/* Root's recvbuf (size * sendcount elements) = every rank's sendbuf in rank
 * order. In place at the root: sendbuf == recvbuf, its part already at
 * recvbuf + root * sendcount. */
HCOMM_API hcomm_status_t hcomm_gather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                      hcomm_dtype_t dtype, int root, hcomm_comm_t comm);

/* Block r (recvcount elements) of root's sendbuf goes to rank r's recvbuf.
 * In place at the root: sendbuf == recvbuf (its block stays in sendbuf). */
HCOMM_API hcomm_status_t hcomm_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                       hcomm_dtype_t dtype, int root, hcomm_comm_t comm);

/* Returns once every rank has entered the barrier. */
HCOMM_API hcomm_status_t hcomm_barrier(hcomm_comm_t comm);

/* Starts an allreduce that runs in the background and completes through
 * hcomm_wait/hcomm_test; both buffers must stay valid until then. Its place
 * in the order of collectives is the moment of this call. *req is owned by
 * the caller until hcomm_request_free. */
HCOMM_API hcomm_status_t hcomm_iallreduce(const void* sendbuf, void* recvbuf, size_t count,
                                          hcomm_dtype_t dtype, hcomm_reduce_op_t op,
                                          hcomm_comm_t comm, hcomm_request_t* req);

/* ------------------------------------------------------------------------ */
/* Streams, priorities and fusion                                           */
/* ------------------------------------------------------------------------ */
/* A stream is an ordered queue of operations on one communicator, run by a
 * thread of the library in the background (CUDA/NCCL stream semantics on
 * CPU hosts). Each stream is a matching context of its own: its operations
 * never match those of other streams or of the communicator's blocking
 * calls, so streams run concurrently without any agreement across ranks on
 * how their operations interleave.
 *  - Within a stream, operations run in enqueue order, one after another,
 *    and every rank enqueues the same operations in the same order (a
 *    disagreement is MISMATCH, naming the stream).
 *  - Buffers belong to the library from enqueue until the operation has
 *    run: an hcomm_event_synchronize on an event recorded after it, or
 *    hcomm_stream_synchronize, says so.
 *  - A failed operation makes the rest of its stream fail with the same
 *    status (its collectives still take their turns, so the other ranks'
 *    streams fail at once rather than time out). hcomm_stream_synchronize
 *    returns that status, with hcomm_last_error() naming the stream and the
 *    operation, and clears it.
 *  - Priority: a higher number is served first where streams compete; 0 is
 *    the default.
 *  - Fusion: allreduces queued back to back on one stream with the same
 *    dtype and op run as one operation, up to `fusion_bytes` (a
 *    configuration key; 0 turns fusion off). Only work already queued is
 *    fused: nothing waits on a timer, so a lone operation is never delayed.
 * THREAD SAFETY: enqueue, synchronize and query from any thread; destroy
 * from one thread with no other call on the stream in flight. */
typedef struct hcomm_stream_s* hcomm_stream_t;
typedef struct hcomm_event_s* hcomm_event_t;

typedef enum {
  HCOMM_OP_SEND = 0,
  HCOMM_OP_RECV = 1,
  HCOMM_OP_ALLREDUCE = 2,
  HCOMM_OP_BROADCAST = 3,
  HCOMM_OP_REDUCE = 4,
  HCOMM_OP_ALLGATHER = 5,
  HCOMM_OP_REDUCE_SCATTER = 6,
  HCOMM_OP_ALLTOALL = 7,
  HCOMM_OP_GATHER = 8,
  HCOMM_OP_SCATTER = 9,
  HCOMM_OP_BARRIER = 10
} hcomm_op_kind_t;

/* One operation, with the arguments the blocking call of its kind takes:
 * SEND reads sendbuf, RECV and BROADCAST write recvbuf (BROADCAST's `buf`),
 * the others as their blocking calls. Counts as in those calls. Initialize
 * with HCOMM_OP_INIT, then set the fields. */
typedef struct {
  size_t struct_size;  /* sizeof(hcomm_op_t) as the caller was built; set by HCOMM_OP_INIT */
  hcomm_op_kind_t kind;
  const void* sendbuf;
  void* recvbuf;
  size_t count;
  hcomm_dtype_t dtype;
  hcomm_reduce_op_t op;
  int peer_or_root; /* peer of SEND/RECV, root of rooted collectives */
  int tag;          /* SEND/RECV only */
} hcomm_op_t;
/* { sizeof(hcomm_op_t) } with every other field zero, spelled out so that
 * -Wextra (-Wmissing-field-initializers) has nothing to say. */
#define HCOMM_OP_INIT { sizeof(hcomm_op_t), HCOMM_OP_SEND, NULL, NULL, 0, HCOMM_INT8, HCOMM_SUM, 0, 0 }

/* COLLECTIVE over comm: every rank makes its streams of comm in the same
 * order (the k-th stream of each rank meets the k-th of the others). The
 * stream keeps working after comm is destroyed; destroy it too. */
HCOMM_API hcomm_status_t hcomm_stream_create(hcomm_comm_t comm, int priority,
                                             hcomm_stream_t* out);
/* Queues *op (copied) and returns at once. Errors: INVALID_ARGUMENT for
 * the arguments its blocking call would refuse (a refused collective still
 * takes its turn on the stream, so that the other ranks' fail at once
 * with MISMATCH), and for a struct_size below this header's first
 * hcomm_op_t or fields this library does not know set to nonzero. */
HCOMM_API hcomm_status_t hcomm_stream_enqueue(hcomm_stream_t s, const hcomm_op_t* op);
/* Queues fn(arg), called on the stream's thread in order with its
 * operations (skipped, not called, once the stream has failed). */
HCOMM_API hcomm_status_t hcomm_stream_enqueue_host(hcomm_stream_t s, void (*fn)(void* arg),
                                                   void* arg);
/* BLOCKS until everything queued before the call has run; returns the
 * stream's first error since the last synchronize and clears it. TIMEOUT
 * once the stream went the communicator's timeout_ms without finishing an
 * operation (the message says what runs and what is queued). */
HCOMM_API hcomm_status_t hcomm_stream_synchronize(hcomm_stream_t s);
/* *idle = 1 when everything queued so far has run, else 0. Never blocks. */
HCOMM_API hcomm_status_t hcomm_stream_query(hcomm_stream_t s, int* idle);
/* Runs what is queued, then ends the stream. Returns an error not yet
 * returned by hcomm_stream_synchronize, if any. NULL is a no-op. */
HCOMM_API hcomm_status_t hcomm_stream_destroy(hcomm_stream_t s);

/* An event is a mark in a stream's queue: recorded on a stream, it is
 * reached when everything queued on that stream before the record has
 * run. An event never recorded counts as reached. */
HCOMM_API hcomm_status_t hcomm_event_create(hcomm_event_t* out);
/* Moves the mark to the end of what is queued on s now. Returns at once. */
HCOMM_API hcomm_status_t hcomm_event_record(hcomm_event_t e, hcomm_stream_t s);
/* s's later operations wait until e's latest mark (recorded before this
 * call) is reached. Returns at once. */
HCOMM_API hcomm_status_t hcomm_stream_wait_event(hcomm_stream_t s, hcomm_event_t e);
/* BLOCKS until e's latest mark is reached. Returns the error of that
 * stream if an operation before the mark failed (without clearing it),
 * TIMEOUT as hcomm_stream_synchronize. */
HCOMM_API hcomm_status_t hcomm_event_synchronize(hcomm_event_t e);
/* *done = 1 when e's latest mark is reached, else 0. Never blocks. */
HCOMM_API hcomm_status_t hcomm_event_query(hcomm_event_t e, int* done);
/* Streams waiting on e keep their marks. NULL is a no-op. */
HCOMM_API hcomm_status_t hcomm_event_destroy(hcomm_event_t e);

/* ------------------------------------------------------------------------ */
/* Communication scheduler                                                  */
/* ------------------------------------------------------------------------ */
/* Tasks with priorities and dependencies; each task is a function that
 * queues operations on the stream it is given (one stream per priority,
 * made by the scheduler). A task has ended when its function has returned
 * and what it queued has run.
 *  - A task is ready when every task it depends on has ended. The order in
 *    which tasks start is fixed before a run: the policy picks among the
 *    ready tasks (default: higher priority first, then registration
 *    order), as if each task ended when it started. Tasks of equal
 *    priority run one at a time in that order; tasks of different
 *    priorities run at once, each on its priority's thread and stream.
 *  - An unknown dependency, a duplicate id or a cycle is
 *    HCOMM_ERR_INVALID_ARGUMENT naming the tasks. A failing task fails the
 *    run with its status and a message naming it; tasks that depend on it
 *    do not run, the others do.
 *  - Before each run the ranks compare their orders (one small allgather):
 *    ranks that registered other tasks, or whose policies order them
 *    differently, all get HCOMM_ERR_MISMATCH naming the first two tasks
 *    that differ, and nothing runs.
 * THREAD SAFETY: one thread per scheduler; task functions run on the
 * scheduler's threads (one per priority), policies on the caller's. */
typedef struct hcomm_scheduler_s* hcomm_scheduler_t;
typedef struct {
  const char* id;
  int priority;
  int registration_index; /* 0 for the first task added */
} hcomm_task_info_t;
/* Policy: given the ready tasks, return the index (into ready[]) of the one
 * to start next. It must be deterministic (see above). */
typedef int (*hcomm_policy_fn)(const hcomm_task_info_t* ready, int nready, void* user);

/* COLLECTIVE over comm. The scheduler keeps working after comm is
 * destroyed; destroy it too. */
HCOMM_API hcomm_status_t hcomm_scheduler_create(hcomm_comm_t comm, hcomm_scheduler_t* out);
/* id (copied) must be new and not empty; depends_on lists ndeps ids
 * (copied), checked by hcomm_scheduler_run. fn(stream, arg) queues the
 * task's operations on `stream` (valid during the call; do not destroy
 * it) and returns HCOMM_SUCCESS or the error that fails the task. */
HCOMM_API hcomm_status_t hcomm_scheduler_add_task(hcomm_scheduler_t s, const char* id,
                                                  int priority, const char* const* depends_on,
                                                  int ndeps,
                                                  hcomm_status_t (*fn)(hcomm_stream_t stream,
                                                                       void* arg),
                                                  void* arg);
/* fn NULL: the default policy. */
HCOMM_API hcomm_status_t hcomm_scheduler_set_policy(hcomm_scheduler_t s, hcomm_policy_fn fn,
                                                    void* user);
/* COLLECTIVE: runs every task once (see above); may be called again. */
HCOMM_API hcomm_status_t hcomm_scheduler_run(hcomm_scheduler_t s);
/* Ends the scheduler and its streams. NULL is a no-op. */
HCOMM_API hcomm_status_t hcomm_scheduler_destroy(hcomm_scheduler_t s);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HCOMM_HCOMM_H_ */
