/* soak: a long random mix of point-to-point messages and collectives, every
 * byte checked, with each rank's resources sampled along the way (C99,
 * public API). Started by tools/soak.sh through the launcher:
 *
 *   hcomm_run -n 4 -- soak OPS [SEED]
 *
 * Every rank draws the same sequence from SEED, so all know the whole plan:
 * a step is either a p2p round (60%) or one collective (40%: allreduce 40%,
 * broadcast, allgather, alltoall 20% each).
 *   - p2p round: 1..8 messages, each with a random sender, receiver (itself
 *     included), size (log-uniform over 0..1 MiB, 5% empty) and tag (random
 *     low 16 bits, unique per receiver in the round; bits 16..27 are the
 *     round mod 4096, so rounds never match each other). A third of the
 *     receives are HCOMM_ANY_SOURCE, with capacity 1 MiB; the others name
 *     the sender and have exactly the message's size. Each rank posts its
 *     irecvs, then its isends, then waits for all of them.
 *   - collective: random total size (log-uniform up to 1 MiB); allreduce
 *     with a random (dtype, op) out of (uint64, sum), (uint32, max),
 *     (int32, min), (uint8, sum), (float64, sum of small integers, exact);
 *     broadcast from a random root; allgather; alltoall.
 * An operation is one message (its isend and irecv) or one collective call.
 *
 * Checks: every message arrives whole (hcomm_request_info: sender, tag,
 * size) with the bytes its sender generated; every collective result equals
 * the reference computed here. A wrong sender/tag/size is "lost" (it went to
 * the wrong receive or was cut), a wrong byte "corrupted". Any hcomm error
 * ends the run (printed with hcomm_last_error(); exit 1).
 *
 * Resources, sampled by every rank at the start, every INTERVAL operations
 * (10^4, or OPS/10 when smaller) and at the end, and printed by rank 0:
 *   rss    VmRSS of /proc/self/status (kB), with its RssAnon and RssShmem
 *   heap   bytes malloc'd and not freed (mallinfo2, all arenas, kB): shows
 *          whether an RSS trend is retained memory or only touched pages
 *   fds    entries of /proc/self/fd
 *   maps   distinct /dev/shm/hcomm-* files this process maps (/proc/self/maps)
 *   shm    /dev/shm/hcomm-* entries of this job (named after the segment key
 *          seen in maps; the library unlinks them once every rank attached)
 *   host   all /dev/shm/hcomm-* entries on the host (other jobs included:
 *          informational only)
 * The program's own buffers (18 MiB) are allocated and touched before the
 * first sample. The warm-up is the first INTERVAL operations. PASS needs:
 * no lost or corrupted data, RSS at the end < 110% of RSS after warm-up,
 * fds and maps at the end no more than after warm-up, no shm entry of this
 * job left. Rank 0 prints "soak: PASS" or "soak: FAIL: <reasons>"; every
 * rank exits 0 on PASS, 1 otherwise (2 on bad usage).
 * SOAK_KINDS=p2p (only p2p rounds) or =coll (only collectives) narrows the
 * mix, to tell where a trend comes from.
 */
#define _GNU_SOURCE /* mallinfo2 */

#include <dirent.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcomm/hcomm.h"

enum {
  kMaxBytes = 1 << 20,
  kMaxMessages = 8, /* per p2p round */
  kNumRes = 8,      /* rss, anon, shmem, heap, fds, maps, shm, host */
  kRssTolerancePct = 10,
};

static const char* const kResNames[kNumRes] = {"rss_kB", "anon_kB", "shmem_kB", "heap_kB",
                                                 "fds",    "maps",    "shm",      "host"};

static hcomm_comm_t g_comm = NULL;
static int g_rank = -1;
static int g_size = 0;
static char g_what[256] = "init";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void set_what(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_what, sizeof g_what, fmt, ap);
  va_end(ap);
}

static void die(const char* fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "FAIL: rank %d: %s: ", g_rank, g_what);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

static void die_call(const char* call, hcomm_status_t st) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  die("%s returned %s: %s", call, hcomm_status_string(st), message);
}

#define CALL(expr)                                  \
  do {                                              \
    hcomm_status_t st_ = (expr);                    \
    if (st_ != HCOMM_SUCCESS) die_call(#expr, st_); \
  } while (0)

static void* xmalloc(size_t n) {
  void* p = malloc(n == 0 ? 1 : n);
  if (p == NULL) die("out of memory (%zu bytes)", n);
  return p;
}

/* ------------------------------------------------------------------------ */
/* The shared plan and the generated data                                   */

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t g_plan; /* the plan's generator: identical on every rank */

static uint64_t draw(void) { return mix64(g_plan++); }

static uint64_t draw_below(uint64_t n) { return n == 0 ? 0 : draw() % n; }

/* 0..max bytes, log-uniform (5% empty). */
static size_t draw_size(size_t max) {
  if (draw_below(20) == 0) return 0;
  unsigned bits = 1 + (unsigned)draw_below(21); /* 1..21 */
  size_t n = (size_t)draw_below((uint64_t)1 << bits);
  return n > max ? max : n;
}

/* The bytes of one buffer: word k of seed s is mix64(s + k). */
static void fill(void* buf, size_t n, uint64_t seed) {
  uint8_t* b = (uint8_t*)buf;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = mix64(seed + i / 8);
    memcpy(b + i, &w, 8);
  }
  if (i < n) {
    uint64_t w = mix64(seed + i / 8);
    memcpy(b + i, &w, n - i);
  }
}

/* Index of the first byte that differs from fill(seed), or n. */
static size_t first_bad(const void* buf, size_t n, uint64_t seed) {
  const uint8_t* b = (const uint8_t*)buf;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = mix64(seed + i / 8), got;
    memcpy(&got, b + i, 8);
    if (got != w) break;
  }
  for (; i < n; ++i) {
    uint64_t w = mix64(seed + i / 8);
    if (b[i] != (uint8_t)(w >> (8 * (i % 8)))) return i;
  }
  return n;
}

static uint64_t fnv1a(const void* buf, size_t n) {
  const uint8_t* b = (const uint8_t*)buf;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* ------------------------------------------------------------------------ */
/* Counters                                                                 */

static uint64_t g_ops, g_messages, g_msg_bytes, g_colls[4], g_coll_bytes;
static uint64_t g_lost, g_corrupted;
static const char* const kCollNames[4] = {"allreduce", "broadcast", "allgather", "alltoall"};

static void corrupted(const char* what, const void* got, size_t n, size_t at, uint64_t seed) {
  uint8_t* want = (uint8_t*)xmalloc(n);
  fill(want, n, seed);
  fprintf(stderr,
          "CORRUPT: rank %d: %s: %s (%zu bytes): first difference at byte %zu; checksum got "
          "%016" PRIx64 " want %016" PRIx64 "\n",
          g_rank, g_what, what, n, at, fnv1a(got, n), fnv1a(want, n));
  free(want);
  ++g_corrupted;
}

/* ------------------------------------------------------------------------ */
/* p2p rounds                                                               */

typedef struct {
  int src, dst, tag, any;
  size_t size;
  uint64_t seed;
} Message;

static uint8_t* g_send[kMaxMessages];
static uint8_t* g_recv[kMaxMessages];

static void p2p_round(uint64_t round) {
  Message m[kMaxMessages];
  const int count = 1 + (int)draw_below(kMaxMessages);
  for (int i = 0; i < count; ++i) {
    m[i].src = (int)draw_below((uint64_t)g_size);
    m[i].dst = (int)draw_below((uint64_t)g_size);
    m[i].size = draw_size(kMaxBytes);
    m[i].any = draw_below(3) == 0;
    m[i].seed = draw();
    for (;;) { /* unique per receiver within the round */
      m[i].tag = (int)(((round % 4096) << 16) | draw_below(1 << 16));
      int dup = 0;
      for (int j = 0; j < i; ++j) dup |= m[j].dst == m[i].dst && m[j].tag == m[i].tag;
      if (!dup) break;
    }
  }
  set_what("p2p round %" PRIu64 " (%d messages)", round, count);

  hcomm_request_t reqs[2 * kMaxMessages];
  int recv_of[kMaxMessages]; /* message index of each receive */
  int nreqs = 0, nrecv = 0, nsend = 0;
  for (int i = 0; i < count; ++i) {
    if (m[i].dst != g_rank) continue;
    memset(g_recv[nrecv], 0xA5, 16);
    CALL(hcomm_irecv(g_recv[nrecv], m[i].any ? kMaxBytes : m[i].size, HCOMM_UINT8,
                     m[i].any ? HCOMM_ANY_SOURCE : m[i].src, m[i].tag, g_comm, &reqs[nreqs++]));
    recv_of[nrecv++] = i;
  }
  for (int i = 0; i < count; ++i) {
    if (m[i].src != g_rank) continue;
    fill(g_send[nsend], m[i].size, m[i].seed);
    CALL(hcomm_isend(g_send[nsend], m[i].size, HCOMM_UINT8, m[i].dst, m[i].tag, g_comm,
                     &reqs[nreqs++]));
    ++nsend;
  }
  CALL(hcomm_waitall(nreqs, reqs));
  for (int k = 0; k < nrecv; ++k) {
    const Message* w = &m[recv_of[k]];
    int src = -1, tag = -1;
    size_t got = 0;
    CALL(hcomm_request_info(reqs[k], &src, &tag, &got));
    if (src != w->src || tag != w->tag || got != w->size) {
      fprintf(stderr,
              "LOST: rank %d: %s: expected %zu bytes from rank %d tag %d%s, the receive got "
              "%zu bytes from rank %d tag %d\n",
              g_rank, g_what, w->size, w->src, w->tag, w->any ? " (any source)" : "", got, src,
              tag);
      ++g_lost;
      continue;
    }
    size_t at = first_bad(g_recv[k], got, w->seed);
    if (at != got) corrupted("message", g_recv[k], got, at, w->seed);
  }
  for (int k = 0; k < nreqs; ++k) CALL(hcomm_request_free(reqs[k]));
  for (int i = 0; i < count; ++i) {
    ++g_ops;
    ++g_messages;
    g_msg_bytes += m[i].size;
  }
}

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */

static uint8_t* g_a; /* size * 1 MiB each */
static uint8_t* g_b;

/* Element i of rank r's allreduce contribution, as 64 random bits. */
static uint64_t contrib(uint64_t seed, int r, size_t i) {
  return mix64(seed ^ ((uint64_t)r << 48) ^ (uint64_t)i);
}

static void collective(uint64_t step) {
  const int kind = (int)draw_below(5); /* 0, 1: allreduce; 2 broadcast; 3 allgather; 4 alltoall */
  const size_t total = draw_size(kMaxBytes);
  const uint64_t seed = draw();
  const int c = kind <= 1 ? 0 : kind - 1;
  set_what("step %" PRIu64 ": %s of %zu bytes", step, kCollNames[c], total);
  if (c == 0) {
    static const hcomm_dtype_t kDtype[5] = {HCOMM_UINT64, HCOMM_UINT32, HCOMM_INT32, HCOMM_UINT8,
                                            HCOMM_FLOAT64};
    static const hcomm_reduce_op_t kOp[5] = {HCOMM_SUM, HCOMM_MAX, HCOMM_MIN, HCOMM_SUM,
                                             HCOMM_SUM};
    static const size_t kElem[5] = {8, 4, 4, 1, 8};
    const int v = (int)draw_below(5);
    const size_t n = total / kElem[v];
    for (size_t i = 0; i < n; ++i) {
      uint64_t x = contrib(seed, g_rank, i);
      switch (v) {
        case 0: ((uint64_t*)g_a)[i] = x; break;
        case 1: ((uint32_t*)g_a)[i] = (uint32_t)x; break;
        case 2: ((int32_t*)g_a)[i] = (int32_t)(uint32_t)x; break;
        case 3: g_a[i] = (uint8_t)x; break;
        default: ((double*)g_a)[i] = (double)(int)(x % 2001) - 1000.0; break;
      }
    }
    CALL(hcomm_allreduce(g_a, g_b, n, kDtype[v], kOp[v], g_comm));
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; ++i) {
      uint64_t s64 = 0;
      uint32_t mx = 0;
      int32_t mn = INT32_MAX;
      uint8_t s8 = 0;
      double sd = 0;
      for (int r = 0; r < g_size; ++r) {
        uint64_t x = contrib(seed, r, i);
        s64 += x;
        if ((uint32_t)x > mx) mx = (uint32_t)x;
        if ((int32_t)(uint32_t)x < mn) mn = (int32_t)(uint32_t)x;
        s8 = (uint8_t)(s8 + (uint8_t)x);
        sd += (double)(int)(x % 2001) - 1000.0;
      }
      int ok;
      switch (v) {
        case 0: ok = ((uint64_t*)g_b)[i] == s64; break;
        case 1: ok = ((uint32_t*)g_b)[i] == mx; break;
        case 2: ok = ((int32_t*)g_b)[i] == mn; break;
        case 3: ok = g_b[i] == s8; break;
        default: ok = ((double*)g_b)[i] == sd; break;
      }
      if (!ok) bad = i;
    }
    if (bad != n) {
      fprintf(stderr, "CORRUPT: rank %d: %s: element %zu of %zu is wrong (dtype case %d)\n",
              g_rank, g_what, bad, n, v);
      ++g_corrupted;
    }
  } else if (c == 1) {
    const int root = (int)draw_below((uint64_t)g_size);
    if (g_rank == root) fill(g_a, total, seed);
    else memset(g_a, 0, total);
    CALL(hcomm_broadcast(g_a, total, HCOMM_UINT8, root, g_comm));
    size_t at = first_bad(g_a, total, seed);
    if (at != total) corrupted("broadcast buffer", g_a, total, at, seed);
  } else if (c == 2) {
    const size_t n = total / (size_t)g_size;
    fill(g_a, n, seed + (uint64_t)g_rank * 0x100000);
    CALL(hcomm_allgather(g_a, g_b, n, HCOMM_UINT8, g_comm));
    for (int r = 0; r < g_size; ++r) {
      const uint8_t* blk = g_b + n * (size_t)r;
      size_t at = first_bad(blk, n, seed + (uint64_t)r * 0x100000);
      if (at != n) corrupted("allgather block", blk, n, at, seed + (uint64_t)r * 0x100000);
    }
  } else {
    const size_t n = total / (size_t)g_size;
    for (int j = 0; j < g_size; ++j) {
      fill(g_a + n * (size_t)j, n, seed + ((uint64_t)g_rank * 64 + (uint64_t)j) * 0x100000);
    }
    CALL(hcomm_alltoall(g_a, g_b, n, HCOMM_UINT8, g_comm));
    for (int i = 0; i < g_size; ++i) {
      const uint8_t* blk = g_b + n * (size_t)i;
      const uint64_t s = seed + ((uint64_t)i * 64 + (uint64_t)g_rank) * 0x100000;
      size_t at = first_bad(blk, n, s);
      if (at != n) corrupted("alltoall block", blk, n, at, s);
    }
  }
  ++g_ops;
  ++g_colls[c];
  g_coll_bytes += total;
}

/* ------------------------------------------------------------------------ */
/* Resources                                                                */

/* A "Name:   N kB" line of /proc/self/status. */
static int64_t status_kb(const char* name) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  const size_t len = strlen(name);
  int64_t kb = -1;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, name, len) == 0 && line[len] == ':') kb = strtoll(line + len + 1, NULL, 10);
  }
  fclose(f);
  return kb;
}

static int64_t count_dir(const char* path, const char* prefix) {
  DIR* d = opendir(path);
  if (d == NULL) return -1;
  int64_t n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    if (prefix == NULL || strncmp(e->d_name, prefix, strlen(prefix)) == 0) ++n;
  }
  closedir(d);
  return n;
}

/* The segment key of this job ("hcomm-<key>-<rank>"), learnt from the
 * mappings; "" until one is seen (a job with no shm peer has none). */
static char g_key[128] = "";

/* Distinct /dev/shm/hcomm-* files mapped by this process. */
static int64_t mapped_segments(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[1024], seen[64][256];
  int64_t n = 0;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f) != NULL) {
    char* p = strstr(line, "/dev/shm/hcomm-");
    if (p == NULL || strncmp(p, "/dev/shm/hcomm-ch-", 18) == 0) continue;
    p[strcspn(p, " \n")] = '\0';
    int dup = 0;
    for (int64_t i = 0; i < n && i < 64; ++i) dup |= strcmp(seen[i], p) == 0;
    if (dup) continue;
    if (n < 64) snprintf(seen[n], sizeof seen[n], "%s", p);
    ++n;
    if (g_key[0] == '\0') { /* "/dev/shm/hcomm-KEY-RANK": keep "hcomm-KEY-" */
      const char* name = p + strlen("/dev/shm/");
      const char* dash = strrchr(name, '-');
      if (dash != NULL && (size_t)(dash - name + 1) < sizeof g_key) {
        memcpy(g_key, name, (size_t)(dash - name + 1));
        g_key[dash - name + 1] = '\0';
      }
    }
  }
  fclose(f);
  return n;
}

/* Bytes the process has allocated with malloc and not freed (all arenas,
 * mmapped blocks included), in kB. */
static int64_t heap_kb(void) {
  struct mallinfo2 mi = mallinfo2();
  return (int64_t)((mi.uordblks + mi.hblkhd) / 1024);
}

enum { kRss, kAnon, kShmem, kHeap, kFds, kMaps, kShm, kHost };

static void sample(int64_t out[kNumRes]) {
  out[kRss] = status_kb("VmRSS");
  out[kAnon] = status_kb("RssAnon");
  out[kShmem] = status_kb("RssShmem");
  out[kHeap] = heap_kb();
  out[kFds] = count_dir("/proc/self/fd", NULL) - 1; /* less the one listing it */
  out[kMaps] = mapped_segments();
  out[kShm] = g_key[0] != '\0' ? count_dir("/dev/shm", g_key) : 0;
  out[kHost] = count_dir("/dev/shm", "hcomm-");
}

/* Rank 0 keeps every rank's samples: [checkpoint][rank][resource]. */
typedef struct {
  uint64_t ops;
  double seconds;
  int64_t* v; /* size * kNumRes */
} Checkpoint;

static Checkpoint* g_cp;
static int g_ncp;

static void checkpoint(double t0) {
  int64_t mine[kNumRes];
  sample(mine);
  int64_t* all = (int64_t*)xmalloc(sizeof(int64_t) * kNumRes * (size_t)g_size);
  set_what("checkpoint after %" PRIu64 " ops", g_ops);
  CALL(hcomm_gather(mine, g_rank == 0 ? all : NULL, kNumRes, HCOMM_INT64, 0, g_comm));
  Checkpoint* cp = &g_cp[g_ncp++];
  cp->ops = g_ops;
  cp->seconds = now_s() - t0;
  cp->v = all;
  if (g_rank == 0) {
    printf("soak: %7" PRIu64 " ops %8.1f s |", cp->ops, cp->seconds);
    for (int r = 0; r < g_size; ++r) {
      const int64_t* s = all + (size_t)r * kNumRes;
      printf(" r%d rss %" PRId64 " (anon %" PRId64 " shmem %" PRId64 ") heap %" PRId64
             " fds %" PRId64 " maps %" PRId64 " shm %" PRId64 " |",
             r, s[kRss], s[kAnon], s[kShmem], s[kHeap], s[kFds], s[kMaps], s[kShm]);
    }
    printf(" host hcomm-* %" PRId64 "\n", all[kHost]);
    fflush(stdout);
  }
}

/* ------------------------------------------------------------------------ */

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: soak OPS [SEED]   (run by hcomm_run; see tools/soak.sh)\n");
    return 2;
  }
  char* end = NULL;
  const uint64_t ops = strtoull(argv[1], &end, 10);
  if (*argv[1] == '\0' || *end != '\0' || ops == 0) {
    fprintf(stderr, "soak: OPS must be a positive integer, got '%s'\n", argv[1]);
    return 2;
  }
  const uint64_t seed = argc == 3 ? strtoull(argv[2], NULL, 10) : 1;
  /* SOAK_KINDS=p2p or coll restricts the mix (to tell where a trend comes from). */
  const char* kinds_env = getenv("SOAK_KINDS");
  const char kinds = kinds_env == NULL ? 'a' : kinds_env[0];
  const uint64_t interval = ops / 10 < 10000 ? (ops / 10 > 0 ? ops / 10 : 1) : 10000;

  CALL(hcomm_comm_init(NULL, &g_comm));
  CALL(hcomm_comm_rank(g_comm, &g_rank));
  CALL(hcomm_comm_size(g_comm, &g_size));
  for (int i = 0; i < kMaxMessages; ++i) {
    g_send[i] = (uint8_t*)xmalloc(kMaxBytes);
    g_recv[i] = (uint8_t*)xmalloc(kMaxBytes);
    /* Touch every page now, so that RSS growth is the library's. (Not with
     * zeros: the compiler would turn malloc + memset 0 into calloc, which
     * leaves fresh pages untouched.) */
    memset(g_send[i], 0x5A, kMaxBytes);
    memset(g_recv[i], 0x5A, kMaxBytes);
  }
  g_a = (uint8_t*)xmalloc(kMaxBytes);
  g_b = (uint8_t*)xmalloc(kMaxBytes);
  memset(g_a, 0x5A, kMaxBytes);
  memset(g_b, 0x5A, kMaxBytes);
  g_cp = (Checkpoint*)xmalloc(sizeof(Checkpoint) * (size_t)(ops / interval + 3));
  if (g_rank == 0) {
    printf("soak: %" PRIu64 " ops over %d ranks, seed %" PRIu64 ", sampling every %" PRIu64
           " ops\n", ops, g_size, seed, interval);
  }

  g_plan = mix64(seed);
  const double t0 = now_s();
  checkpoint(t0);
  uint64_t next = interval, step = 0, round = 0;
  while (g_ops < ops) {
    const int p2p = draw_below(10) < 6;
    if (kinds == 'p' || (kinds != 'c' && p2p)) p2p_round(round++);
    else collective(step);
    ++step;
    if (g_ops >= next && g_ops < ops) {
      checkpoint(t0);
      while (next <= g_ops) next += interval;
    }
  }
  checkpoint(t0);
  const double seconds = now_s() - t0;

  /* Job-wide totals of the problems. */
  uint64_t bad[2] = {g_lost, g_corrupted}, sum[2];
  set_what("final totals");
  CALL(hcomm_allreduce(bad, sum, 2, HCOMM_UINT64, HCOMM_SUM, g_comm));

  int pass = sum[0] == 0 && sum[1] == 0;
  if (g_rank == 0) {
    const Checkpoint* warm = &g_cp[g_ncp > 2 ? 1 : 0];
    const Checkpoint* last = &g_cp[g_ncp - 1];
    const Checkpoint* first = &g_cp[0];
    char why[4096] = "";
    size_t w = 0;
    printf("soak: %" PRIu64 " ops in %.1f s (%.0f ops/s): %" PRIu64 " messages (%.2f GiB)",
           g_ops, seconds, (double)g_ops / seconds, g_messages, (double)g_msg_bytes / (1 << 30));
    for (int c = 0; c < 4; ++c) printf(", %" PRIu64 " %s", g_colls[c], kCollNames[c]);
    printf(" (%.2f GiB)\n", (double)g_coll_bytes / (1 << 30));
    printf("soak: lost %" PRIu64 ", corrupted %" PRIu64 "\n", sum[0], sum[1]);
    printf("soak: per rank, start / after warm-up (%" PRIu64 " ops) / end:\n", warm->ops);
    for (int r = 0; r < g_size; ++r) {
      const int64_t* s0 = first->v + (size_t)r * kNumRes;
      const int64_t* s1 = warm->v + (size_t)r * kNumRes;
      const int64_t* s2 = last->v + (size_t)r * kNumRes;
      const double growth =
          s1[kRss] > 0 ? 100.0 * (double)(s2[kRss] - s1[kRss]) / (double)s1[kRss] : 0;
      printf("soak:   rank %d:", r);
      for (int k = 0; k < kNumRes; ++k) {
        printf(" %s %" PRId64 "/%" PRId64 "/%" PRId64, kResNames[k], s0[k], s1[k], s2[k]);
        if (k == 0) printf(" (%+.1f%%)", growth);
      }
      printf("\n");
      if (growth >= kRssTolerancePct) {
        w += (size_t)snprintf(why + w, sizeof why - w, " rank %d RSS grew %.1f%% after warm-up;",
                              r, growth);
      }
      if (s2[kFds] > s1[kFds]) {
        w += (size_t)snprintf(why + w, sizeof why - w, " rank %d fds %" PRId64 " -> %" PRId64 ";",
                              r, s1[kFds], s2[kFds]);
      }
      if (s2[kMaps] > s1[kMaps]) {
        w += (size_t)snprintf(why + w, sizeof why - w, " rank %d maps %" PRId64 " -> %" PRId64 ";",
                              r, s1[kMaps], s2[kMaps]);
      }
      if (s2[kShm] != 0) {
        w += (size_t)snprintf(why + w, sizeof why - w, " rank %d sees %" PRId64
                              " /dev/shm entries of this job;", r, s2[kShm]);
      }
      if (w >= sizeof why) w = sizeof why - 1;
    }
    if (sum[0] != 0 || sum[1] != 0) {
      w += (size_t)snprintf(why + w, sizeof why - w, " lost %" PRIu64 ", corrupted %" PRIu64 ";",
                            sum[0], sum[1]);
    }
    if (w > 0) pass = 0;
    if (pass) printf("soak: PASS (RSS growth after warm-up < %d%%, fds/maps flat, no shm left)\n",
                     kRssTolerancePct);
    else printf("soak: FAIL:%s\n", why);
  }
  /* Everyone leaves with rank 0's verdict. */
  int verdict = pass;
  set_what("verdict");
  CALL(hcomm_broadcast(&verdict, 1, HCOMM_INT32, 0, g_comm));
  CALL(hcomm_comm_destroy(g_comm));
  return verdict ? 0 : 1;
}
