/* multihost_rank: the rank program of multihost_test.sh (C99, public API).
 * The script starts every rank itself inside a network namespace that plays
 * one host:
 *
 *   ip netns exec NS env -i HCOMM_RANK=R HCOMM_WORLD_SIZE=N
 *     HCOMM_STORE_ADDR=10.x.0.1:P HCOMM_JOB_TOKEN=T HCOMM_TIMEOUT_MS=MS
 *     HCOMM_HOST_ID=NS multihost_rank MODE HOSTMAP [DIR]
 *
 * HOSTMAP has one letter per rank naming its host ("aabbcc": ranks 0 and 1
 * on host a, ...): ranks with the same letter must reach each other over
 * "shm", all others over "tcp".
 *
 *   healthy HOSTMAP      hcomm_comm_transport for every peer; three rounds
 *                        of: a p2p ring over 0 B .. 1 MiB (eager and
 *                        rendezvous sizes), an any-source ring, an exchange
 *                        with every peer (every shm and tcp link), and every
 *                        collective (allreduce out of and in place,
 *                        broadcast, reduce, allgather, reduce_scatter,
 *                        alltoall, gather, scatter with rotating roots, at
 *                        counts 0, 1, 1000 and 70001) with every result
 *                        checked; barrier checked with the shared clock
 *                        (nobody leaves before the last rank has entered).
 *   loop HOSTMAP DIR     allreduce + p2p ring (+ alltoall every 4th round)
 *                        until a call fails. Writes DIR/running.R after 10
 *                        rounds; the script then breaks the job. The first
 *                        failure is printed as
 *                          error: rank R round I OP returned STATUS at EPOCH
 *                          (S s after the last success): MESSAGE
 *                        then the communicator is destroyed (timed) and the
 *                        rank exits 3. Exits 1 if no failure comes within
 *                        150 s.
 *   store-gone HOSTMAP DIR  two warm-up rounds of the healthy checks, then
 *                        DIR/ready.R; waits for DIR/go1 (the script has made
 *                        the store unreachable), runs 5 rounds plus a
 *                        hcomm_comm_split and collectives on the halves;
 *                        writes DIR/done1.R, waits for DIR/go2 (the script
 *                        has destroyed the store's sockets), 5 more rounds,
 *                        prints its CPU time over 1 s idle, destroys. Prints
 *                        its open descriptors at each of the three stages
 *                        ("rank R: N fds with the store ...").
 *
 * Every received buffer is compared with the bytes its sender generated
 * (seeded by kind, round, sender, receiver); a difference prints
 * "CORRUPT: ..." with both checksums and exits 4. A call that must succeed
 * and fails prints "FAIL: ..." (with hcomm_last_error()) and exits 1.
 * Every line the program prints starts with "rank R:" or "ok:" so that the
 * script can collect them; 2 is bad usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "hcomm/hcomm.h"

enum {
  kTagRing = 100,      /* + size index */
  kTagAnyRing = 200,   /* + round */
  kTagPairs = 300,
  kTagLoop = 400,
  kMaxSize = 1 << 20,
  kLoopCount = 4096,    /* uint64 elements of the loop's allreduce (32 KiB) */
  kLoopMaxP2p = 300000, /* bytes of the loop's largest ring message */
  kExitBroken = 3,      /* the expected failure was observed */
  kExitCorrupt = 4,
};

static hcomm_comm_t g_comm = NULL;
static int g_rank = -1;
static int g_size = 0;
static const char* g_hosts = "";
static char g_check[256] = "init";

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wall clock: the same kernel clock in every namespace, so the script can
 * compare it with the moment it broke the job. */
static double epoch_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t epoch_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

static void set_check(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_check, sizeof g_check, fmt, ap);
  va_end(ap);
}

static void fail(const char* fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "FAIL: rank %d: %s: ", g_rank, g_check);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

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

static void* xmalloc(size_t n) {
  void* p = malloc(n == 0 ? 1 : n);
  if (p == NULL) fail("out of memory (%zu bytes)", n);
  return p;
}

/* Writes DIR/NAME.RANK atomically (rename), so the script never sees it half
 * written. */
static void signal_file(const char* dir, const char* name) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", dir, name, g_rank);
  snprintf(path, sizeof path, "%s/%s.%d", dir, name, g_rank);
  FILE* f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%.6f\n", epoch_s()) < 0 || fclose(f) != 0 ||
      rename(tmp, path) != 0) {
    fail("cannot write %s: %s", path, strerror(errno));
  }
}

/* Waits (bounded) for the script to create DIR/NAME. */
static void wait_for_file(const char* dir, const char* name, double seconds) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  const double deadline = mono_s() + seconds;
  while (stat(path, &st) != 0) {
    if (mono_s() > deadline) fail("the script never created %s (waited %.0f s)", path, seconds);
    sleep_ms(10);
  }
}

/* ------------------------------------------------------------------------ */
/* Generated data and its checks                                            */

static uint64_t mix64(uint64_t x) { /* splitmix64 */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* The seed of one buffer: what it is, which round, from whom, to whom. */
static uint64_t seed_of(uint64_t kind, uint64_t round, int from, int to) {
  return mix64(mix64(mix64(kind) ^ round) ^ ((uint64_t)(uint32_t)from << 32 | (uint32_t)to));
}

static uint8_t pattern_byte(uint64_t seed, size_t i) {
  return (uint8_t)(mix64(seed + i / 8) >> (8 * (i % 8)));
}

static void fill(void* buf, size_t n, uint64_t seed) {
  uint8_t* b = (uint8_t*)buf;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = mix64(seed + i / 8);
    for (int k = 0; k < 8; ++k) b[i + (size_t)k] = (uint8_t)(w >> (8 * k));
  }
  for (; i < n; ++i) b[i] = pattern_byte(seed, i);
}

static uint64_t fnv1a(const void* buf, size_t n) {
  const uint8_t* b = (const uint8_t*)buf;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Checks that buf holds the n bytes generated from seed; on a difference
 * prints CORRUPT with the first bad offset and both checksums and exits. */
static void check_bytes(const char* what, const void* buf, size_t n, uint64_t seed) {
  const uint8_t* b = (const uint8_t*)buf;
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != pattern_byte(seed, i)) {
      uint8_t* want = (uint8_t*)xmalloc(n);
      fill(want, n, seed);
      fflush(stdout);
      fprintf(stderr,
              "CORRUPT: rank %d: %s: %s (%zu bytes): first difference at byte %zu "
              "(got 0x%02x, want 0x%02x); checksum got %016" PRIx64 " want %016" PRIx64 "\n",
              g_rank, g_check, what, n, i, b[i], want[i], fnv1a(buf, n), fnv1a(want, n));
      printf("rank %d: CORRUPT %s\n", g_rank, what);
      exit(kExitCorrupt);
    }
  }
}

static void check_u64(const char* what, const uint64_t* got, const uint64_t* want, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      fflush(stdout);
      fprintf(stderr,
              "CORRUPT: rank %d: %s: %s (%zu uint64): element %zu is %016" PRIx64
              ", want %016" PRIx64 "; checksum got %016" PRIx64 " want %016" PRIx64 "\n",
              g_rank, g_check, what, n, i, got[i], want[i], fnv1a(got, n * 8),
              fnv1a(want, n * 8));
      printf("rank %d: CORRUPT %s\n", g_rank, what);
      exit(kExitCorrupt);
    }
  }
}

/* Element i of rank r's contribution to a reduction. */
static uint64_t contribution(uint64_t seed, int r, size_t i) {
  return mix64(seed ^ ((uint64_t)r << 40) ^ i);
}

/* ------------------------------------------------------------------------ */
/* Checks                                                                   */

static void check_transports(void) {
  set_check("hcomm_comm_transport");
  int shm = 0, tcp = 0;
  for (int p = 0; p < g_size; ++p) {
    const char* name = NULL;
    CALL(hcomm_comm_transport(g_comm, p, &name));
    const char* want = p == g_rank ? "self" : g_hosts[p] == g_hosts[g_rank] ? "shm" : "tcp";
    if (name == NULL || strcmp(name, want) != 0) {
      fail("rank %d (host %c) reaches rank %d (host %c) over \"%s\", expected \"%s\"", g_rank,
           g_hosts[g_rank], p, g_hosts[p], name ? name : "(null)", want);
    }
    shm += strcmp(want, "shm") == 0;
    tcp += strcmp(want, "tcp") == 0;
  }
  printf("ok: rank %d transports: %d shm, %d tcp, self\n", g_rank, shm, tcp);
}

static const size_t kRingSizes[] = {0, 1, 4095, 65536, 65537, 1 << 20};

/* Ring over every size: send to the right, receive from the left. */
static void ring(int round) {
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  uint8_t* out = (uint8_t*)xmalloc(kMaxSize);
  uint8_t* in = (uint8_t*)xmalloc(kMaxSize);
  for (size_t k = 0; k < sizeof kRingSizes / sizeof kRingSizes[0]; ++k) {
    const size_t n = kRingSizes[k];
    set_check("round %d: p2p ring %zu bytes", round, n);
    hcomm_request_t reqs[2];
    fill(out, n, seed_of(1, (uint64_t)round * 16 + k, g_rank, right));
    memset(in, 0xEE, kMaxSize);
    CALL(hcomm_irecv(in, kMaxSize, HCOMM_UINT8, left, kTagRing + (int)k, g_comm, &reqs[0]));
    CALL(hcomm_isend(out, n, HCOMM_UINT8, right, kTagRing + (int)k, g_comm, &reqs[1]));
    CALL(hcomm_waitall(2, reqs));
    int src = -1, tag = -1;
    size_t count = 0;
    CALL(hcomm_request_info(reqs[0], &src, &tag, &count));
    if (src != left || tag != kTagRing + (int)k || count != n) {
      fail("request_info says source %d tag %d count %zu, want %d %d %zu", src, tag, count, left,
           kTagRing + (int)k, n);
    }
    check_bytes("ring message", in, n, seed_of(1, (uint64_t)round * 16 + k, left, g_rank));
    if (n < kMaxSize && in[n] != 0xEE) fail("bytes past the message were written");
    CALL(hcomm_request_free(reqs[0]));
    CALL(hcomm_request_free(reqs[1]));
  }
  /* Any-source: the message from the left must be the one that arrives. */
  set_check("round %d: any-source ring", round);
  {
    const size_t n = 70000 + (size_t)g_rank;
    const size_t want_n = 70000 + (size_t)left;
    hcomm_request_t reqs[2];
    fill(out, n, seed_of(2, (uint64_t)round, g_rank, right));
    CALL(hcomm_irecv(in, kMaxSize, HCOMM_UINT8, HCOMM_ANY_SOURCE, kTagAnyRing + round, g_comm,
                     &reqs[0]));
    CALL(hcomm_isend(out, n, HCOMM_UINT8, right, kTagAnyRing + round, g_comm, &reqs[1]));
    CALL(hcomm_waitall(2, reqs));
    int src = -1;
    size_t count = 0;
    CALL(hcomm_request_info(reqs[0], &src, NULL, &count));
    if (src != left || count != want_n) {
      fail("any-source receive got %zu bytes from %d, want %zu from %d", count, src, want_n, left);
    }
    check_bytes("any-source message", in, count, seed_of(2, (uint64_t)round, left, g_rank));
    CALL(hcomm_request_free(reqs[0]));
    CALL(hcomm_request_free(reqs[1]));
  }
  free(out);
  free(in);
}

/* Every pair exchanges one message: every shm and every tcp link carries
 * data in both directions at once. */
static void all_pairs(int round) {
  set_check("round %d: exchange with every peer", round);
  const size_t n = 100000;
  uint8_t* out = (uint8_t*)xmalloc(n * (size_t)g_size);
  uint8_t* in = (uint8_t*)xmalloc(n * (size_t)g_size);
  hcomm_request_t* reqs = (hcomm_request_t*)xmalloc(sizeof(hcomm_request_t) * 2 * (size_t)g_size);
  int k = 0;
  for (int p = 0; p < g_size; ++p) {
    if (p == g_rank) continue;
    const size_t len = n - (size_t)(7 * p + g_rank);
    fill(out + n * (size_t)p, len, seed_of(3, (uint64_t)round, g_rank, p));
    CALL(hcomm_irecv(in + n * (size_t)p, n, HCOMM_UINT8, p, kTagPairs, g_comm, &reqs[k++]));
    CALL(hcomm_isend(out + n * (size_t)p, len, HCOMM_UINT8, p, kTagPairs, g_comm, &reqs[k++]));
  }
  CALL(hcomm_waitall(k, reqs));
  k = 0;
  for (int p = 0; p < g_size; ++p) {
    if (p == g_rank) continue;
    size_t count = 0;
    CALL(hcomm_request_info(reqs[k], NULL, NULL, &count));
    const size_t len = n - (size_t)(7 * g_rank + p);
    if (count != len) fail("from rank %d: %zu bytes, want %zu", p, count, len);
    check_bytes("pair message", in + n * (size_t)p, len, seed_of(3, (uint64_t)round, p, g_rank));
    CALL(hcomm_request_free(reqs[k]));
    CALL(hcomm_request_free(reqs[k + 1]));
    k += 2;
  }
  free(reqs);
  free(out);
  free(in);
}

static const size_t kCounts[] = {0, 1, 1000, 70001};

static void collectives(int round) {
  const size_t n_max = 70001;
  const size_t sz = (size_t)g_size;
  uint64_t* a = (uint64_t*)xmalloc(8 * n_max * sz);
  uint64_t* b = (uint64_t*)xmalloc(8 * n_max * sz);
  uint64_t* want = (uint64_t*)xmalloc(8 * n_max * sz);
  uint8_t* x = (uint8_t*)xmalloc(n_max * sz);
  uint8_t* y = (uint8_t*)xmalloc(n_max * sz);
  for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
    const size_t n = kCounts[c];
    const int root = (round + (int)c) % g_size;
    const uint64_t s = seed_of(10 + c, (uint64_t)round, 0, 0);

    set_check("round %d: allreduce uint64 sum, count %zu", round, n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = contribution(s, g_rank, i);
      want[i] = 0;
      for (int r = 0; r < g_size; ++r) want[i] += contribution(s, r, i);
    }
    CALL(hcomm_allreduce(a, b, n, HCOMM_UINT64, HCOMM_SUM, g_comm));
    check_u64("allreduce result", b, want, n);
    set_check("round %d: allreduce in place, uint64 max, count %zu", round, n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = contribution(s + 1, g_rank, i);
      want[i] = 0;
      for (int r = 0; r < g_size; ++r) {
        uint64_t v = contribution(s + 1, r, i);
        if (v > want[i]) want[i] = v;
      }
    }
    CALL(hcomm_allreduce(a, a, n, HCOMM_UINT64, HCOMM_MAX, g_comm));
    check_u64("in-place allreduce result", a, want, n);

    set_check("round %d: broadcast from %d, %zu bytes", round, root, n);
    if (g_rank == root) fill(x, n, s + 2);
    else memset(x, 0, n);
    CALL(hcomm_broadcast(x, n, HCOMM_UINT8, root, g_comm));
    check_bytes("broadcast buffer", x, n, s + 2);

    set_check("round %d: reduce to %d, uint64 sum, count %zu", round, root, n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = contribution(s + 3, g_rank, i);
      want[i] = 0;
      for (int r = 0; r < g_size; ++r) want[i] += contribution(s + 3, r, i);
    }
    CALL(hcomm_reduce(a, g_rank == root ? b : NULL, n, HCOMM_UINT64, HCOMM_SUM, root, g_comm));
    if (g_rank == root) check_u64("reduce result", b, want, n);

    set_check("round %d: allgather %zu bytes per rank", round, n);
    fill(x, n, seed_of(20, s, g_rank, 0));
    CALL(hcomm_allgather(x, y, n, HCOMM_UINT8, g_comm));
    for (int r = 0; r < g_size; ++r) check_bytes("allgather block", y + n * (size_t)r, n,
                                                 seed_of(20, s, r, 0));

    set_check("round %d: reduce_scatter uint64 sum, %zu per rank", round, n);
    for (size_t i = 0; i < n * sz; ++i) a[i] = contribution(s + 4, g_rank, i);
    for (size_t i = 0; i < n; ++i) {
      want[i] = 0;
      for (int r = 0; r < g_size; ++r) want[i] += contribution(s + 4, r, n * (size_t)g_rank + i);
    }
    CALL(hcomm_reduce_scatter(a, b, n, HCOMM_UINT64, HCOMM_SUM, g_comm));
    check_u64("reduce_scatter block", b, want, n);

    set_check("round %d: alltoall %zu bytes per block", round, n);
    for (int j = 0; j < g_size; ++j) fill(x + n * (size_t)j, n, seed_of(21, s, g_rank, j));
    CALL(hcomm_alltoall(x, y, n, HCOMM_UINT8, g_comm));
    for (int i = 0; i < g_size; ++i) check_bytes("alltoall block", y + n * (size_t)i, n,
                                                 seed_of(21, s, i, g_rank));

    set_check("round %d: gather to %d, %zu bytes per rank", round, root, n);
    fill(x, n, seed_of(22, s, g_rank, root));
    CALL(hcomm_gather(x, g_rank == root ? y : NULL, n, HCOMM_UINT8, root, g_comm));
    if (g_rank == root) {
      for (int r = 0; r < g_size; ++r) check_bytes("gather block", y + n * (size_t)r, n,
                                                   seed_of(22, s, r, root));
    }

    set_check("round %d: scatter from %d, %zu bytes per rank", round, root, n);
    if (g_rank == root) {
      for (int r = 0; r < g_size; ++r) fill(x + n * (size_t)r, n, seed_of(23, s, root, r));
    }
    CALL(hcomm_scatter(g_rank == root ? x : NULL, y, n, HCOMM_UINT8, root, g_comm));
    check_bytes("scatter block", y, n, seed_of(23, s, root, g_rank));
  }

  /* Barrier: nobody may leave before the last rank has entered. The ranks
   * share the kernel's clock, so the times compare directly. */
  set_check("round %d: barrier", round);
  if (g_rank == round % g_size) sleep_ms(100); /* one late rank */
  int64_t times[2];
  times[0] = epoch_ns();
  CALL(hcomm_barrier(g_comm));
  times[1] = epoch_ns();
  int64_t* all = (int64_t*)xmalloc(sizeof times * sz);
  CALL(hcomm_allgather(times, all, 2, HCOMM_INT64, g_comm));
  int64_t last_enter = 0;
  for (int r = 0; r < g_size; ++r) {
    if (all[2 * r] > last_enter) last_enter = all[2 * r];
  }
  for (int r = 0; r < g_size; ++r) {
    if (all[2 * r + 1] < last_enter) {
      fail("rank %d left the barrier %.3f ms before the last rank entered it", r,
           (double)(last_enter - all[2 * r + 1]) / 1e6);
    }
  }
  free(all);
  free(a);
  free(b);
  free(want);
  free(x);
  free(y);
}

static void suite(int round) {
  ring(round);
  all_pairs(round);
  collectives(round);
  printf("ok: rank %d round %d (p2p ring, any-source, all pairs, 9 collectives)\n", g_rank,
         round);
}

static void init(const char* hosts) {
  set_check("hcomm_comm_init");
  double t0 = mono_s();
  CALL(hcomm_comm_init(NULL, &g_comm));
  CALL(hcomm_comm_rank(g_comm, &g_rank));
  CALL(hcomm_comm_size(g_comm, &g_size));
  if ((size_t)g_size != strlen(hosts)) {
    fail("HOSTMAP \"%s\" names %zu ranks, the job has %d", hosts, strlen(hosts), g_size);
  }
  g_hosts = hosts;
  printf("rank %d: joined %d ranks on host %c in %.2f s\n", g_rank, g_size, hosts[g_rank],
         mono_s() - t0);
}

static void destroy(void) {
  set_check("hcomm_comm_destroy");
  CALL(hcomm_comm_destroy(g_comm));
  g_comm = NULL;
}

/* ------------------------------------------------------------------------ */
/* Modes                                                                    */

static int healthy(void) {
  check_transports();
  for (int round = 0; round < 3; ++round) suite(round);
  destroy();
  printf("ok: all\n");
  return 0;
}

/* Reports the first failure of the loop and leaves. */
static int broken(const char* op, int round, hcomm_status_t st, double last_ok,
                  hcomm_request_t* reqs, int nreqs) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  const double at = epoch_s();
  printf("rank %d: error: round %d %s returned %s at %.3f (%.2f s after the last success): %s\n",
         g_rank, round, op, hcomm_status_string(st), at, mono_s() - last_ok, message);
  for (int i = 0; i < nreqs; ++i) hcomm_request_free(reqs[i]);
  const double t0 = mono_s();
  hcomm_status_t d = hcomm_comm_destroy(g_comm);
  printf("rank %d: hcomm_comm_destroy returned %s after %.2f s\n", g_rank,
         hcomm_status_string(d), mono_s() - t0);
  return kExitBroken;
}

static int loop(const char* dir) {
  check_transports();
  uint64_t* a = (uint64_t*)xmalloc(8 * kLoopCount);
  uint64_t* b = (uint64_t*)xmalloc(8 * kLoopCount);
  uint64_t* want = (uint64_t*)xmalloc(8 * kLoopCount);
  uint8_t* out = (uint8_t*)xmalloc(kLoopMaxP2p * (size_t)g_size);
  uint8_t* in = (uint8_t*)xmalloc(kLoopMaxP2p * (size_t)g_size);
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  const double start = mono_s();
  double last_ok = start;
  hcomm_status_t st;
  for (int round = 0;; ++round) {
    /* allreduce */
    set_check("loop round %d: allreduce", round);
    const uint64_t s = seed_of(30, (uint64_t)round, 0, 0);
    const size_t n = kLoopCount - (size_t)(round % 5) * 500;
    for (size_t i = 0; i < n; ++i) {
      a[i] = contribution(s, g_rank, i);
      want[i] = 0;
      for (int r = 0; r < g_size; ++r) want[i] += contribution(s, r, i);
    }
    st = hcomm_allreduce(a, b, n, HCOMM_UINT64, HCOMM_SUM, g_comm);
    if (st != HCOMM_SUCCESS) return broken("allreduce", round, st, last_ok, NULL, 0);
    check_u64("allreduce result", b, want, n);
    last_ok = mono_s();

    /* p2p ring, eager and rendezvous sizes */
    set_check("loop round %d: p2p ring", round);
    const size_t m = ((size_t)round * 7919u + (size_t)g_rank * 104729u) % kLoopMaxP2p;
    const size_t want_m = ((size_t)round * 7919u + (size_t)left * 104729u) % kLoopMaxP2p;
    hcomm_request_t reqs[2] = {NULL, NULL};
    fill(out, m, seed_of(31, (uint64_t)round, g_rank, right));
    st = hcomm_irecv(in, kLoopMaxP2p, HCOMM_UINT8, left, kTagLoop, g_comm, &reqs[0]);
    if (st != HCOMM_SUCCESS) return broken("irecv", round, st, last_ok, reqs, 0);
    st = hcomm_isend(out, m, HCOMM_UINT8, right, kTagLoop, g_comm, &reqs[1]);
    if (st != HCOMM_SUCCESS) return broken("isend", round, st, last_ok, reqs, 1);
    st = hcomm_waitall(2, reqs);
    if (st != HCOMM_SUCCESS) return broken("waitall (p2p ring)", round, st, last_ok, reqs, 2);
    size_t count = 0;
    CALL(hcomm_request_info(reqs[0], NULL, NULL, &count));
    if (count != want_m) fail("ring message of %zu bytes, want %zu", count, want_m);
    check_bytes("ring message", in, count, seed_of(31, (uint64_t)round, left, g_rank));
    CALL(hcomm_request_free(reqs[0]));
    CALL(hcomm_request_free(reqs[1]));
    last_ok = mono_s();

    /* alltoall every 4th round: every link at once */
    if (round % 4 == 3) {
      set_check("loop round %d: alltoall", round);
      const size_t blk = 20000;
      for (int j = 0; j < g_size; ++j) {
        fill(out + blk * (size_t)j, blk, seed_of(32, (uint64_t)round, g_rank, j));
      }
      st = hcomm_alltoall(out, in, blk, HCOMM_UINT8, g_comm);
      if (st != HCOMM_SUCCESS) return broken("alltoall", round, st, last_ok, NULL, 0);
      for (int i = 0; i < g_size; ++i) {
        check_bytes("alltoall block", in + blk * (size_t)i, blk,
                    seed_of(32, (uint64_t)round, i, g_rank));
      }
      last_ok = mono_s();
    }

    if (round == 10) signal_file(dir, "running");
    if (round % 100 == 0) printf("rank %d: round %d ok\n", g_rank, round);
    if (mono_s() - start > 150) fail("no failure after %d rounds in 150 s", round);
  }
}

/* Open descriptors of this process (without the one that lists them). */
static int open_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int store_gone(const char* dir) {
  check_transports();
  suite(0);
  suite(1);
  printf("rank %d: %d fds with the store up\n", g_rank, open_fds());
  signal_file(dir, "ready");
  wait_for_file(dir, "go1", 90);
  printf("rank %d: store unreachable; running on\n", g_rank);
  for (int round = 2; round < 7; ++round) suite(round);

  /* A new communicator needs no store: split by host, collectives on it. */
  set_check("split by host after the store went away");
  hcomm_comm_t half = NULL;
  CALL(hcomm_comm_split(g_comm, g_hosts[g_rank], g_rank, &half));
  int hr = -1, hs = 0, mates = 0;
  CALL(hcomm_comm_rank(half, &hr));
  CALL(hcomm_comm_size(half, &hs));
  for (int r = 0; r < g_size; ++r) mates += g_hosts[r] == g_hosts[g_rank];
  if (hs != mates) fail("split by host: %d ranks, want %d", hs, mates);
  uint64_t v = (uint64_t)g_rank + 1, sum = 0, want = 0;
  for (int r = 0; r < g_size; ++r) want += g_hosts[r] == g_hosts[g_rank] ? (uint64_t)r + 1 : 0;
  CALL(hcomm_allreduce(&v, &sum, 1, HCOMM_UINT64, HCOMM_SUM, half));
  if (sum != want) fail("allreduce on the host communicator: %" PRIu64 ", want %" PRIu64, sum, want);
  CALL(hcomm_comm_destroy(half));
  printf("ok: rank %d split by host after the store went away (%d of %d)\n", g_rank, hr, hs);

  printf("rank %d: %d fds with the store unreachable\n", g_rank, open_fds());
  signal_file(dir, "done1");
  wait_for_file(dir, "go2", 90);
  printf("rank %d: store sockets destroyed; running on\n", g_rank);
  for (int round = 7; round < 12; ++round) suite(round);

  /* Nothing of the library may spin while we are idle (e.g. the store's
   * accept loop on a listener that was torn down under it). */
  set_check("idle CPU after the store went away");
  CALL(hcomm_barrier(g_comm));
  const double c0 = cpu_s(), w0 = mono_s();
  sleep_ms(1000);
  printf("rank %d: idle cpu %.0f ms over %.0f ms\n", g_rank, (cpu_s() - c0) * 1e3,
         (mono_s() - w0) * 1e3);
  printf("rank %d: %d fds with the store's sockets gone\n", g_rank, open_fds());
  CALL(hcomm_barrier(g_comm));
  destroy();
  printf("ok: all\n");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* rank_env = getenv("HCOMM_RANK"); /* for messages before init */
  if (rank_env != NULL) g_rank = atoi(rank_env);
  if (argc < 3) {
    fprintf(stderr, "usage: multihost_rank healthy|loop|store-gone HOSTMAP [DIR]\n");
    return 2;
  }
  const char* mode = argv[1];
  const int needs_dir = strcmp(mode, "loop") == 0 || strcmp(mode, "store-gone") == 0;
  if (!needs_dir && strcmp(mode, "healthy") != 0) {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (needs_dir && argc < 4) {
    fprintf(stderr, "usage: multihost_rank %s HOSTMAP DIR\n", mode);
    return 2;
  }
  init(argv[2]);
  if (strcmp(mode, "loop") == 0) return loop(argv[3]);
  if (strcmp(mode, "store-gone") == 0) return store_gone(argv[3]);
  return healthy();
}
