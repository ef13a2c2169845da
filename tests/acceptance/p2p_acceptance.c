/* p2p_acceptance: what the point-to-point foundation must show, checked from
 * a plain C99 program over the public header, as 4 processes:
 *
 *   hcomm_run -n 4 --timeout 120 -- p2p_acceptance
 *
 * Every rank prints "ok: <check>" after its part of each check and
 * "ok: all" at the very end. The first failure prints
 * "FAIL: <check>: ..." with hcomm_last_error() on stderr and exits 1 (and
 * hcomm_run then stops the other ranks).
 *
 * Checks are separated by a message barrier (specific sources, tags >= 30000)
 * so that no message of one check can be matched by a receive of another.
 * Ranks beyond 3 (when started with more) only take part in barriers and in
 * the checks that every rank runs.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcomm/hcomm.h"

enum {
  kTagBarrier = 30000,
  kTagRelease = 30001,
};

static hcomm_comm_t g_comm = NULL;
static int g_rank = -1;
static int g_size = 0;
static const char* g_check = "init";

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
  struct timespec ts;
  ts.tv_sec = us / 1000000;
  ts.tv_nsec = (us % 1000000) * 1000;
  nanosleep(&ts, NULL);
}

static void fail(const char* fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "FAIL: %s: rank %d: ", g_check, g_rank);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

/* A call that had to succeed did not. The last-error text is copied first:
 * it is valid only until the next hcomm call. */
static void fail_call(const char* call, hcomm_status_t st) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  fail("%s returned %s: %s", call, hcomm_status_string(st), message);
}

#define CALL(expr)                                   \
  do {                                               \
    hcomm_status_t st_ = (expr);                     \
    if (st_ != HCOMM_SUCCESS) fail_call(#expr, st_); \
  } while (0)

/* A call that had to fail with `want` and a non-empty message. The message
 * is copied to msg (if not NULL). */
static void expect_status(const char* call, hcomm_status_t got, hcomm_status_t want, char* msg,
                          size_t cap) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  if (got != want) {
    fail("%s returned %s, expected %s (last error: %s)", call, hcomm_status_string(got),
         hcomm_status_string(want), message);
  }
  if (message[0] == '\0') fail("%s returned %s with an empty hcomm_last_error()", call,
                               hcomm_status_string(want));
  if (msg != NULL) snprintf(msg, cap, "%s", message);
}

#define EXPECT(expr, want) expect_status(#expr, (expr), (want), NULL, 0)
#define EXPECT_MSG(expr, want, msg) expect_status(#expr, (expr), (want), (msg), sizeof(msg))

static void ok(const char* check) { printf("ok: %s\n", check); }

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (p == NULL) fail("out of memory (%zu bytes)", n);
  return p;
}

/* Every rank reports to rank 0, which then releases everyone. */
static void barrier(void) {
  int32_t v = g_rank;
  if (g_rank == 0) {
    for (int r = 1; r < g_size; ++r) CALL(hcomm_recv(&v, 1, HCOMM_INT32, r, kTagBarrier, g_comm));
    for (int r = 1; r < g_size; ++r) CALL(hcomm_send(&v, 1, HCOMM_INT32, r, kTagRelease, g_comm));
  } else {
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 0, kTagBarrier, g_comm));
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, 0, kTagRelease, g_comm));
  }
}

static uint64_t fnv1a64(const unsigned char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static uint64_t lcg_next(uint64_t* x) {
  *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
  return *x ^ (*x >> 29);
}

static void fill_pattern(unsigned char* p, size_t n, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = lcg_next(&x);
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

/* FNV-1a of fill_pattern(seed, n) without materialising it. */
static uint64_t pattern_fnv(size_t n, uint64_t seed) {
  uint64_t x = seed, h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = lcg_next(&x);
    unsigned char b[8];
    memcpy(b, &v, 8);
    for (size_t k = 0; k < 8 && i + k < n; ++k) {
      h ^= b[k];
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

static void fill_i32(int32_t* p, size_t n, int32_t base) {
  for (size_t i = 0; i < n; ++i) p[i] = base + (int32_t)i;
}

static void check_i32(const int32_t* p, size_t n, int32_t base, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != base + (int32_t)i) {
      fail("%s: element %zu is %" PRId32 ", expected %" PRId32, what, i, p[i],
           base + (int32_t)i);
    }
  }
}

static void check_info(hcomm_request_t req, int source, int tag, size_t count, const char* what) {
  int s = -99, t = -99;
  size_t c = (size_t)-1;
  CALL(hcomm_request_info(req, &s, &t, &c));
  if (s != source || t != tag || c != count) {
    fail("%s: hcomm_request_info gave source %d tag %d count %zu, expected %d / %d / %zu", what,
         s, t, c, source, tag, count);
  }
}

/* True when `text` contains `number` as a whole decimal number. */
static int has_number(const char* text, long number) {
  const char* p = text;
  while (*p) {
    if (*p >= '0' && *p <= '9') {
      char* end = NULL;
      long v = strtol(p, &end, 10);
      if (v == number) return 1;
      p = end;
    } else {
      ++p;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Checks                                                                   */

/* rank 0 sends tags 1, 2, 3 to rank 1, which receives them as 3, 1, 2; then
 * two messages with one tag arrive in the order they were sent. */
static void check_tag_order(void) {
  g_check = "tagged messages out of order";
  int32_t msg[3][8];
  if (g_rank == 0) {
    hcomm_request_t reqs[3];
    for (int t = 1; t <= 3; ++t) {
      fill_i32(msg[t - 1], 8, 1000 * t);
      CALL(hcomm_isend(msg[t - 1], 8, HCOMM_INT32, 1, t, g_comm, &reqs[t - 1]));
    }
    CALL(hcomm_waitall(3, reqs));
    for (int i = 0; i < 3; ++i) CALL(hcomm_request_free(reqs[i]));
    /* Same tag twice: must arrive in order. */
    int32_t a[4], b[4];
    fill_i32(a, 4, 500);
    fill_i32(b, 4, 600);
    CALL(hcomm_send(a, 4, HCOMM_INT32, 1, 5, g_comm));
    CALL(hcomm_send(b, 4, HCOMM_INT32, 1, 5, g_comm));
  } else if (g_rank == 1) {
    static const int order[3] = {3, 1, 2};
    for (int i = 0; i < 3; ++i) {
      int t = order[i];
      memset(msg[0], 0, sizeof msg[0]);
      CALL(hcomm_recv(msg[0], 8, HCOMM_INT32, 0, t, g_comm));
      check_i32(msg[0], 8, 1000 * t, "out-of-order receive by tag");
    }
    int32_t a[4], b[4];
    CALL(hcomm_recv(a, 4, HCOMM_INT32, 0, 5, g_comm));
    CALL(hcomm_recv(b, 4, HCOMM_INT32, 0, 5, g_comm));
    check_i32(a, 4, 500, "first message of tag 5");
    check_i32(b, 4, 600, "second message of tag 5");
  }
  barrier();
  ok(g_check);
}

/* Ranks 1..3 send to rank 0 (tag 100+r, 10+r int32). Rank 0 receives with
 * (ANY_SOURCE, tag 103), (rank 2, ANY_TAG) and (ANY_SOURCE, ANY_TAG), and
 * learns source/tag/count from hcomm_request_info. */
static void check_wildcards(void) {
  g_check = "ANY_SOURCE / ANY_TAG receives";
  enum { kCap = 64, kAck = 200 };
  if (g_rank == 0) {
    int32_t bufs[3][kCap];
    hcomm_request_t reqs[3];
    CALL(hcomm_irecv(bufs[0], kCap, HCOMM_INT32, HCOMM_ANY_SOURCE, 103, g_comm, &reqs[0]));
    CALL(hcomm_irecv(bufs[1], kCap, HCOMM_INT32, 2, HCOMM_ANY_TAG, g_comm, &reqs[1]));
    CALL(hcomm_irecv(bufs[2], kCap, HCOMM_INT32, HCOMM_ANY_SOURCE, HCOMM_ANY_TAG, g_comm,
                     &reqs[2]));
    CALL(hcomm_waitall(3, reqs));
    static const int expect_src[3] = {3, 2, 1};
    for (int i = 0; i < 3; ++i) {
      int s = expect_src[i];
      check_info(reqs[i], s, 100 + s, (size_t)(10 + s), "wildcard receive");
      check_i32(bufs[i], (size_t)(10 + s), 100 * s, "wildcard payload");
      CALL(hcomm_request_free(reqs[i]));
    }
    /* Let everyone go on only now, so that no later message can meet one
     * of the wildcard receives above. */
    int32_t ack = 1;
    for (int r = 1; r < g_size; ++r) CALL(hcomm_send(&ack, 1, HCOMM_INT32, r, kAck, g_comm));
  } else {
    if (g_rank <= 3) {
      int32_t data[16];
      hcomm_request_t req;
      fill_i32(data, (size_t)(10 + g_rank), 100 * g_rank);
      CALL(hcomm_isend(data, (size_t)(10 + g_rank), HCOMM_INT32, 0, 100 + g_rank, g_comm, &req));
      CALL(hcomm_wait(req));
      check_info(req, 0, 100 + g_rank, (size_t)(10 + g_rank), "isend info");
      CALL(hcomm_request_free(req));
    }
    int32_t ack = 0;
    CALL(hcomm_recv(&ack, 1, HCOMM_INT32, 0, kAck, g_comm));
  }
  barrier();
  ok(g_check);
}

/* 48 MiB from rank 0 to rank 1 (blocking) and from rank 2 to rank 3
 * (nonblocking) at the same time, checked by FNV-1a against the pattern and
 * against the sender's announced checksum. */
static void check_large(void) {
  g_check = "48 MiB message intact";
  const size_t n = (size_t)48 << 20;
  enum { kTagData = 300, kTagSum = 301 };
  const int sender = g_rank == 0 || g_rank == 2;
  const int receiver = g_rank == 1 || g_rank == 3;
  if (sender) {
    const uint64_t seed = 0x48000000ULL + (uint64_t)g_rank;
    unsigned char* buf = xmalloc(n);
    fill_pattern(buf, n, seed);
    uint64_t sum = fnv1a64(buf, n);
    double t0 = now_s();
    if (g_rank == 0) {
      CALL(hcomm_send(buf, n, HCOMM_UINT8, 1, kTagData, g_comm));
    } else {
      hcomm_request_t req;
      CALL(hcomm_isend(buf, n, HCOMM_UINT8, 3, kTagData, g_comm, &req));
      CALL(hcomm_wait(req));
      CALL(hcomm_request_free(req));
    }
    printf("rank %d: sent 48 MiB in %.1f ms\n", g_rank, (now_s() - t0) * 1e3);
    CALL(hcomm_send(&sum, 1, HCOMM_UINT64, g_rank + 1, kTagSum, g_comm));
    free(buf);
  } else if (receiver) {
    const int from = g_rank - 1;
    const uint64_t seed = 0x48000000ULL + (uint64_t)from;
    unsigned char* buf = xmalloc(n);
    memset(buf, 0, n);
    size_t got = n;
    double t0 = now_s();
    if (g_rank == 1) {
      CALL(hcomm_recv(buf, n, HCOMM_UINT8, from, kTagData, g_comm));
    } else {
      hcomm_request_t req;
      CALL(hcomm_irecv(buf, n, HCOMM_UINT8, from, kTagData, g_comm, &req));
      CALL(hcomm_wait(req));
      CALL(hcomm_request_info(req, NULL, NULL, &got));
      CALL(hcomm_request_free(req));
    }
    double dt = now_s() - t0;
    uint64_t announced = 0;
    CALL(hcomm_recv(&announced, 1, HCOMM_UINT64, from, kTagSum, g_comm));
    const uint64_t sum = fnv1a64(buf, n);
    const uint64_t want = pattern_fnv(n, seed);
    if (got != n) fail("received %zu bytes, expected %zu", got, n);
    if (sum != want || sum != announced) {
      fail("48 MiB from rank %d damaged: fnv 0x%016" PRIx64 ", pattern 0x%016" PRIx64
           ", announced 0x%016" PRIx64,
           from, sum, want, announced);
    }
    printf("rank %d: 48 MiB from rank %d intact (fnv 0x%016" PRIx64 ") in %.1f ms, %.2f GB/s\n",
           g_rank, from, sum, dt * 1e3, (double)n / dt / 1e9);
    free(buf);
  }
  barrier();
  ok(g_check);
}

/* A receive smaller than the message: HCOMM_ERR_MISMATCH, nothing written
 * past the buffer, the send succeeds, and the same tag works afterwards.
 * Once small (blocking recv), once large (irecv + wait). */
static void check_truncation(void) {
  g_check = "truncation";
  enum { kTagSmall = 50, kTagLarge = 51, kGuard = 64 };
  const size_t small = 100, small_cap = 60;
  const size_t large = (size_t)4 << 20, large_cap = (size_t)1 << 20;
  if (g_rank == 0) {
    int32_t msg[100];
    fill_i32(msg, small, 7000);
    CALL(hcomm_send(msg, small, HCOMM_INT32, 1, kTagSmall, g_comm));
    unsigned char* big = xmalloc(large);
    fill_pattern(big, large, 51);
    hcomm_request_t req;
    CALL(hcomm_isend(big, large, HCOMM_UINT8, 1, kTagLarge, g_comm, &req));
    CALL(hcomm_wait(req)); /* the sender is not told about the truncation */
    CALL(hcomm_request_free(req));
    /* The same tags again, now with room enough. */
    fill_i32(msg, small, 8000);
    CALL(hcomm_send(msg, small, HCOMM_INT32, 1, kTagSmall, g_comm));
    fill_pattern(big, large, 52);
    CALL(hcomm_send(big, large, HCOMM_UINT8, 1, kTagLarge, g_comm));
    free(big);
  } else if (g_rank == 1) {
    char msg[2048];
    /* small: 100 int32 into room for 60, followed by guard bytes */
    unsigned char* buf = xmalloc(small * 4 + kGuard);
    memset(buf, 0xAB, small * 4 + kGuard);
    EXPECT_MSG(hcomm_recv(buf, small_cap, HCOMM_INT32, 0, kTagSmall, g_comm), HCOMM_ERR_MISMATCH,
               msg);
    printf("rank 1: truncated recv: %s\n", msg);
    for (size_t i = small_cap * 4; i < small * 4 + kGuard; ++i) {
      if (buf[i] != 0xAB) fail("byte %zu past a %zu-byte receive buffer was written", i,
                               small_cap * 4);
    }
    /* large: 4 MiB into 1 MiB */
    unsigned char* big = xmalloc(large_cap + kGuard);
    memset(big, 0xCD, large_cap + kGuard);
    hcomm_request_t req;
    CALL(hcomm_irecv(big, large_cap, HCOMM_UINT8, 0, kTagLarge, g_comm, &req));
    EXPECT_MSG(hcomm_wait(req), HCOMM_ERR_MISMATCH, msg);
    printf("rank 1: truncated irecv: %s\n", msg);
    int done = 0;
    EXPECT(hcomm_test(req, &done), HCOMM_ERR_MISMATCH);
    if (!done) fail("hcomm_test after a failed wait says the request is not done");
    CALL(hcomm_request_free(req));
    for (size_t i = large_cap; i < large_cap + kGuard; ++i) {
      if (big[i] != 0xCD) fail("byte %zu past a %zu-byte receive buffer was written", i,
                               large_cap);
    }
    /* still usable, same tags */
    int32_t again[100];
    CALL(hcomm_recv(again, small, HCOMM_INT32, 0, kTagSmall, g_comm));
    check_i32(again, small, 8000, "message after the truncated one");
    free(big);
    big = xmalloc(large);
    CALL(hcomm_recv(big, large, HCOMM_UINT8, 0, kTagLarge, g_comm));
    if (fnv1a64(big, large) != pattern_fnv(large, 52)) fail("4 MiB after truncation damaged");
    free(big);
    free(buf);
  }
  barrier();
  ok(g_check);
}

/* timeout_ms 1500: a recv that nobody answers fails with HCOMM_ERR_TIMEOUT
 * after about 1.5 s and says which tag and peer; a wait on an irecv times
 * out and leaves the request pending. Afterwards both messages arrive and
 * land where they should (no ghost receive). Then the timeout is restored. */
static void check_timeout(void) {
  g_check = "timeout";
  enum { kTagBlocking = 4242, kTagPending = 4243 };
  const int peer = 2;
  const char* env = getenv("HCOMM_TIMEOUT_MS");
  const char* restore = (env != NULL && *env != '\0') ? env : "300000";
  hcomm_request_t pending = NULL;
  int32_t pending_value = 0;
  if (g_rank == 1) {
    char msg[2048];
    static int32_t sink; /* static: a ghost receive must not hit the stack */
    CALL(hcomm_comm_set(g_comm, "timeout_ms", "1500"));
    double t0 = now_s();
    EXPECT_MSG(hcomm_recv(&sink, 1, HCOMM_INT32, peer, kTagBlocking, g_comm), HCOMM_ERR_TIMEOUT,
               msg);
    double dt = now_s() - t0;
    printf("rank 1: recv timed out after %.2f s: %s\n", dt, msg);
    if (dt < 1.3 || dt > 6.0) fail("the timeout took %.2f s, expected 1.3..6 s", dt);
    if (!has_number(msg, kTagBlocking)) fail("the timeout message does not name tag 4242: %s", msg);
    if (!has_number(msg, peer)) fail("the timeout message does not name peer rank 2: %s", msg);

    CALL(hcomm_irecv(&pending_value, 1, HCOMM_INT32, peer, kTagPending, g_comm, &pending));
    t0 = now_s();
    EXPECT_MSG(hcomm_wait(pending), HCOMM_ERR_TIMEOUT, msg);
    dt = now_s() - t0;
    printf("rank 1: wait timed out after %.2f s: %s\n", dt, msg);
    if (dt < 1.3 || dt > 6.0) fail("the wait timeout took %.2f s, expected 1.3..6 s", dt);
    int done = 1;
    CALL(hcomm_test(pending, &done));
    if (done) fail("the request is done after its wait timed out; it should still be pending");
    /* Bounded waits for the rest of this check. */
    CALL(hcomm_comm_set(g_comm, "timeout_ms", "20000"));
  }
  barrier();
  if (g_rank == peer) {
    int32_t v = 77;
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 1, kTagBlocking, g_comm));
    v = 78;
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 1, kTagPending, g_comm));
  } else if (g_rank == 1) {
    int32_t v = 0;
    CALL(hcomm_recv(&v, 1, HCOMM_INT32, peer, kTagBlocking, g_comm));
    if (v != 77) fail("after the timeout, tag 4242 delivered %" PRId32 ", expected 77", v);
    CALL(hcomm_wait(pending));
    check_info(pending, peer, kTagPending, 1, "request waited on again after a timeout");
    if (pending_value != 78) fail("the pending irecv got %" PRId32 ", expected 78", pending_value);
    CALL(hcomm_request_free(pending));
    CALL(hcomm_comm_set(g_comm, "timeout_ms", restore));
  }
  barrier();
  ok(g_check);
}

/* Every rank sends to itself, both orders (receive posted first / send
 * posted first). */
static void check_self(void) {
  g_check = "send to self";
  int32_t out[16], in[16];
  hcomm_request_t req;
  fill_i32(out, 16, 600 + g_rank);
  memset(in, 0, sizeof in);
  CALL(hcomm_irecv(in, 16, HCOMM_INT32, g_rank, 600, g_comm, &req));
  CALL(hcomm_send(out, 16, HCOMM_INT32, g_rank, 600, g_comm));
  CALL(hcomm_wait(req));
  check_info(req, g_rank, 600, 16, "self irecv");
  check_i32(in, 16, 600 + g_rank, "self message (recv first)");
  CALL(hcomm_request_free(req));

  fill_i32(out, 16, 700 + g_rank);
  memset(in, 0, sizeof in);
  CALL(hcomm_isend(out, 16, HCOMM_INT32, g_rank, 601, g_comm, &req));
  CALL(hcomm_recv(in, 16, HCOMM_INT32, g_rank, 601, g_comm));
  CALL(hcomm_wait(req));
  check_i32(in, 16, 700 + g_rank, "self message (send first)");
  CALL(hcomm_request_free(req));
  barrier();
  ok(g_check);
}

/* hcomm_test: not done before the peer sends (the peer waits for our go),
 * done after; request_info on a pending request is INVALID_ARGUMENT. */
static void check_test_polling(void) {
  g_check = "hcomm_test polling";
  enum { kTagData = 700, kTagGo = 701 };
  const double limit = 30.0;
  if (g_rank == 3) {
    int32_t in[32];
    hcomm_request_t req;
    int done = -1;
    CALL(hcomm_irecv(in, 32, HCOMM_INT32, 2, kTagData, g_comm, &req));
    CALL(hcomm_test(req, &done));
    if (done != 0) fail("hcomm_test says done before the peer sent anything");
    EXPECT(hcomm_request_info(req, NULL, NULL, NULL), HCOMM_ERR_INVALID_ARGUMENT);
    int32_t go = 1;
    CALL(hcomm_send(&go, 1, HCOMM_INT32, 2, kTagGo, g_comm));
    long polls = 0;
    double t0 = now_s();
    for (done = 0; !done; ++polls) {
      CALL(hcomm_test(req, &done));
      if (!done) {
        if (now_s() - t0 > limit) fail("hcomm_test still not done after %.0f s", limit);
        sleep_us(50);
      }
    }
    printf("rank 3: irecv done after %ld hcomm_test polls\n", polls);
    check_i32(in, 32, 9000, "polled message");
    check_info(req, 2, kTagData, 32, "polled irecv");
    CALL(hcomm_test(req, &done)); /* a finished request stays finished */
    if (!done) fail("hcomm_test on a finished request says not done");
    CALL(hcomm_request_free(req));
  } else if (g_rank == 2) {
    int32_t go = 0, out[32];
    hcomm_request_t req;
    int done = 0;
    fill_i32(out, 32, 9000);
    CALL(hcomm_recv(&go, 1, HCOMM_INT32, 3, kTagGo, g_comm));
    CALL(hcomm_isend(out, 32, HCOMM_INT32, 3, kTagData, g_comm, &req));
    double t0 = now_s();
    while (!done) {
      CALL(hcomm_test(req, &done));
      if (!done) {
        if (now_s() - t0 > limit) fail("hcomm_test on an isend not done after %.0f s", limit);
        sleep_us(50);
      }
    }
    CALL(hcomm_request_free(req));
  }
  barrier();
  ok(g_check);
}

/* hcomm_waitall over 6 requests; then a waitall where one receive is
 * truncated: MISMATCH, yet the other request completes. */
static void check_waitall(void) {
  g_check = "hcomm_waitall";
  enum { kTagUp = 800, kTagDown = 801, kTagShort = 802, kTagFine = 803 };
  if (g_rank == 0) {
    int32_t in[3][16], out[3][16];
    hcomm_request_t reqs[6];
    for (int r = 1; r <= 3; ++r) {
      fill_i32(out[r - 1], 16, 8100 + 100 * r);
      CALL(hcomm_irecv(in[r - 1], 16, HCOMM_INT32, r, kTagUp, g_comm, &reqs[2 * (r - 1)]));
      CALL(hcomm_isend(out[r - 1], 16, HCOMM_INT32, r, kTagDown, g_comm, &reqs[2 * r - 1]));
    }
    CALL(hcomm_waitall(6, reqs));
    for (int r = 1; r <= 3; ++r) {
      check_i32(in[r - 1], 16, 8000 + 100 * r, "waitall receive");
      check_info(reqs[2 * (r - 1)], r, kTagUp, 16, "waitall receive");
      check_info(reqs[2 * r - 1], r, kTagDown, 16, "waitall send");
    }
    for (int i = 0; i < 6; ++i) CALL(hcomm_request_free(reqs[i]));
    CALL(hcomm_waitall(0, NULL));

    /* One receive too small (rank 1 sends 16 into room for 4), one fine. */
    int32_t shortbuf[4 + 16], fine[16];
    memset(shortbuf, 0x5A, sizeof shortbuf);
    CALL(hcomm_irecv(shortbuf, 4, HCOMM_INT32, 1, kTagShort, g_comm, &reqs[0]));
    CALL(hcomm_irecv(fine, 16, HCOMM_INT32, 2, kTagFine, g_comm, &reqs[1]));
    EXPECT(hcomm_waitall(2, reqs), HCOMM_ERR_MISMATCH);
    EXPECT(hcomm_wait(reqs[0]), HCOMM_ERR_MISMATCH);
    CALL(hcomm_wait(reqs[1]));
    check_i32(fine, 16, 8300, "the good request of a failed waitall");
    for (size_t i = 4; i < 20; ++i) {
      int32_t guard;
      memset(&guard, 0x5A, sizeof guard);
      if (shortbuf[i] != guard) fail("waitall: truncated receive wrote past its buffer");
    }
    CALL(hcomm_request_free(reqs[0]));
    CALL(hcomm_request_free(reqs[1]));
  } else if (g_rank <= 3) {
    int32_t out[16], in[16];
    hcomm_request_t reqs[2];
    fill_i32(out, 16, 8000 + 100 * g_rank);
    CALL(hcomm_isend(out, 16, HCOMM_INT32, 0, kTagUp, g_comm, &reqs[0]));
    CALL(hcomm_irecv(in, 16, HCOMM_INT32, 0, kTagDown, g_comm, &reqs[1]));
    CALL(hcomm_waitall(2, reqs));
    check_i32(in, 16, 8100 + 100 * g_rank, "waitall receive from rank 0");
    CALL(hcomm_request_free(reqs[0]));
    CALL(hcomm_request_free(reqs[1]));
    if (g_rank == 1) {
      fill_i32(out, 16, 8200);
      CALL(hcomm_send(out, 16, HCOMM_INT32, 0, kTagShort, g_comm));
    } else if (g_rank == 2) {
      fill_i32(out, 16, 8300);
      CALL(hcomm_send(out, 16, HCOMM_INT32, 0, kTagFine, g_comm));
    }
  }
  barrier();
  ok(g_check);
}

/* Bad input is HCOMM_ERR_INVALID_ARGUMENT with a message, and leaves the
 * communicator usable; NULL is fine for free/destroy; count 0 is fine. */
static void check_invalid_arguments(void) {
  g_check = "invalid arguments";
  const int right = (g_rank + 1) % g_size;
  const int left = (g_rank + g_size - 1) % g_size;
  int32_t buf[4] = {1, 2, 3, 4};
  hcomm_request_t req = NULL;
  int x = 0;
  char msg[2048];

  EXPECT_MSG(hcomm_send(NULL, 4, HCOMM_INT32, right, 1, g_comm), HCOMM_ERR_INVALID_ARGUMENT, msg);
  printf("rank %d: NULL buffer: %s\n", g_rank, msg);
  EXPECT(hcomm_recv(NULL, 4, HCOMM_INT32, left, 1, g_comm), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_isend(NULL, 4, HCOMM_INT32, right, 1, g_comm, &req), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_irecv(NULL, 4, HCOMM_INT32, left, 1, g_comm, &req), HCOMM_ERR_INVALID_ARGUMENT);

  EXPECT_MSG(hcomm_send(buf, 4, HCOMM_INT32, g_size, 1, g_comm), HCOMM_ERR_INVALID_ARGUMENT, msg);
  printf("rank %d: peer out of range: %s\n", g_rank, msg);
  EXPECT(hcomm_send(buf, 4, HCOMM_INT32, -2, 1, g_comm), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_send(buf, 4, HCOMM_INT32, HCOMM_ANY_SOURCE, 1, g_comm),
         HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_recv(buf, 4, HCOMM_INT32, g_size + 5, 1, g_comm), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_irecv(buf, 4, HCOMM_INT32, -7, 1, g_comm, &req), HCOMM_ERR_INVALID_ARGUMENT);

  EXPECT_MSG(hcomm_send(buf, 4, HCOMM_INT32, right, -5, g_comm), HCOMM_ERR_INVALID_ARGUMENT,
             msg);
  printf("rank %d: negative tag: %s\n", g_rank, msg);
  EXPECT(hcomm_send(buf, 4, HCOMM_INT32, right, HCOMM_ANY_TAG, g_comm),
         HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_isend(buf, 4, HCOMM_INT32, right, -1, g_comm, &req), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_recv(buf, 4, HCOMM_INT32, left, -9, g_comm), HCOMM_ERR_INVALID_ARGUMENT);

  EXPECT_MSG(hcomm_send(buf, 4, (hcomm_dtype_t)99, right, 1, g_comm), HCOMM_ERR_INVALID_ARGUMENT,
             msg);
  printf("rank %d: bad dtype: %s\n", g_rank, msg);
  EXPECT(hcomm_recv(buf, 4, (hcomm_dtype_t)-1, left, 1, g_comm), HCOMM_ERR_INVALID_ARGUMENT);

  EXPECT(hcomm_send(buf, 4, HCOMM_INT32, right, 1, NULL), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_comm_rank(NULL, &x), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_wait(NULL), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_comm_set(g_comm, "timeout_ms", "soon"), HCOMM_ERR_INVALID_ARGUMENT);
  EXPECT(hcomm_comm_set(g_comm, "no_such_key", "1"), HCOMM_ERR_INVALID_ARGUMENT);
  CALL(hcomm_request_free(NULL));
  CALL(hcomm_comm_destroy(NULL));
  CALL(hcomm_config_destroy(NULL));
  if (strcmp(hcomm_status_string(HCOMM_ERR_TIMEOUT), "HCOMM_ERR_TIMEOUT") != 0 ||
      strcmp(hcomm_status_string((hcomm_status_t)99), "HCOMM_UNKNOWN_STATUS") != 0) {
    fail("hcomm_status_string gave '%s' / '%s'", hcomm_status_string(HCOMM_ERR_TIMEOUT),
         hcomm_status_string((hcomm_status_t)99));
  }

  /* Still usable: a ring exchange, and a zero-count message with a NULL
   * buffer (valid: count 0 needs no buffer). */
  int32_t in[4] = {0, 0, 0, 0}, out[4];
  hcomm_request_t reqs[4];
  fill_i32(out, 4, 100 * g_rank);
  CALL(hcomm_irecv(in, 4, HCOMM_INT32, left, 900, g_comm, &reqs[0]));
  CALL(hcomm_irecv(NULL, 0, HCOMM_INT32, left, 901, g_comm, &reqs[1]));
  CALL(hcomm_isend(out, 4, HCOMM_INT32, right, 900, g_comm, &reqs[2]));
  CALL(hcomm_isend(NULL, 0, HCOMM_INT32, right, 901, g_comm, &reqs[3]));
  CALL(hcomm_waitall(4, reqs));
  check_i32(in, 4, 100 * left, "ring exchange after invalid calls");
  check_info(reqs[1], left, 901, 0, "zero-count receive");
  for (int i = 0; i < 4; ++i) CALL(hcomm_request_free(reqs[i]));
  barrier();
  ok(g_check);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int major = -1, minor = -1, patch = -1;
  CALL(hcomm_version(&major, &minor, &patch));
  if (major != HCOMM_VERSION_MAJOR || minor != HCOMM_VERSION_MINOR ||
      patch != HCOMM_VERSION_PATCH) {
    fail("library version %d.%d.%d, header %d.%d.%d", major, minor, patch, HCOMM_VERSION_MAJOR,
         HCOMM_VERSION_MINOR, HCOMM_VERSION_PATCH);
  }
  CALL(hcomm_comm_init(NULL, &g_comm));
  CALL(hcomm_comm_rank(g_comm, &g_rank));
  CALL(hcomm_comm_size(g_comm, &g_size));
  if (g_size < 4) fail("needs at least 4 ranks, got %d", g_size);
  barrier();
  ok("init and version");

  check_tag_order();
  check_wildcards();
  check_large();
  check_truncation();
  check_timeout();
  check_self();
  check_test_polling();
  check_waitall();
  check_invalid_arguments();

  g_check = "destroy";
  barrier();
  CALL(hcomm_comm_destroy(g_comm));
  g_comm = NULL;
  ok("all");
  return 0;
}
