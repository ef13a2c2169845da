/* hcomm transport plugins: the versioned C table a transport fills in.
 *
 * A transport moves frames between this process and its peers. A frame is
 * an opaque header of host->header_bytes bytes (the library's protocol;
 * never looked into) followed by a payload of any length. The transport
 * knows nothing of tags, matching or collectives. The built-in transports,
 * shm and tcp, fill in this same table: the library drives every transport
 * through it.
 *
 * A plugin is a shared object that exports
 *
 *   const hcomm_transport_v1_t* hcomm_transport_plugin(void);
 *
 * returning a table that lives as long as the process. The library loads
 * the paths in the `plugins` configuration key (HCOMM_PLUGINS), colon-
 * separated, at init; the `transports` key then names the plugin's
 * transport like a built-in one. C++ authors may derive from
 * hcomm::Protocol instead (hcomm/protocol.hpp), which fills the table.
 *
 * Versions: the table begins with its ABI version and its size. A library
 * loads every table of a version it knows (a plugin built against version
 * 1 keeps loading in every later release) and refuses any other, naming
 * the plugin's path and both versions. Fields are only ever appended;
 * struct_size tells which a plugin has.
 *
 * The life of a transport in one job, as the library drives it:
 *   1. open(host, &state)           per job, before anything else
 *   2. publish(state, card)         what this rank tells the others
 *   3. can_reach(state, peer, ...)  for each peer, from the peer's card
 *   4. connect(state, peers, n)     with the peers routed to it (on every
 *                                   side: if rank a reaches b through this
 *                                   transport, b reaches a through it too)
 *   5. send / poll / ...            moving bytes, from any thread
 *   6. close(state)                 once nothing else runs
 * A rank whose peers all go other ways still calls 1-2 and 6; a transport
 * that cannot work on this rank says so from open or publish (with
 * HCOMM_ERR_NO_DEVICE and a reason through host->set_error) and is then
 * left out towards every peer, as it is where can_reach says 0.
 *
 * THREAD SAFETY: steps 1-4 and 6 run on one thread, one call at a time.
 * The functions of step 5 may be called from any number of threads at
 * once; the host's callbacks run on whichever thread calls poll (or send,
 * try_send_now, take_whole, poll_peer), and a transport must hold no lock
 * of its own while it runs a done callback or on_connection_lost (it may
 * hold a per-connection receive lock around on_frame/on_payload; the host
 * may call send from inside them).
 */
#ifndef HCOMM_HCOMM_TRANSPORT_H_
#define HCOMM_HCOMM_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>

#include "hcomm/hcomm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. */
#define HCOMM_TRANSPORT_ABI_VERSION 1

/* The symbol a plugin exports (see above). */
#define HCOMM_TRANSPORT_PLUGIN_SYMBOL "hcomm_transport_plugin"

/* Most bytes of a card (publish), the terminating NUL included. */
#define HCOMM_TRANSPORT_CARD_BYTES 256

/* What the library lends a transport for one job. Valid from open until
 * close; every function takes `ctx` first. */
typedef struct hcomm_transport_host_s {
  uint32_t abi_version; /* the library's HCOMM_TRANSPORT_ABI_VERSION */
  uint32_t struct_size; /* sizeof(hcomm_transport_host_t) as the library was built */
  int rank;             /* this rank, 0 <= rank < world_size */
  int world_size;
  size_t header_bytes;  /* every frame's header: carry it whole, opaque */
  const char* job_key;  /* unique among this host's jobs: name files after it */
  const char* host_id;  /* this rank's host identity (the host_id key) */
  const char* address;  /* an IP address of this host that the other ranks route to */
  int cpus_shared;      /* ranks of this host outnumber its CPUs (set before connect) */
  void* ctx;

  /* --- Setup (open, publish, connect) --- */

  /* Says why the call in progress fails; the library copies `message` and
   * puts it in the error it reports, after the transport's name. */
  void (*set_error)(void* ctx, const char* message);
  /* Publishes `len` bytes under `key` (a short name of the transport's
   * choosing) for the other ranks of the job to read with get. */
  hcomm_status_t (*put)(void* ctx, const char* key, const void* value, size_t len);
  /* Reads what rank `peer` put under `key`, waiting for it until the
   * init's deadline: its length goes to *len, and as much as fits to buf.
   * Fails (with its reason set) when the deadline passes or another
   * rank's init failed; the transport then returns that status. */
  hcomm_status_t (*get)(void* ctx, int peer, const char* key, void* buf, size_t cap,
                        size_t* len);
  /* Milliseconds left until the init's deadline (0 when it has passed). */
  int64_t (*time_left_ms)(void* ctx);
  /* HCOMM_SUCCESS while init may go on; else the status to fail with (its
   * reason set): another rank's init failed, or the deadline passed. For a
   * transport's own waits (accept, connect), between slices of them. */
  hcomm_status_t (*check)(void* ctx);
  /* Proves to the other end of the connected stream socket `fd` that this
   * rank holds the job's token, and checks that the other end does
   * (HMAC challenge and response, both ways; blocking, by the init's
   * deadline). The connecting side passes as_server = 0, the accepting
   * side 1. HCOMM_ERR_PERMISSION_DENIED: the other end is not of this job. */
  hcomm_status_t (*authenticate)(void* ctx, int fd, int as_server);

  /* --- Frames arriving (from the thread that polls) --- */

  /* A frame from `peer` has begun to arrive: returns where its payload of
   * `payload_len` bytes goes, or NULL to have the transport read and drop
   * it. Called for payload_len == 0 too (the result is then ignored). */
  void* (*on_frame)(void* ctx, int peer, const void* header, uint64_t payload_len);
  /* The payload of the frame on_frame announced is wholly in place. */
  void (*on_payload)(void* ctx, int peer, const void* header, uint64_t payload_len);
  /* A whole frame whose payload the transport holds at `payload` (valid
   * during the call only), instead of on_frame and on_payload. */
  void (*on_whole_frame)(void* ctx, int peer, const void* header, const void* payload,
                         uint64_t payload_len);
  /* The connection to `peer` ended (closed by the peer, broken, or failed
   * through fail_peer); `why` says how. Once per connection. Everything
   * that wholly arrived before is delivered first. */
  void (*on_connection_lost)(void* ctx, int peer, const char* why);
} hcomm_transport_host_t;

/* Runs once for every frame that send accepted: when it has left
 * (HCOMM_SUCCESS: handed to the kernel or the peer) or can never leave
 * (HCOMM_ERR_PEER_FAILURE and why), unless cancel took it back. May run
 * before send returns. */
typedef void (*hcomm_transport_done_fn)(void* arg, hcomm_status_t status, const char* why);

/* Offered a whole frame by take_whole: returns 1 to consume it, 0 to leave
 * it to poll. */
typedef int (*hcomm_transport_take_fn)(void* arg, const void* header, const void* payload,
                                       uint64_t payload_len);

typedef struct hcomm_transport_v1_s {
  uint32_t abi_version; /* HCOMM_TRANSPORT_ABI_VERSION: 1 */
  uint32_t struct_size; /* sizeof(hcomm_transport_v1_t) */
  const char* name;     /* what the transports key calls it: [a-z0-9_]{1,31} */

  /* --- Setup: required --- */

  /* Makes this job's instance; *state goes to every call below. */
  hcomm_status_t (*open)(const hcomm_transport_host_t* host, void** state);
  /* Writes this rank's card (a NUL-terminated string of at most cap - 1
   * bytes, e.g. the address it listens on) for the others' can_reach.
   * HCOMM_ERR_NO_DEVICE (with a reason): not usable on this rank. */
  hcomm_status_t (*publish)(void* state, char* card, size_t cap);
  /* 1 if this rank can reach `peer` (on host `peer_host`) through this
   * transport given the peer's card, else 0. Must be symmetric. */
  int (*can_reach)(void* state, int peer, const char* peer_host, const char* peer_card);
  /* Connects to every rank in peers[0..npeers) (ascending); collective
   * with them: each of them calls connect with this rank among its peers.
   * Blocks until all are connected or the init's deadline
   * (host->time_left_ms). */
  hcomm_status_t (*connect)(void* state, const int* peers, int npeers);
  /* Frees the instance: every connection closed, nothing queued runs its
   * done callback any more. No other call runs during or after it. */
  void (*close)(void* state);

  /* --- Moving bytes: required --- */

  /* Queues a frame to `peer`: the header (host->header_bytes) is copied,
   * the payload is not and must stay valid until `done` runs. `done` may
   * be NULL (nothing to report). *handle identifies the frame for cancel.
   * Frames to one peer leave in the order they were queued. */
  hcomm_status_t (*send)(void* state, int peer, const void* header, const void* payload,
                         size_t len, hcomm_transport_done_fn done, void* done_arg,
                         uint64_t* handle);
  /* Takes back a queued frame: 1 if none of it had left (dropped; its done
   * never runs), 0 if part or all of it has left (the transport copies
   * what is left, so the payload may be reused at once, and done still
   * runs). */
  int (*cancel)(void* state, int peer, uint64_t handle);
  /* Moves bytes for up to timeout_ns (0: only what is ready now), running
   * the host's callbacks. Returns the number of events handled. */
  int (*poll)(void* state, int64_t timeout_ns);
  /* Frames queued and not yet handed on, over every connection. */
  size_t (*pending_sends)(void* state);
  /* Closes the write side towards `peer` once everything queued has left. */
  void (*close_write)(void* state, int peer);
  /* Tears every connection down at once (abort): the peers see them fail. */
  void (*shutdown_all)(void* state);
  /* Fails the connection to `peer` as if it had broken, with `why`. */
  void (*fail_peer)(void* state, int peer, const char* why);

  /* --- Optional: NULL where a transport has nothing better --- */

  /* Payload bytes up to which the library sends a message whole with its
   * header rather than by rendezvous, where its own limit (64 KiB) would
   * cost more here; 0: the library's limit. */
  size_t (*eager_bytes)(void* state);
  /* Sends at once, with no callback, if the frame can leave whole now
   * (nothing queued ahead on the connection and room for it): 1 when the
   * payload is no longer needed, 0 when nothing was sent (use send). */
  int (*try_send_now)(void* state, int peer, const void* header, const void* payload,
                      size_t len);
  /* For a receiver waiting on one peer: if the next frame from `peer` is
   * whole and readable in place, offers it to `take`, consuming it if take
   * returns 1. Returns 1 when consumed, 0 when nothing from `peer` is there
   * yet, -1 otherwise (poll deals with it). take refuses payloads above
   * max_payload. */
  int (*take_whole)(void* state, int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                    void* take_arg);
  /* Progress on the connection to `peer` alone, without blocking. */
  int (*poll_peer)(void* state, int peer);
  /* poll for a background thread: sleeps at once when nothing is ready. */
  int (*poll_quiet)(void* state, int64_t timeout_ns);
  /* 1 if poll with a timeout spins by itself before it sleeps. */
  int (*spins_before_sleep)(void* state);
  /* One wait for two transports: open_wake_fd returns an fd (or -1) that
   * turns readable when work arrives here while armed (arm_wake returns 0,
   * arming nothing, when work is ready already; disarm_wake after);
   * watch_fd(fd) makes poll with a timeout also return once `fd` is
   * readable (1 if supported). */
  int (*open_wake_fd)(void* state);
  int (*arm_wake)(void* state);
  void (*disarm_wake)(void* state);
  int (*watch_fd)(void* state, int fd);
} hcomm_transport_v1_t;

/* What a plugin exports. */
typedef const hcomm_transport_v1_t* (*hcomm_transport_plugin_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HCOMM_HCOMM_TRANSPORT_H_ */
