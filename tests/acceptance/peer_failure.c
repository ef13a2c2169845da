/* peer_failure: the rank program of peer_failure_test.sh (C99, public API).
 * The script starts the ranks itself (not through hcomm_run, which would stop
 * the job when one rank dies) with HCOMM_RANK, HCOMM_WORLD_SIZE,
 * HCOMM_STORE_ADDR and HCOMM_JOB_TOKEN set.
 *
 *   peer_failure killed-peer DIR   3 ranks. Rank 1 writes DIR/ready once rank
 *                                  0 is about to block in hcomm_recv from it;
 *                                  the script then SIGKILLs rank 1. Rank 0
 *                                  must see HCOMM_ERR_PEER_FAILURE within
 *                                  10 s, and again on a later send (and recv)
 *                                  to rank 1, while rank 2 still works; then
 *                                  a barrier, which needs rank 1, fails with
 *                                  it on ranks 0 and 2 within 10 s (in the
 *                                  shared-memory segment on one host).
 *   peer_failure stalled-peer DIR  2 ranks. Rank 1 streams 16 MiB messages
 *                                  to rank 0 and writes DIR/ready after the
 *                                  first; the script then SIGSTOPs it, most
 *                                  likely mid-message. Rank 0's blocking
 *                                  receive (timeout_ms 3000) must end with
 *                                  HCOMM_ERR_TIMEOUT by its deadline (1.5 s
 *                                  of slack), whether or not a message was
 *                                  landing; then (a connection cut
 *                                  mid-message) a receive from rank 1 fails
 *                                  at once.
 *   peer_failure missing-rank DIR  3 ranks (flight_recorder_test.sh): a
 *                                  barrier, a ring of isend/irecv, then
 *                                  ranks 0 and 1 call an allreduce (timeout
 *                                  3 s) that rank 2 never calls (it waits
 *                                  in a receive from rank 0 instead): both
 *                                  must time out with a message naming rank
 *                                  2 as the one that did not arrive and
 *                                  showing its last operations; then
 *                                  all three leave together.
 *   peer_failure rank0-dies DIR    3 ranks (rank0_death_test.sh). Rank 0
 *                                  writes DIR/ready after a barrier and
 *                                  waits to be SIGKILLed; ranks 1 and 2
 *                                  must see PEER_FAILURE from it, still
 *                                  exchange messages, fail a barrier and an
 *                                  allreduce with PEER_FAILURE naming rank
 *                                  0 within 10 s, and get a hang report
 *                                  without the store (rank 1's receive from
 *                                  rank 2 times out: the report shows rank
 *                                  2's state, and rank 0 as not answering).
 *   peer_failure init-only         init (rank 0 killed meanwhile by
 *                                  rank0_death_test.sh) must fail within
 *                                  10 s with a message naming rank 0 and
 *                                  the store.
 *   peer_failure denied            init must fail with
 *                                  HCOMM_ERR_PERMISSION_DENIED (wrong token).
 *   peer_failure pingpong          every rank exchanges a message with every
 *                                  other rank and checks it.
 *
 * Prints "ok: ..." lines; exits 0 when the mode's expectations hold, 1
 * otherwise (with hcomm_last_error() on stderr), 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcomm/hcomm.h"

enum {
  kTagHello = 1,
  kTagBlocking = 2,
  kTagNeverSent = 7,
  kTagAfter = 8,
  kTagSurvivor = 9,
  kTagPing = 10,
  kTagStream = 11,
  kTagRelease = 20,
  kTagRing = 21,
};

static int g_rank = -1;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail_call(const char* call, hcomm_status_t st) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  fprintf(stderr, "FAIL: rank %d: %s returned %s: %s\n", g_rank, call, hcomm_status_string(st),
          message);
  exit(1);
}

#define CALL(expr)                                   \
  do {                                               \
    hcomm_status_t st_ = (expr);                     \
    if (st_ != HCOMM_SUCCESS) fail_call(#expr, st_); \
  } while (0)

static void fail(const char* what) {
  fprintf(stderr, "FAIL: rank %d: %s\n", g_rank, what);
  exit(1);
}

/* Writes DIR/NAME atomically (rename), so the script never sees it half done. */
static void signal_file(const char* dir, const char* name) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%d\n", g_rank) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
    fail("cannot write the readiness file");
  }
}

/* Prints what a call returned; fails unless it is `want` with a message. */
static void expect(const char* what, hcomm_status_t got, hcomm_status_t want, double seconds) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  printf("rank %d: %s returned %s after %.2f s: %s\n", g_rank, what, hcomm_status_string(got),
         seconds, message);
  if (got != want) {
    fprintf(stderr, "FAIL: rank %d: %s returned %s, expected %s\n", g_rank, what,
            hcomm_status_string(got), hcomm_status_string(want));
    exit(1);
  }
  if (message[0] == '\0') fail("the failure came with an empty hcomm_last_error()");
}

/* A collective that needs the dead rank 1 fails on the survivors. */
static void survivors_barrier(hcomm_comm_t comm) {
  double t0 = now_s();
  hcomm_status_t st = hcomm_barrier(comm);
  double dt = now_s() - t0;
  expect("hcomm_barrier without rank 1", st, HCOMM_ERR_PEER_FAILURE, dt);
  if (dt > 10.0) fail("the barrier took more than 10 s to fail");
  printf("ok: rank %d: barrier failed in %.2f s\n", g_rank, dt);
}

static int killed_peer(const char* dir) {
  hcomm_comm_t comm = NULL;
  int size = 0;
  int32_t v = 0;
  CALL(hcomm_comm_init(NULL, &comm));
  CALL(hcomm_comm_rank(comm, &g_rank));
  CALL(hcomm_comm_size(comm, &size));
  if (size != 3) fail("killed-peer needs exactly 3 ranks");
  CALL(hcomm_comm_set(comm, "timeout_ms", "60000"));

  if (g_rank == 1) {
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 0, kTagHello, comm));
    /* Rank 0 sends this right before it blocks in hcomm_recv from us. */
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 0, kTagBlocking, comm));
    signal_file(dir, "ready");
    printf("rank 1: ready to be killed\n");
    fflush(stdout);
    /* Wait to be killed; if the script never does, this times out (fail). */
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 0, kTagNeverSent, comm));
    fail("rank 1 was not killed");
  }
  if (g_rank == 2) {
    /* The survivor: must still talk to rank 0 after rank 1 has died. */
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 0, kTagSurvivor, comm));
    v += 1;
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 0, kTagSurvivor, comm));
    survivors_barrier(comm);
    hcomm_status_t st = hcomm_comm_destroy(comm);
    if (st != HCOMM_SUCCESS && st != HCOMM_ERR_PEER_FAILURE) fail_call("hcomm_comm_destroy", st);
    printf("ok: rank 2 survived\n");
    return 0;
  }

  /* rank 0 */
  CALL(hcomm_recv(&v, 1, HCOMM_INT32, 1, kTagHello, comm));
  CALL(hcomm_send(&v, 1, HCOMM_INT32, 1, kTagBlocking, comm));
  double t0 = now_s();
  hcomm_status_t st = hcomm_recv(&v, 1, HCOMM_INT32, 1, kTagNeverSent, comm);
  double dt = now_s() - t0;
  expect("hcomm_recv from the killed rank 1", st, HCOMM_ERR_PEER_FAILURE, dt);
  if (dt > 10.0) fail("the peer failure took more than 10 s to surface");
  printf("ok: peer failure detected in %.2f s\n", dt);

  t0 = now_s();
  st = hcomm_send(&v, 1, HCOMM_INT32, 1, kTagAfter, comm);
  expect("a later hcomm_send to rank 1", st, HCOMM_ERR_PEER_FAILURE, now_s() - t0);
  printf("ok: later send fails\n");

  CALL(hcomm_comm_set(comm, "timeout_ms", "10000"));
  t0 = now_s();
  st = hcomm_recv(&v, 1, HCOMM_INT32, 1, kTagAfter, comm);
  expect("a later hcomm_recv from rank 1", st, HCOMM_ERR_PEER_FAILURE, now_s() - t0);
  printf("ok: later recv fails\n");

  v = 41;
  CALL(hcomm_send(&v, 1, HCOMM_INT32, 2, kTagSurvivor, comm));
  CALL(hcomm_recv(&v, 1, HCOMM_INT32, 2, kTagSurvivor, comm));
  if (v != 42) fail("the survivor rank 2 answered wrongly");
  printf("ok: rank 2 still reachable\n");
  survivors_barrier(comm);

  t0 = now_s();
  st = hcomm_comm_destroy(comm);
  printf("rank 0: hcomm_comm_destroy returned %s after %.2f s\n", hcomm_status_string(st),
         now_s() - t0);
  if (st != HCOMM_SUCCESS && st != HCOMM_ERR_PEER_FAILURE) fail_call("hcomm_comm_destroy", st);
  printf("ok: killed peer\n");
  return 0;
}

static int stalled_peer(const char* dir) {
  hcomm_comm_t comm = NULL;
  int size = 0;
  const size_t count = (size_t)4 << 20; /* 16 MiB of int32 */
  int32_t* buf = malloc(count * sizeof(int32_t));
  if (buf == NULL) fail("out of memory");
  memset(buf, 0, count * sizeof(int32_t));
  CALL(hcomm_comm_init(NULL, &comm));
  CALL(hcomm_comm_rank(comm, &g_rank));
  CALL(hcomm_comm_size(comm, &size));
  if (size != 2) fail("stalled-peer needs exactly 2 ranks");
  if (g_rank == 1) {
    CALL(hcomm_send(buf, count, HCOMM_INT32, 0, kTagStream, comm));
    signal_file(dir, "ready");
    /* Until stopped (and then killed); a failure here fails the test. */
    for (;;) CALL(hcomm_send(buf, count, HCOMM_INT32, 0, kTagStream, comm));
  }
  CALL(hcomm_comm_set(comm, "timeout_ms", "3000"));
  hcomm_status_t st;
  double t0, dt;
  int received = 0;
  do {
    t0 = now_s();
    st = hcomm_recv(buf, count, HCOMM_INT32, 1, kTagStream, comm);
    dt = now_s() - t0;
    received += st == HCOMM_SUCCESS;
  } while (st == HCOMM_SUCCESS && received < 100000);
  expect("hcomm_recv from the stopped rank 1", st, HCOMM_ERR_TIMEOUT, dt);
  if (dt > 4.5) fail("the receive overran its 3 s deadline by more than 1.5 s");
  int cut = strstr(hcomm_last_error(), "closed its connection to rank 1") != NULL;
  printf("ok: rank 0: after %d messages the receive timed out in %.2f s (%s)\n", received, dt,
         cut ? "a message was landing: the connection was cut" : "between messages");
  if (cut) {
    t0 = now_s();
    st = hcomm_recv(buf, count, HCOMM_INT32, 1, kTagStream, comm);
    expect("a later hcomm_recv from rank 1", st, HCOMM_ERR_PEER_FAILURE, now_s() - t0);
    if (strstr(hcomm_last_error(), "mid-message cannot resume") == NULL) {
      fail("the later receive's error does not say why the connection was closed");
    }
  }
  signal_file(dir, "done");
  free(buf);
  return 0;
}

/* Fails unless hcomm_last_error() contains `part`. */
static void expect_in_error(const char* part) {
  if (strstr(hcomm_last_error(), part) == NULL) {
    fprintf(stderr, "FAIL: rank %d: the error lacks '%s': %s\n", g_rank, part, hcomm_last_error());
    exit(1);
  }
}

static int missing_rank(void) {
  hcomm_comm_t comm = NULL;
  int size = 0;
  int32_t v = 0, ring_out = 0, ring_in = -1;
  CALL(hcomm_comm_init(NULL, &comm));
  CALL(hcomm_comm_rank(comm, &g_rank));
  CALL(hcomm_comm_size(comm, &size));
  if (size != 3) fail("missing-rank needs exactly 3 ranks");
  CALL(hcomm_barrier(comm));
  hcomm_request_t reqs[2];
  ring_out = 100 + g_rank;
  CALL(hcomm_irecv(&ring_in, 1, HCOMM_INT32, (g_rank + 2) % 3, kTagRing, comm, &reqs[0]));
  CALL(hcomm_isend(&ring_out, 1, HCOMM_INT32, (g_rank + 1) % 3, kTagRing, comm, &reqs[1]));
  CALL(hcomm_waitall(2, reqs));
  CALL(hcomm_request_free(reqs[0]));
  CALL(hcomm_request_free(reqs[1]));
  if (ring_in != 100 + (g_rank + 2) % 3) fail("ring data damaged");
  if (g_rank == 2) {
    /* Never calls the allreduce: waits here until ranks 0 and 1 have seen
     * it time out, then lets them go (none leaves before both have timed
     * out: a rank's goodbye would fail another's wait with PEER_FAILURE). */
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 0, kTagRelease, comm));
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 1, kTagRelease, comm));
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 0, kTagAfter, comm));
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 1, kTagAfter, comm));
    CALL(hcomm_comm_destroy(comm));
    printf("ok: rank 2 released\n");
    return 0;
  }
  CALL(hcomm_comm_set(comm, "timeout_ms", "3000"));
  int32_t in[4] = {1, 2, 3, 4}, out[4];
  double t0 = now_s();
  hcomm_status_t st = hcomm_allreduce(in, out, 4, HCOMM_INT32, HCOMM_SUM, comm);
  double dt = now_s() - t0;
  expect("hcomm_allreduce without rank 2", st, HCOMM_ERR_TIMEOUT, dt);
  expect_in_error("rank 2 did not arrive at allreduce");
  /* Rank 2's last operations: the ring, then the receive it waits in. */
  expect_in_error("rank 2: ");
  expect_in_error("irecv from rank 1 tag 21 (4 bytes) done");
  expect_in_error("recv from rank 0 tag 20 (4 bytes) in_progress");
  /* And this rank's own: the allreduce, in progress as the report was made. */
  expect_in_error("allreduce seq 1 (16 bytes) in_progress");
  if (dt > 4.5) fail("the allreduce overran its 3 s timeout by more than 1.5 s");
  printf("ok: rank %d: the allreduce timed out naming rank 2\n", g_rank);
  CALL(hcomm_comm_set(comm, "timeout_ms", "30000"));
  CALL(hcomm_send(&v, 1, HCOMM_INT32, 2, kTagRelease, comm));
  CALL(hcomm_recv(&v, 1, HCOMM_INT32, 2, kTagAfter, comm));
  st = hcomm_comm_destroy(comm);
  if (st != HCOMM_SUCCESS && st != HCOMM_ERR_PEER_FAILURE) fail_call("hcomm_comm_destroy", st);
  printf("ok: missing rank\n");
  return 0;
}

static int rank0_dies(const char* dir) {
  hcomm_comm_t comm = NULL;
  int size = 0;
  int32_t v = 0;
  CALL(hcomm_comm_init(NULL, &comm));
  CALL(hcomm_comm_rank(comm, &g_rank));
  CALL(hcomm_comm_size(comm, &size));
  if (size != 3) fail("rank0-dies needs exactly 3 ranks");
  CALL(hcomm_barrier(comm));
  if (g_rank == 0) {
    signal_file(dir, "ready");
    /* Wait to be killed; if the script never does, this times out (fail). */
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 1, kTagNeverSent, comm));
    fail("rank 0 was not killed");
  }
  const int other = 3 - g_rank; /* 1 <-> 2 */
  double t0 = now_s();
  hcomm_status_t st = hcomm_recv(&v, 1, HCOMM_INT32, 0, kTagNeverSent, comm);
  expect("hcomm_recv from the killed rank 0", st, HCOMM_ERR_PEER_FAILURE, now_s() - t0);
  expect_in_error("rank 0");
  printf("ok: rank %d: rank 0's death seen\n", g_rank);

  /* Point-to-point among the survivors works. */
  for (int i = 0; i < 3; ++i) {
    int32_t out = 1000 * g_rank + i, in = -1;
    hcomm_request_t reqs[2];
    CALL(hcomm_irecv(&in, 1, HCOMM_INT32, other, kTagSurvivor, comm, &reqs[0]));
    CALL(hcomm_isend(&out, 1, HCOMM_INT32, other, kTagSurvivor, comm, &reqs[1]));
    CALL(hcomm_waitall(2, reqs));
    CALL(hcomm_request_free(reqs[0]));
    CALL(hcomm_request_free(reqs[1]));
    if (in != 1000 * other + i) fail("survivor exchange damaged");
  }
  printf("ok: rank %d: point-to-point with rank %d works\n", g_rank, other);

  /* Collectives need rank 0: they fail at once, naming it. */
  t0 = now_s();
  st = hcomm_barrier(comm);
  double dt = now_s() - t0;
  expect("hcomm_barrier without rank 0", st, HCOMM_ERR_PEER_FAILURE, dt);
  expect_in_error("rank 0");
  if (dt > 10.0) fail("the barrier took more than 10 s to fail");
  int32_t in4[4] = {1, 2, 3, 4}, out4[4];
  t0 = now_s();
  st = hcomm_allreduce(in4, out4, 4, HCOMM_INT32, HCOMM_SUM, comm);
  dt = now_s() - t0;
  expect("hcomm_allreduce without rank 0", st, HCOMM_ERR_PEER_FAILURE, dt);
  expect_in_error("rank 0");
  if (dt > 10.0) fail("the allreduce took more than 10 s to fail");
  printf("ok: rank %d: collectives fail naming rank 0\n", g_rank);

  /* A hang report with the store gone: rank 1's receive from rank 2 times
   * out while rank 2 waits in a receive from rank 1. */
  CALL(hcomm_comm_set(comm, "timeout_ms", "3000"));
  if (g_rank == 2) {
    CALL(hcomm_comm_set(comm, "timeout_ms", "30000"));
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 1, kTagRelease, comm));
  } else {
    t0 = now_s();
    st = hcomm_recv(&v, 1, HCOMM_INT32, 2, kTagNeverSent, comm);
    dt = now_s() - t0;
    expect("hcomm_recv from rank 2 (never sent)", st, HCOMM_ERR_TIMEOUT, dt);
    expect_in_error("hang report");
    expect_in_error("rank 0 did not answer");
    expect_in_error("rank 2 waits in recv from rank 1 tag 20");
    expect_in_error("rank 2: ");
    if (dt > 4.5) fail("the receive overran its 3 s timeout by more than 1.5 s");
    printf("ok: rank 1: hang report without the store in %.2f s\n", dt);
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 2, kTagRelease, comm));
  }
  st = hcomm_comm_destroy(comm);
  if (st != HCOMM_SUCCESS && st != HCOMM_ERR_PEER_FAILURE) fail_call("hcomm_comm_destroy", st);
  printf("ok: rank %d survived rank 0\n", g_rank);
  return 0;
}

static int init_only(void) {
  hcomm_comm_t comm = NULL;
  double t0 = now_s();
  hcomm_status_t st = hcomm_comm_init(NULL, &comm);
  double dt = now_s() - t0;
  if (st == HCOMM_SUCCESS) {
    hcomm_comm_destroy(comm);
    fail("init succeeded although rank 0 was killed");
  }
  printf("rank %d: hcomm_comm_init returned %s after %.2f s: %s\n", g_rank,
         hcomm_status_string(st), dt, hcomm_last_error());
  expect_in_error("rank 0");
  expect_in_error("store");
  if (dt > 10.0) fail("init took more than 10 s to fail");
  printf("ok: init failed in %.2f s\n", dt);
  return 0;
}

static int denied(void) {
  hcomm_comm_t comm = NULL;
  double t0 = now_s();
  hcomm_status_t st = hcomm_comm_init(NULL, &comm);
  if (st == HCOMM_SUCCESS) {
    hcomm_comm_destroy(comm);
    fail("init with a wrong job token succeeded");
  }
  expect("hcomm_comm_init with a wrong job token", st, HCOMM_ERR_PERMISSION_DENIED, now_s() - t0);
  printf("ok: wrong token refused\n");
  return 0;
}

static int pingpong(void) {
  hcomm_comm_t comm = NULL;
  int size = 0;
  CALL(hcomm_comm_init(NULL, &comm));
  CALL(hcomm_comm_rank(comm, &g_rank));
  CALL(hcomm_comm_size(comm, &size));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == g_rank) continue;
    int32_t out[64], in[64];
    hcomm_request_t reqs[2];
    for (int i = 0; i < 64; ++i) out[i] = 1000 * g_rank + 10 * peer + i;
    CALL(hcomm_irecv(in, 64, HCOMM_INT32, peer, kTagPing, comm, &reqs[0]));
    CALL(hcomm_isend(out, 64, HCOMM_INT32, peer, kTagPing, comm, &reqs[1]));
    CALL(hcomm_waitall(2, reqs));
    for (int i = 0; i < 64; ++i) {
      if (in[i] != 1000 * peer + 10 * g_rank + i) fail("pingpong data damaged");
    }
    CALL(hcomm_request_free(reqs[0]));
    CALL(hcomm_request_free(reqs[1]));
  }
  CALL(hcomm_comm_destroy(comm));
  printf("ok: pingpong rank %d of %d\n", g_rank, size);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* rank_env = getenv("HCOMM_RANK"); /* for messages before init */
  if (rank_env != NULL) g_rank = atoi(rank_env);
  if (argc == 3 && strcmp(argv[1], "killed-peer") == 0) return killed_peer(argv[2]);
  if (argc == 3 && strcmp(argv[1], "stalled-peer") == 0) return stalled_peer(argv[2]);
  if (argc == 2 && strcmp(argv[1], "missing-rank") == 0) return missing_rank();
  if (argc == 3 && strcmp(argv[1], "rank0-dies") == 0) return rank0_dies(argv[2]);
  if (argc == 2 && strcmp(argv[1], "init-only") == 0) return init_only();
  if (argc == 2 && strcmp(argv[1], "denied") == 0) return denied();
  if (argc == 2 && strcmp(argv[1], "pingpong") == 0) return pingpong();
  fprintf(stderr,
          "usage: peer_failure killed-peer DIR | stalled-peer DIR | missing-rank | "
          "rank0-dies DIR | init-only | denied | pingpong\n");
  return 2;
}
