/* clock_jump: two ranks wait across a step of the wall clock.
 *
 * Run by tests/clock/clock_jump_test.sh under libfaketime, which steps what
 * this process reads from CLOCK_REALTIME (the wall clock) while
 * CLOCK_MONOTONIC runs on untouched. hcomm's deadlines are on the monotonic
 * clock, so a step either way must change no wait:
 *
 *   clock_jump late <send_after_ms>
 *     Rank 0 sends one int after send_after_ms; rank 1 receives it (its
 *     timeout_ms, HCOMM_TIMEOUT_MS, is longer). The script steps the clock
 *     forward meanwhile: a deadline read from the wall clock would pass at
 *     once and the receive would time out.
 *   clock_jump never
 *     Rank 1 receives a message that never comes: it must time out after
 *     timeout_ms, no later (a deadline read from the wall clock stepped back
 *     would lie hours ahead). Rank 1 then tells rank 0, which receives
 *     (retrying its own timeouts), and both run an allreduce.
 *
 * Each rank prints "rank R: ..." lines with the monotonic seconds its waits
 * took; exit status 0 when the rank saw what it should, 1 otherwise (with
 * hcomm_last_error()).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcomm/hcomm.h"

static double MonoS(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int g_rank = -1;

#define CHECK(call)                                                                         \
  do {                                                                                      \
    hcomm_status_t s_ = (call);                                                             \
    if (s_ != HCOMM_SUCCESS) {                                                              \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call, hcomm_status_string(s_), \
              hcomm_last_error());                                                          \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

enum { kTagLate = 1, kTagNever = 2, kTagDone = 3 };

static int Late(hcomm_comm_t comm, long send_after_ms) {
  int value = 0;
  if (g_rank == 0) {
    SleepMs(send_after_ms);
    value = 42;
    CHECK(hcomm_send(&value, 1, HCOMM_INT32, 1, kTagLate, comm));
    printf("rank 0: sent after %ld ms\n", send_after_ms);
  } else {
    printf("rank 1: waiting\n");
    fflush(stdout);
    const double start = MonoS();
    CHECK(hcomm_recv(&value, 1, HCOMM_INT32, 0, kTagLate, comm));
    printf("rank 1: received %d after %.2f s\n", value, MonoS() - start);
    if (value != 42) {
      fprintf(stderr, "rank 1: received %d, wanted 42\n", value);
      return 1;
    }
  }
  return 0;
}

static int Never(hcomm_comm_t comm) {
  int value = 0;
  if (g_rank == 1) {
    printf("rank 1: waiting\n");
    fflush(stdout);
    const double start = MonoS();
    hcomm_status_t s = hcomm_recv(&value, 1, HCOMM_INT32, 0, kTagNever, comm);
    const double took = MonoS() - start;
    printf("rank 1: receive ended after %.2f s: %s: %s\n", took, hcomm_status_string(s),
           s == HCOMM_SUCCESS ? "" : hcomm_last_error());
    if (s != HCOMM_ERR_TIMEOUT) {
      fprintf(stderr, "rank 1: the receive of a message never sent ended %s, wanted TIMEOUT\n",
              hcomm_status_string(s));
      return 1;
    }
    value = 1;
    CHECK(hcomm_send(&value, 1, HCOMM_INT32, 0, kTagDone, comm));
  } else {
    hcomm_status_t s = HCOMM_ERR_TIMEOUT;
    for (int i = 0; i < 5 && s == HCOMM_ERR_TIMEOUT; ++i) {
      s = hcomm_recv(&value, 1, HCOMM_INT32, 1, kTagDone, comm);
    }
    CHECK(s);
    printf("rank 0: rank 1 is done waiting\n");
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2 || (strcmp(argv[1], "late") != 0 && strcmp(argv[1], "never") != 0) ||
      (strcmp(argv[1], "late") == 0 && argc != 3)) {
    fprintf(stderr, "usage: %s late <send_after_ms> | never\n", argv[0]);
    return 2;
  }
  hcomm_comm_t comm = NULL;
  CHECK(hcomm_comm_init(NULL, &comm));
  CHECK(hcomm_comm_rank(comm, &g_rank));
  int size = 0;
  CHECK(hcomm_comm_size(comm, &size));
  if (size != 2) {
    fprintf(stderr, "clock_jump runs on 2 ranks, not %d\n", size);
    return 2;
  }
  int rc = strcmp(argv[1], "late") == 0 ? Late(comm, strtol(argv[2], NULL, 10)) : Never(comm);
  if (rc != 0) return rc;
  /* The communicator works on after the step: an allreduce, checked. */
  int one = 1, sum = 0;
  CHECK(hcomm_allreduce(&one, &sum, 1, HCOMM_INT32, HCOMM_SUM, comm));
  if (sum != 2) {
    fprintf(stderr, "rank %d: allreduce gave %d, wanted 2\n", g_rank, sum);
    return 1;
  }
  CHECK(hcomm_comm_destroy(comm));
  printf("rank %d: ok\n", g_rank);
  return 0;
}
