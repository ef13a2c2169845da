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
#define HCOMM_VERSION_MINOR 1
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
 * world_size, store_addr, job_token, timeout_ms, transports, algo, host_id.
 * The value is validated now. Neither string is retained.
 * Errors: INVALID_ARGUMENT (NULL argument, unknown key, or a value that does
 * not parse; the message names the key).
 * THREAD SAFETY: one configuration must not be used from two threads at once. */
HCOMM_API hcomm_status_t hcomm_config_set(hcomm_config_t cfg, const char* key,
                                          const char* value);

/* Releases a configuration. NULL is a no-op. */
HCOMM_API hcomm_status_t hcomm_config_destroy(hcomm_config_t cfg);

/* ------------------------------------------------------------------------ */
/* Communicators                                                            */
/* ------------------------------------------------------------------------ */

/* Joins the job: connects to the rendezvous store (rank 0 serves it), proves
 * the job token, exchanges addresses and connects to every peer. cfg may be
 * NULL (everything from the environment); it is not retained.
 * BLOCKS until every rank has joined or `timeout_ms` passes. COLLECTIVE over
 * all ranks of the job.
 * Errors: INVALID_ARGUMENT (bad or missing rank/world_size/store_addr),
 * UNAVAILABLE ("k of n ranks joined; missing: ..."), PERMISSION_DENIED (the
 * store or a peer refused our job token), NO_DEVICE (no allowed transport).
 * THREAD SAFETY: safe from any thread; each call makes a new communicator. */
HCOMM_API hcomm_status_t hcomm_comm_init(hcomm_config_t cfg, hcomm_comm_t* out);

/* This process's rank / the number of ranks. Never blocks. */
HCOMM_API hcomm_status_t hcomm_comm_rank(hcomm_comm_t comm, int* rank);
HCOMM_API hcomm_status_t hcomm_comm_size(hcomm_comm_t comm, int* size);

/* Changes a setting of a live communicator. Only `timeout_ms` may be changed
 * after init; it applies to calls started afterwards.
 * Errors: INVALID_ARGUMENT (unknown key, bad value, or a key fixed at init). */
HCOMM_API hcomm_status_t hcomm_comm_set(hcomm_comm_t comm, const char* key,
                                        const char* value);

/* Aborts the communicator: every pending and later operation on it returns
 * HCOMM_ERR_ABORTED promptly. Local (peers see our connections close).
 * THREAD SAFETY: may be called from any thread, while other threads are
 * blocked in calls on the same communicator. */
HCOMM_API hcomm_status_t hcomm_comm_abort(hcomm_comm_t comm);

/* Destroys the communicator. Local, not collective: first waits (up to
 * `timeout_ms`) until this rank's own sends have been delivered, so that
 * peers never see a clean exit as a failure; then fails requests still
 * pending with HCOMM_ERR_ABORTED and releases everything. Requests made on
 * this communicator stay valid handles until hcomm_request_free.
 * NULL is a no-op. The handle must not be used afterwards.
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

/* Blocking receive into buf (capacity count elements). */
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
 * the communicator's timeout_ms; on HCOMM_ERR_TIMEOUT the request is still
 * pending and may be waited on again. The request stays valid until
 * hcomm_request_free. */
HCOMM_API hcomm_status_t hcomm_wait(hcomm_request_t req);

/* Never blocks. Sets *done to 1 once the operation has ended and then returns
 * its status; otherwise *done = 0 and HCOMM_SUCCESS. */
HCOMM_API hcomm_status_t hcomm_test(hcomm_request_t req, int* done);

/* Waits for every request, even after one fails; returns the first failure
 * or HCOMM_SUCCESS. reqs may be NULL only when n == 0. */
HCOMM_API hcomm_status_t hcomm_waitall(int n, hcomm_request_t* reqs);

/* After completion: the source (for a send: the destination), the tag and
 * the element count that arrived (for a send: the count sent). Any out
 * pointer may be NULL. Errors: INVALID_ARGUMENT (NULL request, or a request
 * that has not completed). */
HCOMM_API hcomm_status_t hcomm_request_info(hcomm_request_t req, int* source, int* tag,
                                            size_t* count);

/* Releases a request. A request still pending is cancelled if no data has
 * reached it yet, otherwise it completes in the background (its buffer must
 * then stay valid until the communicator is destroyed). NULL is a no-op. */
HCOMM_API hcomm_status_t hcomm_request_free(hcomm_request_t req);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HCOMM_HCOMM_H_ */
