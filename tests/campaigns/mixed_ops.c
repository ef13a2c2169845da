/* mixed_ops: one rank of a kill campaign (kill_campaign.sh) or of the soak
 * (soak.sh). C99 over the public header; the ranks get HCOMM_RANK,
 * HCOMM_WORLD_SIZE, HCOMM_STORE_ADDR, ... from whoever starts them.
 *
 *   mixed_ops [-n OPS] [-s SEED] [-t TIMEOUT_MS] [-d DIR] [-m MAX_BYTES]
 *     OPS operations (default 1000), the same seeded sequence on every rank:
 *     allreduce (int32 sum), broadcast (root varies), allgather, barrier and
 *     a point-to-point ring (each rank sends to rank+1 and receives from
 *     rank-1, isend/irecv), of 8 B .. MAX_BYTES (default 1 MiB, sizes spread
 *     evenly over the powers of two). Every result is checked against a
 *     pattern computed here. With -d, each rank writes DIR/ready.R once init
 *     and a first barrier are done: from then on no rank is in init, so a
 *     kill leaves no /dev/shm segment behind (they are unlinked once every
 *     local rank has attached).
 *
 *   mixed_ops -S [-n OPS] [-t TIMEOUT_MS]
 *     The soak: 2 ranks, OPS small operations alternating an 8-byte
 *     allreduce and an 8-byte exchange between the two ranks; each rank
 *     reads its VmRSS from /proc/self/status after every tenth of the
 *     operations and prints "rss: rank R ops N vmrss_kb K".
 *
 * On the first error a rank prints one line
 *   rank R: op K (<kind>): <HCOMM_ERR_...>: <hcomm_last_error()>
 * then "rank R: op K failed after X s in the call, Y s after op K-1 ended"
 * (the kill that caused it cannot be earlier than op K-1's end unless it
 * was already pending), destroys the communicator (timeout_ms lowered to
 * 3000) and exits 3 (PEER_FAILURE), 4 (TIMEOUT) or 5 (any other code). A
 * wrong result exits 1, bad usage 2. Success prints
 * "rank R: ok: N ops in X s" and exits 0.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hcomm/hcomm.h"

enum { kExitWrong = 1, kExitUsage = 2, kExitPeer = 3, kExitTimeout = 4, kExitOther = 5 };
enum { kTagRing = 100, kTagSoak = 200 };

static hcomm_comm_t g_comm = NULL;
static int g_rank = -1;
static int g_size = 0;
static double g_op_start = 0.0;   /* when the current op's call started */
static double g_last_done = 0.0;  /* when the previous op ended */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int exit_code_of(hcomm_status_t st) {
  if (st == HCOMM_ERR_PEER_FAILURE) return kExitPeer;
  if (st == HCOMM_ERR_TIMEOUT) return kExitTimeout;
  return kExitOther;
}

/* Reports the failed call and ends the process (see the file comment). */
static void die(long op, const char* kind, hcomm_status_t st) {
  double t = now_s();
  /* Copy first: hcomm_last_error() is overwritten by the next call. */
  static char message[65536];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  printf("rank %d: op %ld (%s): %s: %s\n", g_rank, op, kind, hcomm_status_string(st), message);
  printf("rank %d: op %ld failed after %.3f s in the call, %.3f s after op %ld ended\n", g_rank,
         op, t - g_op_start, t - g_last_done, op - 1);
  fflush(stdout);
  if (g_comm != NULL) {
    hcomm_comm_set(g_comm, "timeout_ms", "3000");
    hcomm_comm_destroy(g_comm);
  }
  exit(exit_code_of(st));
}

#define CALL(op, kind, expr)                           \
  do {                                                 \
    g_op_start = now_s();                              \
    hcomm_status_t st_ = (expr);                       \
    if (st_ != HCOMM_SUCCESS) die((op), (kind), st_);  \
    g_last_done = now_s();                             \
  } while (0)

static void wrong(long op, const char* kind, size_t index, int32_t got, int32_t want) {
  printf("rank %d: op %ld (%s): WRONG RESULT: element %zu is %" PRId32 ", expected %" PRId32
         "\n", g_rank, op, kind, index, got, want);
  fflush(stdout);
  exit(kExitWrong);
}

/* splitmix64: the op sequence, the same on every rank for one seed. */
static uint64_t g_rng;
static uint64_t next_rand(void) {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The value rank r contributes at element i of op k: 22 bits, so that a sum
 * over up to 512 ranks stays in an int32. */
static int32_t val(long k, int r, size_t i) {
  uint32_t x = (uint32_t)k * 2654435761u ^ (uint32_t)r * 40503u ^ (uint32_t)i * 2246822519u;
  x ^= x >> 15;
  return (int32_t)(x & 0x3fffff);
}

static void fill(int32_t* buf, size_t n, long k, int r) {
  for (size_t i = 0; i < n; ++i) buf[i] = val(k, r, i);
}

static void check(const int32_t* buf, size_t n, long k, int r, const char* kind) {
  for (size_t i = 0; i < n; ++i) {
    if (buf[i] != val(k, r, i)) wrong(k, kind, i, buf[i], val(k, r, i));
  }
}

static void signal_ready(const char* dir) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.ready.%d.tmp", dir, g_rank);
  snprintf(path, sizeof path, "%s/ready.%d", dir, g_rank);
  FILE* f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0 ||
      rename(tmp, path) != 0) {
    fprintf(stderr, "rank %d: cannot write %s\n", g_rank, path);
    exit(kExitOther);
  }
}

static long vmrss_kb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) {
      kb = strtol(line + 6, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kb;
}

static int run_mixed(long ops, uint64_t seed, size_t max_bytes) {
  size_t max_count = max_bytes / 4;
  /* The largest buffer: an allgather of max_count elements in all. */
  int32_t* a = malloc(max_count * sizeof(int32_t));
  int32_t* b = malloc(max_count * sizeof(int32_t));
  int32_t* want = malloc(max_count * sizeof(int32_t));
  if (a == NULL || b == NULL || want == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", g_rank);
    return kExitOther;
  }
  int max_shift = 0;
  while (((size_t)8 << (max_shift + 1)) <= max_bytes) ++max_shift;
  long counts[5] = {0, 0, 0, 0, 0};
  static const char* const kKinds[5] = {"allreduce", "broadcast", "allgather", "barrier",
                                        "p2p ring"};
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  double t0 = now_s();
  g_rng = seed;
  for (long k = 1; k <= ops; ++k) {
    uint64_t x = next_rand();
    /* allreduce 30%, broadcast 20%, allgather 15%, barrier 10%, p2p 25% */
    int pick = (int)(x % 100);
    int kind = pick < 30 ? 0 : pick < 50 ? 1 : pick < 65 ? 2 : pick < 75 ? 3 : 4;
    size_t bytes = (size_t)8 << ((x >> 8) % (uint64_t)(max_shift + 1));
    size_t n = bytes / 4;
    const char* name = kKinds[kind];
    ++counts[kind];
    if (kind == 0) {
      fill(a, n, k, g_rank);
      CALL(k, name, hcomm_allreduce(a, b, n, HCOMM_INT32, HCOMM_SUM, g_comm));
      for (size_t i = 0; i < n; ++i) {
        int32_t s = 0;
        for (int r = 0; r < g_size; ++r) s += val(k, r, i);
        if (b[i] != s) wrong(k, name, i, b[i], s);
      }
    } else if (kind == 1) {
      int root = (int)((x >> 32) % (uint64_t)g_size);
      if (g_rank == root) fill(a, n, k, root); else memset(a, 0, n * 4);
      CALL(k, name, hcomm_broadcast(a, n, HCOMM_INT32, root, g_comm));
      check(a, n, k, root, name);
    } else if (kind == 2) {
      size_t per = n / (size_t)g_size;
      if (per == 0) per = 1;
      if (per * (size_t)g_size > max_count) per = max_count / (size_t)g_size;
      fill(a, per, k, g_rank);
      CALL(k, name, hcomm_allgather(a, b, per, HCOMM_INT32, g_comm));
      for (int r = 0; r < g_size; ++r) check(b + (size_t)r * per, per, k, r, name);
    } else if (kind == 3) {
      CALL(k, name, hcomm_barrier(g_comm));
    } else {
      hcomm_request_t reqs[2] = {NULL, NULL};
      fill(a, n, k, g_rank);
      memset(want, 0xff, n * 4);
      CALL(k, name, hcomm_irecv(want, n, HCOMM_INT32, prev, kTagRing, g_comm, &reqs[0]));
      CALL(k, name, hcomm_isend(a, n, HCOMM_INT32, next, kTagRing, g_comm, &reqs[1]));
      CALL(k, name, hcomm_waitall(2, reqs));
      hcomm_request_free(reqs[0]);
      hcomm_request_free(reqs[1]);
      check(want, n, k, prev, name);
    }
  }
  double dt = now_s() - t0;
  g_op_start = now_s();
  hcomm_status_t st = hcomm_comm_destroy(g_comm);
  g_comm = NULL;
  if (st != HCOMM_SUCCESS) die(ops + 1, "destroy", st);
  printf("rank %d: ok: %ld ops in %.2f s (allreduce %ld, broadcast %ld, allgather %ld, "
         "barrier %ld, p2p %ld)\n",
         g_rank, ops, dt, counts[0], counts[1], counts[2], counts[3], counts[4]);
  free(a);
  free(b);
  free(want);
  return 0;
}

static int run_soak(long ops) {
  if (g_size != 2) {
    fprintf(stderr, "rank %d: the soak needs exactly 2 ranks, not %d\n", g_rank, g_size);
    return kExitUsage;
  }
  int32_t a[2], b[2], in[2];
  int other = 1 - g_rank;
  long tenth = ops / 10 > 0 ? ops / 10 : 1;
  double t0 = now_s();
  for (long k = 1; k <= ops; ++k) {
    a[0] = (int32_t)k;
    a[1] = g_rank;
    if (k % 2 == 1) {
      CALL(k, "allreduce 8 B", hcomm_allreduce(a, b, 2, HCOMM_INT32, HCOMM_SUM, g_comm));
      if (b[0] != (int32_t)(2 * k)) wrong(k, "allreduce 8 B", 0, b[0], (int32_t)(2 * k));
      if (b[1] != 1) wrong(k, "allreduce 8 B", 1, b[1], 1);
    } else {
      hcomm_request_t reqs[2] = {NULL, NULL};
      CALL(k, "p2p 8 B", hcomm_irecv(in, 2, HCOMM_INT32, other, kTagSoak, g_comm, &reqs[0]));
      CALL(k, "p2p 8 B", hcomm_isend(a, 2, HCOMM_INT32, other, kTagSoak, g_comm, &reqs[1]));
      CALL(k, "p2p 8 B", hcomm_waitall(2, reqs));
      hcomm_request_free(reqs[0]);
      hcomm_request_free(reqs[1]);
      if (in[0] != (int32_t)k) wrong(k, "p2p 8 B", 0, in[0], (int32_t)k);
      if (in[1] != other) wrong(k, "p2p 8 B", 1, in[1], other);
    }
    if (k % tenth == 0 || k == ops) {
      printf("rss: rank %d ops %ld vmrss_kb %ld t %.2f\n", g_rank, k, vmrss_kb(), now_s() - t0);
      fflush(stdout);
    }
  }
  double dt = now_s() - t0;
  hcomm_status_t st = hcomm_comm_destroy(g_comm);
  g_comm = NULL;
  if (st != HCOMM_SUCCESS) die(ops + 1, "destroy", st);
  printf("rank %d: ok: %ld ops in %.2f s (%.1f us/op)\n", g_rank, ops, dt, dt * 1e6 / (double)ops);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: mixed_ops [-n OPS] [-s SEED] [-t TIMEOUT_MS] [-d DIR] [-m MAX_BYTES]\n"
          "       mixed_ops -S [-n OPS] [-t TIMEOUT_MS]\n");
  exit(kExitUsage);
}

int main(int argc, char** argv) {
  long ops = 1000;
  uint64_t seed = 1;
  const char* timeout_ms = "20000";
  const char* dir = NULL;
  size_t max_bytes = 1 << 20;
  int soak = 0;
  int c;
  while ((c = getopt(argc, argv, "n:s:t:d:m:S")) != -1) {
    switch (c) {
      case 'n': ops = strtol(optarg, NULL, 10); break;
      case 's': seed = strtoull(optarg, NULL, 10); break;
      case 't': timeout_ms = optarg; break;
      case 'd': dir = optarg; break;
      case 'm': max_bytes = (size_t)strtoull(optarg, NULL, 10); break;
      case 'S': soak = 1; break;
      default: usage();
    }
  }
  if (optind != argc || ops <= 0 || max_bytes < 8) usage();
  setvbuf(stdout, NULL, _IOLBF, 0);

  g_op_start = g_last_done = now_s();
  CALL(0, "init", hcomm_comm_init(NULL, &g_comm));
  hcomm_comm_rank(g_comm, &g_rank);
  hcomm_comm_size(g_comm, &g_size);
  CALL(0, "set timeout_ms", hcomm_comm_set(g_comm, "timeout_ms", timeout_ms));
  CALL(0, "first barrier", hcomm_barrier(g_comm));
  if (g_size > 1) {
    const char *to_next = "?", *to_prev = "?";
    hcomm_comm_transport(g_comm, (g_rank + 1) % g_size, &to_next);
    hcomm_comm_transport(g_comm, (g_rank + g_size - 1) % g_size, &to_prev);
    printf("rank %d: pid %ld, %d ranks, to rank %d over %s, to rank %d over %s\n", g_rank,
           (long)getpid(), g_size, (g_rank + 1) % g_size, to_next,
           (g_rank + g_size - 1) % g_size, to_prev);
  }
  if (dir != NULL) signal_ready(dir);
  return soak ? run_soak(ops) : run_mixed(ops, seed, max_bytes);
}
