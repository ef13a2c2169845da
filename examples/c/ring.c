/* ring: one rank of the C ring example (C99, public API only).
 *
 * Started on every rank by run_ring.sh through hcomm_run:
 *
 *   bazel run //examples/c:ring                  # 4 ranks, 16 MiB
 *   HCOMM_NP=3 bazel run //examples/c:ring -- --bytes 1M
 *
 * Each rank
 *   1. passes a token (an int32 counter that every rank increments) around
 *      the ring twice with hcomm_send / hcomm_recv, checking its value;
 *   2. fills a buffer (default 16 MiB, --bytes N with K/M/G suffixes) with a
 *      pattern seeded by its rank and forwards buffers around the ring with
 *      hcomm_isend / hcomm_irecv + hcomm_waitall, world_size - 1 hops, so
 *      that every rank sees every other rank's buffer. Beside each buffer
 *      goes a small tagged message {origin rank, FNV-1a 64 checksum}; the
 *      receiver checks the buffer against it.
 *
 * Exit status 0 when everything arrived intact; 1 with hcomm_last_error()
 * on stderr otherwise; 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcomm/hcomm.h"

enum { kTagToken = 1, kTagData = 2, kTagChecksum = 3 };
enum { kLaps = 2 };

static int g_rank = -1;

/* Ends the program after a failed hcomm call. The last-error text is copied
 * before any other hcomm call can replace it. */
static void die_hcomm(const char* call, hcomm_status_t status) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  fprintf(stderr, "ring: rank %d: %s failed: %s: %s\n", g_rank, call,
          hcomm_status_string(status), message);
  exit(1);
}

#define CHECK(call)                                   \
  do {                                                \
    hcomm_status_t st_ = (call);                      \
    if (st_ != HCOMM_SUCCESS) die_hcomm(#call, st_);  \
  } while (0)

static void die(const char* what) {
  fprintf(stderr, "ring: rank %d: %s\n", g_rank, what);
  exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t fnv1a64(const unsigned char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

/* A pattern that differs per rank: a 64-bit LCG seeded with the rank. */
static void fill_pattern(unsigned char* p, size_t n, int rank) {
  uint64_t x = 0x2545f4914f6cdd1dULL ^ ((uint64_t)rank * 0x9e3779b97f4a7c15ULL);
  for (size_t i = 0; i < n; i += 8) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t v = x ^ (x >> 29);
    size_t len = n - i < 8 ? n - i : 8;
    memcpy(p + i, &v, len);
  }
}

/* "16 MiB", "64 KiB" or "1000 bytes". */
static void format_bytes(size_t n, char* out, size_t cap) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) {
    snprintf(out, cap, "%zu MiB", n >> 20);
  } else if (n >= 1024 && n % 1024 == 0) {
    snprintf(out, cap, "%zu KiB", n >> 10);
  } else {
    snprintf(out, cap, "%zu bytes", n);
  }
}

/* Parses "16777216", "64K", "16M", "1G". Returns 0 on junk. */
static int parse_size(const char* s, size_t* out) {
  char* end = NULL;
  unsigned long long v;
  if (s == NULL || *s < '0' || *s > '9') return 0;
  v = strtoull(s, &end, 10);
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': v <<= 10; ++end; break;
    case 'm': case 'M': v <<= 20; ++end; break;
    case 'g': case 'G': v <<= 30; ++end; break;
    default: return 0;
  }
  if (*end != '\0' || v > (unsigned long long)SIZE_MAX / 2) return 0;
  *out = (size_t)v;
  return 1;
}

static void usage(const char* problem, const char* arg) {
  fprintf(stderr, "ring_rank: %s '%s'\n", problem, arg);
  fprintf(stderr, "usage: ring_rank [--bytes N]   (N with K/M/G suffix; default 16M)\n"
                  "run it through hcomm_run, e.g. bazel run //examples/c:ring\n");
  exit(2);
}

/* Step 1: the token goes around the ring kLaps times. Rank 0 starts each lap
 * with the value it got back; every rank adds one. After lap L (from 1),
 * rank 0 holds L * size; rank r receives (L - 1) * size + r. */
static void pass_token(hcomm_comm_t comm, int rank, int size) {
  const int left = (rank + size - 1) % size;
  const int right = (rank + 1) % size;
  int32_t token = 0;
  for (int lap = 0; lap < kLaps; ++lap) {
    if (rank == 0) {
      int32_t sent = token + 1;
      CHECK(hcomm_send(&sent, 1, HCOMM_INT32, right, kTagToken, comm));
      printf("rank 0: lap %d: token %" PRId32 " -> rank %d\n", lap + 1, sent, right);
      CHECK(hcomm_recv(&token, 1, HCOMM_INT32, left, kTagToken, comm));
      printf("rank 0: lap %d: token %" PRId32 " back from rank %d\n", lap + 1, token, left);
      if (token != (lap + 1) * size) die("token came back with the wrong value");
    } else {
      CHECK(hcomm_recv(&token, 1, HCOMM_INT32, left, kTagToken, comm));
      if (token != lap * size + rank) die("token arrived with the wrong value");
      int32_t sent = token + 1;
      CHECK(hcomm_send(&sent, 1, HCOMM_INT32, right, kTagToken, comm));
      printf("rank %d: lap %d: token %" PRId32 " from rank %d -> rank %d as %" PRId32 "\n",
             rank, lap + 1, token, left, right, sent);
    }
  }
}

/* Step 2: size - 1 hops; at hop h each rank forwards what it got at hop h-1
 * (its own buffer at hop 0) to the right and receives from the left. */
static void forward_buffers(hcomm_comm_t comm, int rank, int size, size_t bytes) {
  const int left = (rank + size - 1) % size;
  const int right = (rank + 1) % size;
  char human[32];
  unsigned char* cur = malloc(bytes ? bytes : 1);
  unsigned char* next = malloc(bytes ? bytes : 1);
  if (cur == NULL || next == NULL) die("out of memory");
  format_bytes(bytes, human, sizeof human);

  fill_pattern(cur, bytes, rank);
  memset(next, 0, bytes);
  uint64_t out_note[2] = {(uint64_t)rank, fnv1a64(cur, bytes)}; /* {origin, fnv} */
  printf("rank %d: own %s buffer has fnv 0x%016" PRIx64 "\n", rank, human, out_note[1]);

  for (int hop = 0; hop < size - 1; ++hop) {
    uint64_t in_note[2] = {0, 0};
    hcomm_request_t reqs[4] = {NULL, NULL, NULL, NULL};
    double t0 = now_s();
    CHECK(hcomm_irecv(next, bytes, HCOMM_UINT8, left, kTagData, comm, &reqs[0]));
    CHECK(hcomm_irecv(in_note, 2, HCOMM_UINT64, left, kTagChecksum, comm, &reqs[1]));
    CHECK(hcomm_isend(cur, bytes, HCOMM_UINT8, right, kTagData, comm, &reqs[2]));
    CHECK(hcomm_isend(out_note, 2, HCOMM_UINT64, right, kTagChecksum, comm, &reqs[3]));
    CHECK(hcomm_waitall(4, reqs));
    double dt = now_s() - t0;

    size_t got = 0;
    CHECK(hcomm_request_info(reqs[0], NULL, NULL, &got));
    for (int i = 0; i < 4; ++i) CHECK(hcomm_request_free(reqs[i]));

    const int origin = (rank - hop - 1 + 2 * size) % size;
    const uint64_t fnv = fnv1a64(next, got);
    if (got != bytes || in_note[0] != (uint64_t)origin || fnv != in_note[1]) {
      fprintf(stderr,
              "ring: rank %d: hop %d: buffer from rank %d damaged: %zu of %zu bytes, origin "
              "%" PRIu64 " (expected %d), fnv 0x%016" PRIx64 " (announced 0x%016" PRIx64 ")\n",
              rank, hop + 1, left, got, bytes, in_note[0], origin, fnv, in_note[1]);
      exit(1);
    }
    printf("rank %d: %s from rank %d intact (origin rank %d, fnv 0x%016" PRIx64
           ") in %.1f ms, %.2f GB/s\n",
           rank, human, left, origin, fnv, dt * 1e3, dt > 0 ? (double)bytes / dt / 1e9 : 0.0);

    unsigned char* t = cur;
    cur = next;
    next = t;
    out_note[0] = in_note[0];
    out_note[1] = in_note[1];
  }
  free(cur);
  free(next);
}

int main(int argc, char** argv) {
  size_t bytes = (size_t)16 << 20;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) {
      ++i;
      if (!parse_size(argv[i], &bytes)) usage("--bytes is not a size:", argv[i]);
    } else if (strncmp(argv[i], "--bytes=", 8) == 0) {
      if (!parse_size(argv[i] + 8, &bytes)) usage("--bytes is not a size:", argv[i] + 8);
    } else if (strcmp(argv[i], "--bytes") == 0) {
      usage("--bytes needs a value:", argv[i]);
    } else {
      usage("unknown argument", argv[i]);
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  hcomm_comm_t comm = NULL;
  int rank = 0, size = 0;
  CHECK(hcomm_comm_init(NULL, &comm));
  CHECK(hcomm_comm_rank(comm, &rank));
  CHECK(hcomm_comm_size(comm, &size));
  g_rank = rank;
  if (size < 2) die("the ring needs at least 2 ranks (HCOMM_NP >= 2)");

  pass_token(comm, rank, size);
  forward_buffers(comm, rank, size, bytes);

  CHECK(hcomm_comm_destroy(comm));
  printf("rank %d: done\n", rank);
  return 0;
}
