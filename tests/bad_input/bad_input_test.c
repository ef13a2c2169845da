/* bad_input_test: a catalogue of bad input across the public C API.
 *
 * A C99 program over hcomm.h, linked against libhcomm_c.so, in a one-rank
 * world (rank 0 of 1: no store, no peers) plus a second communicator split
 * from it. Every case calls one function with one bad argument and checks:
 *   - the exact status code the header documents;
 *   - that hcomm_last_error() was set by this call (before each case a
 *     marker error is planted; it must be gone) and is not empty;
 *   - that the message names the offending argument (or value).
 * After the catalogue, the communicators must still work: a send to self
 * and its receive, an allreduce, a barrier, a broadcast on the split
 * communicator.
 *
 * Prints one line per case ("ok NN: ..." or "FAIL NN: ..."), then
 * "bad_input: N cases, F failed". Exit status 1 if any case failed.
 *
 * Destroyed handles (API.md: INVALID_ARGUMENT) come last: a destroyed
 * communicator or configuration, a closed channel and a freed request, used
 * again and destroyed again; and an address that was never a request.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hcomm/hcomm.h"

static int g_cases = 0;
static int g_failed = 0;
static hcomm_config_t g_marker_cfg = NULL;
static hcomm_channel_t g_ch = NULL;

/* The channel's creator removes its name on close, also when a REQUIRE
 * ends the test early. */
static void CloseChannel(void) {
  hcomm_channel_close(g_ch);
  g_ch = NULL;
}

#define MARKER "zz_marker_of_the_previous_case"

/* Plants a known last error so that a case can tell whether its own call
 * set one. */
static void PlantMarker(void) {
  if (hcomm_config_set(g_marker_cfg, MARKER, "1") != HCOMM_ERR_INVALID_ARGUMENT ||
      strstr(hcomm_last_error(), MARKER) == NULL) {
    fprintf(stderr, "FAIL: cannot plant the marker error (\"%s\")\n", hcomm_last_error());
    exit(1);
  }
}

static void Check(const char* what, const char* call, hcomm_status_t got, hcomm_status_t want,
                  const char* needle) {
  const char* err = hcomm_last_error();
  const char* problem = NULL;
  ++g_cases;
  if (got != want) {
    problem = "wrong status";
  } else if (err == NULL || err[0] == '\0') {
    problem = "hcomm_last_error() is empty";
  } else if (strstr(err, MARKER) != NULL) {
    problem = "hcomm_last_error() was not set by this call";
  } else if (strstr(err, needle) == NULL) {
    problem = "the message does not name the offending argument";
  }
  if (problem == NULL) {
    printf("ok %2d: %-44s %s: %s\n", g_cases, what, hcomm_status_string(got), err);
  } else {
    ++g_failed;
    printf(
        "FAIL %2d: %s: %s\n        call: %s\n        got %s, wanted %s; wanted \"%s\" in \"%s\"\n",
        g_cases, what, problem, call, hcomm_status_string(got), hcomm_status_string(want), needle,
        err ? err : "(null)");
  }
  fflush(stdout);
}

/* One case: `call` must return `code` with `needle` in the last error. */
#define CASE(what, call, code, needle)           \
  do {                                           \
    hcomm_status_t st_;                          \
    PlantMarker();                               \
    st_ = (call);                                \
    Check((what), #call, st_, (code), (needle)); \
  } while (0)

#define BAD HCOMM_ERR_INVALID_ARGUMENT

/* A precondition of the test itself (not a case). */
#define REQUIRE(cond)                                                              \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "FAIL: line %d: %s (last error: \"%s\")\n", __LINE__, #cond, \
              hcomm_last_error());                                                 \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

int main(void) {
  hcomm_config_t cfg = NULL;
  hcomm_config_t bad_cfg = NULL;
  hcomm_comm_t comm = NULL;
  hcomm_comm_t half = NULL;
  hcomm_comm_t out = NULL;
  hcomm_request_t req = NULL;
  hcomm_request_t reqs[2] = {NULL, NULL};
  hcomm_channel_t ch_out = (hcomm_channel_t)&g_cases; /* must be reset to NULL */
  const char* name = NULL;
  int32_t a[4] = {1, 2, 3, 4};
  int32_t b[4] = {0, 0, 0, 0};
  int rank = -1;
  int done = 0;
  size_t n = 0;
  char chname[64];
  char long_name[202];
  const int dup_ranks[2] = {0, 0};
  const int far_ranks[2] = {0, 5};
  const int neg_ranks[1] = {-1};

  /* Nothing from the environment may leak into the configurations. */
  unsetenv("HCOMM_RANK");
  unsetenv("HCOMM_WORLD_SIZE");
  unsetenv("HCOMM_STORE_ADDR");

  REQUIRE(hcomm_config_create(&g_marker_cfg) == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_create(&cfg) == HCOMM_SUCCESS);

  /* ---- Configuration ---- */
  CASE("config_create: out NULL", hcomm_config_create(NULL), BAD, "out is NULL");
  CASE("config_set: cfg NULL", hcomm_config_set(NULL, "rank", "0"), BAD, "cfg is NULL");
  CASE("config_set: key NULL", hcomm_config_set(cfg, NULL, "0"), BAD, "key is NULL");
  CASE("config_set: value NULL", hcomm_config_set(cfg, "rank", NULL), BAD, "value");
  CASE("config_set: unknown key", hcomm_config_set(cfg, "colour", "red"), BAD, "colour");
  CASE("config_set: empty key", hcomm_config_set(cfg, "", "1"), BAD, "unknown config key ''");
  CASE("config_set: timeout_ms=abc", hcomm_config_set(cfg, "timeout_ms", "abc"), BAD,
       "timeout_ms='abc'");
  CASE("config_set: timeout_ms=-5", hcomm_config_set(cfg, "timeout_ms", "-5"), BAD,
       "timeout_ms='-5'");
  CASE("config_set: timeout_ms=0", hcomm_config_set(cfg, "timeout_ms", "0"), BAD, "timeout_ms='0'");
  CASE("config_set: timeout_ms overflows int64",
       hcomm_config_set(cfg, "timeout_ms", "99999999999999999999"), BAD, "timeout_ms=");
  CASE("config_set: world_size=0", hcomm_config_set(cfg, "world_size", "0"), BAD, "world_size='0'");
  CASE("config_set: rank=-1", hcomm_config_set(cfg, "rank", "-1"), BAD, "rank='-1'");
  CASE("config_set: rank=' 1' (space)", hcomm_config_set(cfg, "rank", " 1"), BAD, "rank=' 1'");
  CASE("config_set: store_addr=nohost", hcomm_config_set(cfg, "store_addr", "nohost"), BAD,
       "store_addr");
  CASE("config_set: store_addr port 70000", hcomm_config_set(cfg, "store_addr", "127.0.0.1:70000"),
       BAD, "store_addr");
  CASE("config_set: transports=tcp;shm", hcomm_config_set(cfg, "transports", "tcp;shm"), BAD,
       "transports='tcp;shm'");
  CASE("config_set: plugins=a.so::b.so", hcomm_config_set(cfg, "plugins", "a.so::b.so"), BAD,
       "plugins='a.so::b.so'");
  CASE("config_set: transports=tcp,tcp", hcomm_config_set(cfg, "transports", "tcp,tcp"), BAD,
       "appears twice");
  CASE("config_set: algo=fast", hcomm_config_set(cfg, "algo", "fast"), BAD, "algo='fast'");
  CASE("config_set: host_id empty", hcomm_config_set(cfg, "host_id", ""), BAD, "host_id");

  /* ---- Init ---- */
  REQUIRE(hcomm_config_create(&bad_cfg) == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_set(bad_cfg, "rank", "1") == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_set(bad_cfg, "world_size", "1") == HCOMM_SUCCESS);
  CASE("comm_init: out NULL", hcomm_comm_init(cfg, NULL), BAD, "out is NULL");
  out = (hcomm_comm_t)&g_cases;
  CASE("comm_init: rank >= world_size", hcomm_comm_init(bad_cfg, &out), BAD, "rank 1");
  REQUIRE(out == NULL); /* documented: *out is NULL after a failed init */
  CASE("comm_init: rank and world_size missing", hcomm_comm_init(cfg, &out), BAD, "world_size");
  /* A transport's name parses whatever it is; init says whether one has it. */
  REQUIRE(hcomm_config_set(bad_cfg, "rank", "0") == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_set(bad_cfg, "transports", "foo") == HCOMM_SUCCESS);
  CASE("comm_init: transports=foo", hcomm_comm_init(bad_cfg, &out), HCOMM_ERR_NO_DEVICE,
       "no transport is named 'foo'");
  REQUIRE(out == NULL);
  REQUIRE(hcomm_config_set(bad_cfg, "transports", "tcp") == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_set(bad_cfg, "plugins", "/nonexistent/libhcomm_x.so") == HCOMM_SUCCESS);
  CASE("comm_init: plugins=/nonexistent/libhcomm_x.so", hcomm_comm_init(bad_cfg, &out),
       HCOMM_ERR_NO_DEVICE, "plugin /nonexistent/libhcomm_x.so cannot be loaded");
  REQUIRE(out == NULL);
  REQUIRE(hcomm_config_destroy(bad_cfg) == HCOMM_SUCCESS);

  /* A failed set changed nothing: rank stays 0 after a refused rank=-1. */
  REQUIRE(hcomm_config_set(cfg, "rank", "0") == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_set(cfg, "rank", "-1") == BAD);
  REQUIRE(hcomm_config_set(cfg, "world_size", "1") == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_set(cfg, "timeout_ms", "20000") == HCOMM_SUCCESS);
  REQUIRE(hcomm_comm_init(cfg, &comm) == HCOMM_SUCCESS);
  REQUIRE(hcomm_comm_rank(comm, &rank) == HCOMM_SUCCESS && rank == 0);
  REQUIRE(hcomm_comm_split(comm, 3, 0, &half) == HCOMM_SUCCESS && half != NULL);

  /* ---- Communicator queries and settings ---- */
  CASE("comm_rank: comm NULL", hcomm_comm_rank(NULL, &rank), BAD, "comm is NULL");
  CASE("comm_rank: rank NULL", hcomm_comm_rank(comm, NULL), BAD, "rank is NULL");
  CASE("comm_size: size NULL", hcomm_comm_size(comm, NULL), BAD, "size is NULL");
  CASE("comm_set: comm NULL", hcomm_comm_set(NULL, "timeout_ms", "5"), BAD, "comm is NULL");
  CASE("comm_set: key NULL", hcomm_comm_set(comm, NULL, "5"), BAD, "key is NULL");
  CASE("comm_set: value NULL", hcomm_comm_set(comm, "timeout_ms", NULL), BAD, "value");
  CASE("comm_set: unknown key", hcomm_comm_set(comm, "colour", "red"), BAD, "colour");
  CASE("comm_set: rank is fixed at init", hcomm_comm_set(comm, "rank", "0"), BAD, "'rank'");
  CASE("comm_set: store_addr is fixed at init", hcomm_comm_set(comm, "store_addr", "127.0.0.1:1"),
       BAD, "'store_addr'");
  CASE("comm_set: timeout_ms=abc", hcomm_comm_set(comm, "timeout_ms", "abc"), BAD,
       "timeout_ms='abc'");
  CASE("comm_set: timeout_ms=-5", hcomm_comm_set(comm, "timeout_ms", "-5"), BAD, "timeout_ms='-5'");
  CASE("comm_transport: peer out of range", hcomm_comm_transport(comm, 1, &name), BAD, "peer 1");
  CASE("comm_transport: peer negative", hcomm_comm_transport(comm, -1, &name), BAD, "peer -1");
  CASE("comm_transport: name NULL", hcomm_comm_transport(comm, 0, NULL), BAD, "name is NULL");
  CASE("comm_abort: comm NULL", hcomm_comm_abort(NULL), BAD, "comm is NULL");

  /* ---- Point-to-point ---- */
  CASE("send: comm NULL", hcomm_send(a, 1, HCOMM_INT32, 0, 0, NULL), BAD, "comm is NULL");
  CASE("send: buf NULL with count 4", hcomm_send(NULL, 4, HCOMM_INT32, 0, 0, comm), BAD,
       "buf is NULL");
  CASE("send: peer out of range", hcomm_send(a, 1, HCOMM_INT32, 1, 0, comm), BAD, "peer 1");
  CASE("send: peer HCOMM_ANY_SOURCE", hcomm_send(a, 1, HCOMM_INT32, HCOMM_ANY_SOURCE, 0, comm), BAD,
       "peer -1");
  CASE("send: dtype 99", hcomm_send(a, 1, (hcomm_dtype_t)99, 0, 0, comm), BAD, "dtype 99");
  CASE("send: dtype -1", hcomm_send(a, 1, (hcomm_dtype_t)-1, 0, 0, comm), BAD, "dtype -1");
  CASE("send: negative tag", hcomm_send(a, 1, HCOMM_INT32, 0, -1, comm), BAD, "tag -1");
  CASE("send: count SIZE_MAX (int32)", hcomm_send(a, SIZE_MAX, HCOMM_INT32, 0, 0, comm), BAD,
       "count");
  /* count * 1 fits in size_t, but no buffer holds SIZE_MAX bytes. */
  CASE("send: count SIZE_MAX (int8) to self", hcomm_send(a, SIZE_MAX, HCOMM_INT8, 0, 0, comm), BAD,
       "count");
  CASE("recv: tag -2", hcomm_recv(b, 1, HCOMM_INT32, 0, -2, comm), BAD, "tag -2");
  CASE("recv: peer -2", hcomm_recv(b, 1, HCOMM_INT32, -2, 0, comm), BAD, "peer -2");
  CASE("recv: buf NULL with count 1", hcomm_recv(NULL, 1, HCOMM_INT32, 0, 0, comm), BAD,
       "buf is NULL");
  CASE("recv: count SIZE_MAX (float64)", hcomm_recv(b, SIZE_MAX, HCOMM_FLOAT64, 0, 0, comm), BAD,
       "count");
  CASE("isend: req NULL", hcomm_isend(a, 1, HCOMM_INT32, 0, 0, comm, NULL), BAD, "req is NULL");
  CASE("irecv: req NULL", hcomm_irecv(b, 1, HCOMM_INT32, 0, 0, comm, NULL), BAD, "req is NULL");
  CASE("irecv: dtype 10", hcomm_irecv(b, 1, (hcomm_dtype_t)10, 0, 0, comm, &req), BAD, "dtype 10");
  REQUIRE(req == NULL);
  CASE("wait: req NULL", hcomm_wait(NULL), BAD, "req is NULL");
  CASE("test: req NULL", hcomm_test(NULL, &done), BAD, "req is NULL");
  CASE("waitall: n < 0", hcomm_waitall(-1, reqs), BAD, "n is -1");
  CASE("waitall: reqs NULL with n 2", hcomm_waitall(2, NULL), BAD, "reqs is NULL");
  CASE("waitall: reqs[0] NULL", hcomm_waitall(2, reqs), BAD, "reqs[0]");
  CASE("request_info: req NULL", hcomm_request_info(NULL, NULL, NULL, &n), BAD, "req is NULL");

  /* A receive that nothing matches stays incomplete. */
  REQUIRE(hcomm_irecv(b, 1, HCOMM_INT32, 0, 99, comm, &req) == HCOMM_SUCCESS);
  CASE("test: done NULL", hcomm_test(req, NULL), BAD, "done is NULL");
  CASE("request_info: incomplete request", hcomm_request_info(req, NULL, NULL, &n), BAD,
       "not completed");
  reqs[0] = req;
  CASE("waitall: reqs[1] NULL after a valid one", hcomm_waitall(2, reqs), BAD, "reqs[1]");
  REQUIRE(hcomm_request_free(req) == HCOMM_SUCCESS); /* cancels it */
  req = NULL;
  reqs[0] = NULL;

  /* ---- Groups ---- */
  CASE("comm_split: comm NULL", hcomm_comm_split(NULL, 0, 0, &out), BAD, "comm is NULL");
  CASE("comm_split: out NULL", hcomm_comm_split(comm, 0, 0, NULL), BAD, "out is NULL");
  CASE("comm_split: color -5", hcomm_comm_split(comm, -5, 0, &out), BAD, "color -5");
  CASE("create_group: comm NULL", hcomm_comm_create_group(NULL, dup_ranks, 1, &out), BAD,
       "comm is NULL");
  CASE("create_group: out NULL", hcomm_comm_create_group(comm, dup_ranks, 1, NULL), BAD,
       "out is NULL");
  CASE("create_group: ranks NULL", hcomm_comm_create_group(comm, NULL, 2, &out), BAD,
       "ranks is NULL");
  CASE("create_group: nranks -1", hcomm_comm_create_group(comm, dup_ranks, -1, &out), BAD,
       "nranks");
  CASE("create_group: duplicate rank", hcomm_comm_create_group(comm, dup_ranks, 2, &out), BAD,
       "twice");
  CASE("create_group: rank out of range", hcomm_comm_create_group(comm, far_ranks, 2, &out), BAD,
       "ranks[1]");
  CASE("create_group: negative rank", hcomm_comm_create_group(comm, neg_ranks, 1, &out), BAD,
       "ranks[0]");
  CASE("comm_shrink: comm NULL", hcomm_comm_shrink(NULL, &out), BAD, "comm is NULL");
  CASE("comm_shrink: out NULL", hcomm_comm_shrink(comm, NULL), BAD, "out is NULL");

  /* ---- Collectives ---- */
  CASE("allreduce: comm NULL", hcomm_allreduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, NULL), BAD,
       "comm is NULL");
  CASE("allreduce: op 99", hcomm_allreduce(a, b, 4, HCOMM_INT32, (hcomm_reduce_op_t)99, comm), BAD,
       "op 99");
  CASE("allreduce: op -1", hcomm_allreduce(a, b, 4, HCOMM_INT32, (hcomm_reduce_op_t)-1, comm), BAD,
       "op -1");
  CASE("allreduce: dtype 99", hcomm_allreduce(a, b, 4, (hcomm_dtype_t)99, HCOMM_SUM, comm), BAD,
       "dtype 99");
  CASE("allreduce: sendbuf NULL", hcomm_allreduce(NULL, b, 4, HCOMM_INT32, HCOMM_SUM, comm), BAD,
       "sendbuf is NULL");
  CASE("allreduce: recvbuf NULL", hcomm_allreduce(a, NULL, 4, HCOMM_INT32, HCOMM_SUM, comm), BAD,
       "recvbuf is NULL");
  CASE("allreduce: count SIZE_MAX", hcomm_allreduce(a, b, SIZE_MAX, HCOMM_INT32, HCOMM_SUM, comm),
       BAD, "count");
  CASE("broadcast: root 1 of 1", hcomm_broadcast(a, 4, HCOMM_INT32, 1, comm), BAD, "root 1");
  CASE("broadcast: root -1", hcomm_broadcast(a, 4, HCOMM_INT32, -1, comm), BAD, "root -1");
  CASE("reduce: root 7 (split comm)", hcomm_reduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, 7, half), BAD,
       "root 7");
  CASE("gather: root -3", hcomm_gather(a, b, 1, HCOMM_INT32, -3, comm), BAD, "root -3");
  CASE("scatter: root 2", hcomm_scatter(a, b, 1, HCOMM_INT32, 2, comm), BAD, "root 2");
  CASE("allgather: recvbuf NULL", hcomm_allgather(a, NULL, 1, HCOMM_INT32, comm), BAD,
       "recvbuf is NULL");
  CASE("reduce_scatter: op 5",
       hcomm_reduce_scatter(a, b, 1, HCOMM_INT32, (hcomm_reduce_op_t)5, comm), BAD, "op 5");
  CASE("alltoall: count SIZE_MAX", hcomm_alltoall(a, b, SIZE_MAX, HCOMM_INT8, comm), BAD, "count");
  CASE("barrier: comm NULL", hcomm_barrier(NULL), BAD, "comm is NULL");
  CASE("iallreduce: req NULL", hcomm_iallreduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, comm, NULL), BAD,
       "req is NULL");

  /* ---- Shared-memory channel ---- */
  {
    /* Unique also inside a PID namespace (Bazel's sandbox: always the same pid). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(chname, sizeof(chname), "bad-input-%ld-%ld-%ld", (long)getpid(), (long)ts.tv_sec,
             (long)ts.tv_nsec);
  }
  memset(long_name, 'x', 201);
  long_name[201] = '\0';
  CASE("channel_open: out NULL", hcomm_channel_open(chname, 64, 1, NULL), BAD, "out is NULL");
  CASE("channel_open: name NULL", hcomm_channel_open(NULL, 64, 1, &ch_out), BAD, "name is NULL");
  REQUIRE(ch_out == NULL); /* documented: *out is NULL after a failure */
  CASE("channel_open: name with '/'", hcomm_channel_open("a/b", 64, 1, &ch_out), BAD, "'/'");
  CASE("channel_open: empty name", hcomm_channel_open("", 64, 1, &ch_out), BAD, "name is empty");
  CASE("channel_open: 201-character name", hcomm_channel_open(long_name, 64, 1, &ch_out), BAD,
       "201 characters");
  CASE("channel_open: capacity 0", hcomm_channel_open(chname, 0, 1, &ch_out), BAD,
       "capacity_bytes 0");
  CASE("channel_open: capacity 2^30 + 1",
       hcomm_channel_open(chname, ((size_t)1 << 30) + 1, 1, &ch_out), BAD, "capacity_bytes");
  REQUIRE(hcomm_channel_open(chname, 64, 1, &g_ch) == HCOMM_SUCCESS);
  atexit(CloseChannel);
  CASE("channel_open: create an existing name", hcomm_channel_open(chname, 64, 1, &ch_out), BAD,
       "already exists");
  CASE("channel_write: ch NULL", hcomm_channel_write(NULL, a, 4, 0), BAD, "ch is NULL");
  CASE("channel_write: data NULL with nbytes 4", hcomm_channel_write(g_ch, NULL, 4, 0), BAD,
       "data is NULL");
  CASE("channel_write: timeout_ms -1", hcomm_channel_write(g_ch, a, 4, -1), BAD, "timeout_ms");
  CASE("channel_write: message larger than capacity", hcomm_channel_write(g_ch, long_name, 200, 0),
       BAD, "200 bytes");
  CASE("channel_read: nbytes NULL", hcomm_channel_read(g_ch, b, sizeof(b), NULL, 0), BAD,
       "nbytes is NULL");
  CASE("channel_read: buf NULL with cap 16", hcomm_channel_read(g_ch, NULL, 16, &n, 0), BAD,
       "buf is NULL");
  CASE("channel_read: timeout_ms -7", hcomm_channel_read(g_ch, b, sizeof(b), &n, -7), BAD,
       "timeout_ms");

  /* Not an error, but bad input all the same: documented to be named so. */
  REQUIRE(strcmp(hcomm_status_string((hcomm_status_t)99), "HCOMM_UNKNOWN_STATUS") == 0);
  REQUIRE(strcmp(hcomm_status_string((hcomm_status_t)-1), "HCOMM_UNKNOWN_STATUS") == 0);
  printf("ok: hcomm_status_string(99) and (-1) are \"HCOMM_UNKNOWN_STATUS\"\n");

  /* ---- Freed requests, and an address that never was one: told so ---- */
  {
    int32_t v = 3, w = 0;
    int d = 0;
    hcomm_request_t done_req = NULL, cancelled = NULL, live = NULL, pair[2];
    REQUIRE(hcomm_isend(&v, 1, HCOMM_INT32, 0, 6, comm, &done_req) == HCOMM_SUCCESS);
    REQUIRE(hcomm_recv(&w, 1, HCOMM_INT32, 0, 6, comm) == HCOMM_SUCCESS && w == 3);
    REQUIRE(hcomm_wait(done_req) == HCOMM_SUCCESS);
    REQUIRE(hcomm_request_free(done_req) == HCOMM_SUCCESS);
    REQUIRE(hcomm_irecv(&w, 1, HCOMM_INT32, 0, 77, comm, &cancelled) == HCOMM_SUCCESS);
    REQUIRE(hcomm_request_free(cancelled) == HCOMM_SUCCESS);
    CASE("wait: freed request", hcomm_wait(done_req), BAD, "req was freed already");
    CASE("test: freed request", hcomm_test(cancelled, &d), BAD, "req was freed already");
    CASE("request_info: freed request", hcomm_request_info(done_req, NULL, NULL, &n), BAD,
         "req was freed already");
    CASE("request_free: twice", hcomm_request_free(done_req), BAD, "req was freed already");
    REQUIRE(hcomm_irecv(&w, 1, HCOMM_INT32, 0, 78, comm, &live) == HCOMM_SUCCESS);
    pair[0] = live;
    pair[1] = cancelled;
    CASE("waitall: reqs[1] freed", hcomm_waitall(2, pair), BAD, "reqs[1] was freed already");
    REQUIRE(hcomm_request_free(live) == HCOMM_SUCCESS);
    CASE("wait: not a request", hcomm_wait((hcomm_request_t)(void*)&v), BAD, "not a request");
    CASE("request_free: not a request", hcomm_request_free((hcomm_request_t)(void*)&w), BAD,
         "not a request");
    /* A freed handle is not handed out again at once: 1000 requests made
     * and freed since, it is still told as freed, not taken for one of them. */
    for (int i = 0; i < 1000; ++i) {
      hcomm_request_t r = NULL;
      REQUIRE(hcomm_irecv(&w, 1, HCOMM_INT32, 0, 79, comm, &r) == HCOMM_SUCCESS);
      REQUIRE(r != done_req && r != cancelled);
      REQUIRE(hcomm_request_free(r) == HCOMM_SUCCESS);
    }
    CASE("wait: freed 1000 requests ago", hcomm_wait(done_req), BAD, "req was freed already");
  }

  /* ---- Everything still works ---- */
  {
    int32_t sent[3] = {7, 8, 9};
    int32_t got[3] = {0, 0, 0};
    int32_t sum[4] = {0, 0, 0, 0};
    int src = -1, tag = -1;
    size_t count = 0;
    hcomm_request_t r = NULL;
    REQUIRE(hcomm_send(sent, 3, HCOMM_INT32, 0, 5, comm) == HCOMM_SUCCESS);
    REQUIRE(hcomm_irecv(got, 3, HCOMM_INT32, 0, 5, comm, &r) == HCOMM_SUCCESS);
    REQUIRE(hcomm_wait(r) == HCOMM_SUCCESS);
    REQUIRE(hcomm_request_info(r, &src, &tag, &count) == HCOMM_SUCCESS);
    REQUIRE(src == 0 && tag == 5 && count == 3);
    REQUIRE(got[0] == 7 && got[1] == 8 && got[2] == 9);
    REQUIRE(hcomm_request_free(r) == HCOMM_SUCCESS);
    REQUIRE(hcomm_allreduce(a, sum, 4, HCOMM_INT32, HCOMM_SUM, comm) == HCOMM_SUCCESS);
    REQUIRE(sum[0] == 1 && sum[1] == 2 && sum[2] == 3 && sum[3] == 4);
    REQUIRE(hcomm_barrier(comm) == HCOMM_SUCCESS);
    REQUIRE(hcomm_broadcast(sum, 4, HCOMM_INT32, 0, half) == HCOMM_SUCCESS);
    REQUIRE(hcomm_channel_write(g_ch, sent, sizeof(sent), 0) == HCOMM_SUCCESS);
    REQUIRE(hcomm_channel_read(g_ch, got, sizeof(got), &n, 0) == HCOMM_SUCCESS &&
            n == sizeof(sent));
    printf(
        "ok: after %d bad calls: send-to-self + recv, allreduce, barrier, broadcast on the"
        " split communicator and a channel round trip all succeed\n",
        g_cases);
  }

  hcomm_channel_t closed = g_ch;
  REQUIRE(hcomm_channel_close(g_ch) == HCOMM_SUCCESS);
  g_ch = NULL;
  REQUIRE(hcomm_comm_destroy(half) == HCOMM_SUCCESS);
  REQUIRE(hcomm_comm_destroy(comm) == HCOMM_SUCCESS);
  REQUIRE(hcomm_config_destroy(cfg) == HCOMM_SUCCESS);

  /* ---- Destroyed handles: told so, not read after they were freed ---- */
  {
    int r = -1;
    int32_t v = 1;
    hcomm_comm_t again = NULL;
    CASE("comm_rank: destroyed comm", hcomm_comm_rank(half, &r), BAD, "destroyed");
    CASE("allreduce: destroyed comm", hcomm_allreduce(&v, &v, 1, HCOMM_INT32, HCOMM_SUM, comm),
         BAD, "destroyed");
    CASE("comm_abort: destroyed comm", hcomm_comm_abort(comm), BAD, "destroyed");
    CASE("comm_shrink: destroyed comm", hcomm_comm_shrink(half, &again), BAD, "destroyed");
    CASE("comm_destroy: twice", hcomm_comm_destroy(half), BAD, "destroyed already");
    CASE("config_set: destroyed cfg", hcomm_config_set(cfg, "rank", "0"), BAD, "destroyed");
    CASE("comm_init: destroyed cfg", hcomm_comm_init(cfg, &again), BAD, "destroyed");
    CASE("config_destroy: twice", hcomm_config_destroy(cfg), BAD, "destroyed already");
    CASE("channel_write: closed channel", hcomm_channel_write(closed, "x", 1, 0), BAD,
         "closed");
    CASE("channel_close: twice", hcomm_channel_close(closed), BAD, "closed already");
  }
  REQUIRE(hcomm_config_destroy(g_marker_cfg) == HCOMM_SUCCESS);
  printf("bad_input: %d cases, %d failed\n", g_cases, g_failed);
  return g_failed == 0 ? 0 : 1;
}
