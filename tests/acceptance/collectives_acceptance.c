/* collectives_acceptance: what the collectives, groups and iallreduce must
 * show, checked from a plain C99 program over the public header. It runs as
 * any number of ranks (the test runs it as 4, 3 and 1):
 *
 *   hcomm_run -n 4 --timeout 120 -- collectives_acceptance
 *
 * For each algorithm in turn (ring, tree, direct, auto: every rank sets the
 * same `algo` with hcomm_comm_set before the next collective) it checks,
 * against references computed here:
 *   - allreduce: every dtype x every op, in place and out of place, counts
 *     0, 1, 7, 1023 (and 1M+3 for float32 sum). Values keep every result
 *     exact: small integers for sum/avg/min/max, products of 1, 2 (and -1
 *     for signed types), min/max of values spread over the type's range;
 *     integer AVG truncates, floating AVG is compared with a tolerance.
 *     FLOAT16/BFLOAT16 are uint16 bit patterns converted by helpers below;
 *   - broadcast, reduce, gather, scatter with every root (in place at the
 *     root too, NULL buffers where only the root's is used);
 *   - allgather, reduce_scatter, alltoall, in and out of place;
 *   - barrier (a late rank holds the others);
 *   - iallreduce completed by hcomm_wait and by hcomm_test polling, with
 *     blocking collectives issued while it is pending.
 * Then, once: groups (split by parity with reversed keys, HCOMM_UNDEFINED,
 * create_group of {0, 2} and {2, 0}, collectives on the children under every
 * algorithm, p2p with sub-communicator ranks in hcomm_request_info, parent
 * and child messages with one tag never matching each other), the abort of
 * a group (that group alone fails; its members are told) and bad arguments
 * (INVALID_ARGUMENT with a message, the communicator still usable).
 *
 * Every rank prints "ok: <check>" after each check and "ok: all" at the very
 * end. The first failure prints "FAIL: <check>: ..." (with hcomm_last_error()
 * when a call failed) on stderr and exits 1. Checks are separated by a
 * message barrier (p2p, tags >= 30000) so that a broken check cannot leak
 * into the next one.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
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
  kGuard = 4,        /* elements after every receive region that must stay untouched */
  kNumDtypes = 10,
  kNumOps = 5,
};

static hcomm_comm_t g_comm = NULL;
static int g_rank = -1;
static int g_size = 0;
static const char* g_algo = "auto";
static char g_check[256] = "init";

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

static void set_check(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_check, sizeof g_check, fmt, ap);
  va_end(ap);
}

static void fail(const char* fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "FAIL: %s [algo %s]: rank %d of %d: ", g_check, g_algo, g_rank, g_size);
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

/* A call that had to fail with `want` and a non-empty message. */
static void expect_status(const char* call, hcomm_status_t got, hcomm_status_t want) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  if (got != want) {
    fail("%s returned %s, expected %s (last error: %s)", call, hcomm_status_string(got),
         hcomm_status_string(want), message);
  }
  if (message[0] == '\0') {
    fail("%s returned %s with an empty hcomm_last_error()", call, hcomm_status_string(want));
  }
}

#define EXPECT_BAD(expr) expect_status(#expr, (expr), HCOMM_ERR_INVALID_ARGUMENT)

static void ok(const char* check) { printf("ok: %s\n", check); }

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (p == NULL) fail("out of memory (%zu bytes)", n);
  return p;
}

/* Every rank reports to rank 0, which then releases everyone (p2p only, so
 * it does not depend on the collectives under test). */
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

static void check_done(void) {
  barrier();
  ok(g_check);
}

/* ------------------------------------------------------------------------ */
/* Element types                                                            */

static const hcomm_dtype_t kDtypes[kNumDtypes] = {
    HCOMM_INT8,    HCOMM_UINT8,    HCOMM_INT32,   HCOMM_UINT32,  HCOMM_INT64,
    HCOMM_UINT64,  HCOMM_FLOAT16,  HCOMM_BFLOAT16, HCOMM_FLOAT32, HCOMM_FLOAT64,
};
static const hcomm_reduce_op_t kOps[kNumOps] = {HCOMM_SUM, HCOMM_PROD, HCOMM_MIN, HCOMM_MAX,
                                                HCOMM_AVG};

static const char* dtype_name(hcomm_dtype_t t) {
  switch (t) {
    case HCOMM_INT8: return "int8";
    case HCOMM_UINT8: return "uint8";
    case HCOMM_INT32: return "int32";
    case HCOMM_UINT32: return "uint32";
    case HCOMM_INT64: return "int64";
    case HCOMM_UINT64: return "uint64";
    case HCOMM_FLOAT16: return "float16";
    case HCOMM_BFLOAT16: return "bfloat16";
    case HCOMM_FLOAT32: return "float32";
    case HCOMM_FLOAT64: return "float64";
  }
  return "?";
}

static const char* op_name(hcomm_reduce_op_t op) {
  switch (op) {
    case HCOMM_SUM: return "sum";
    case HCOMM_PROD: return "prod";
    case HCOMM_MIN: return "min";
    case HCOMM_MAX: return "max";
    case HCOMM_AVG: return "avg";
  }
  return "?";
}

static size_t dsize(hcomm_dtype_t t) {
  switch (t) {
    case HCOMM_INT8: case HCOMM_UINT8: return 1;
    case HCOMM_FLOAT16: case HCOMM_BFLOAT16: return 2;
    case HCOMM_INT32: case HCOMM_UINT32: case HCOMM_FLOAT32: return 4;
    case HCOMM_INT64: case HCOMM_UINT64: case HCOMM_FLOAT64: return 8;
  }
  return 1;
}

static int is_float(hcomm_dtype_t t) {
  return t == HCOMM_FLOAT16 || t == HCOMM_BFLOAT16 || t == HCOMM_FLOAT32 || t == HCOMM_FLOAT64;
}

static int is_unsigned(hcomm_dtype_t t) {
  return t == HCOMM_UINT8 || t == HCOMM_UINT32 || t == HCOMM_UINT64;
}

/* IEEE binary16 <-> float, round to nearest even; normals, subnormals,
 * zero, inf and NaN (the references only need small integers and 1/n). */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (absx < 0x33000001u) return sign;                          /* < half the smallest subnormal */
  int exp = (int)(absx >> 23) - 127;
  uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
  int shift;
  uint32_t base;
  if (exp < -14) { /* subnormal half */
    shift = 13 + (-14 - exp);
    base = 0;
  } else {
    shift = 13;
    base = (uint32_t)(exp + 15) << 10;
    mant &= 0x7fffffu;
  }
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return (uint16_t)(sign | (base + q)); /* a carry moves into the exponent correctly */
}

static float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    float f = ldexpf((float)mant, -24);
    return sign ? -f : f;
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Element i of buf as a double (every value used here is exact in double). */
static double get_elem(const void* buf, hcomm_dtype_t t, size_t i) {
  const unsigned char* p = (const unsigned char*)buf + i * dsize(t);
  switch (t) {
    case HCOMM_INT8: { int8_t v; memcpy(&v, p, 1); return v; }
    case HCOMM_UINT8: { uint8_t v; memcpy(&v, p, 1); return v; }
    case HCOMM_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case HCOMM_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case HCOMM_INT64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case HCOMM_UINT64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    case HCOMM_FLOAT16: { uint16_t v; memcpy(&v, p, 2); return f16_to_f32(v); }
    case HCOMM_BFLOAT16: { uint16_t v; memcpy(&v, p, 2); return bf16_to_f32(v); }
    case HCOMM_FLOAT32: { float v; memcpy(&v, p, 4); return v; }
    case HCOMM_FLOAT64: { double v; memcpy(&v, p, 8); return v; }
  }
  return 0;
}

static void put_elem(void* buf, hcomm_dtype_t t, size_t i, double v) {
  unsigned char* p = (unsigned char*)buf + i * dsize(t);
  switch (t) {
    case HCOMM_INT8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case HCOMM_UINT8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case HCOMM_INT32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case HCOMM_UINT32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case HCOMM_INT64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case HCOMM_UINT64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case HCOMM_FLOAT16: { uint16_t x = f32_to_f16((float)v); memcpy(p, &x, 2); break; }
    case HCOMM_BFLOAT16: { uint16_t x = f32_to_bf16((float)v); memcpy(p, &x, 2); break; }
    case HCOMM_FLOAT32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case HCOMM_FLOAT64: { memcpy(p, &v, 8); break; }
  }
}

/* Spacing of MIN/MAX values: spreads them over the type's range (the high
 * bit of unsigned types gets set, so a signed comparison would fail). */
static double minmax_step(hcomm_dtype_t t) {
  switch (t) {
    case HCOMM_INT8: return 16;
    case HCOMM_UINT8: return 32;
    case HCOMM_INT32: return 134217728.0;            /* 2^27 */
    case HCOMM_UINT32: return 536870912.0;           /* 2^29 */
    case HCOMM_INT64: return 1152921504606846976.0;  /* 2^60 */
    case HCOMM_UINT64: return 2305843009213693952.0; /* 2^61 */
    default: return 1.5;
  }
}

/* The input of `rank` at index i for a reduction with `op` over `t`. */
static double input_val(hcomm_dtype_t t, hcomm_reduce_op_t op, int rank, size_t i) {
  const unsigned k = (unsigned)(((size_t)rank * 3 + i * 5) % 7); /* 0..6 */
  const double centred = is_unsigned(t) ? (double)k : (double)k - 3.0;
  switch (op) {
    case HCOMM_SUM:
    case HCOMM_AVG:
      return centred;
    case HCOMM_MIN:
    case HCOMM_MAX:
      return centred * minmax_step(t);
    case HCOMM_PROD: {
      const unsigned m = (unsigned)(((size_t)rank * 7 + i * 3) % 5);
      if (m == 0 || m == 2) return 2;
      if (m == 4 && !is_unsigned(t)) return -1;
      return 1;
    }
  }
  return 0;
}

/* The reduction over ranks 0..n-1 at index i, as the result must be. */
static double expect_val(hcomm_dtype_t t, hcomm_reduce_op_t op, int n, size_t i) {
  double acc = input_val(t, op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = input_val(t, op, r, i);
    switch (op) {
      case HCOMM_SUM: case HCOMM_AVG: acc += v; break;
      case HCOMM_PROD: acc *= v; break;
      case HCOMM_MIN: acc = v < acc ? v : acc; break;
      case HCOMM_MAX: acc = v > acc ? v : acc; break;
    }
  }
  if (op == HCOMM_AVG) {
    acc /= n;
    if (!is_float(t)) acc = trunc(acc); /* integer AVG truncates (toward zero) */
  }
  return acc;
}

static double tolerance(hcomm_dtype_t t) {
  switch (t) {
    case HCOMM_FLOAT16: return 1e-3;
    case HCOMM_BFLOAT16: return 8e-3;
    case HCOMM_FLOAT32: return 1e-6;
    case HCOMM_FLOAT64: return 1e-12;
    default: return 0;
  }
}

static int value_matches(hcomm_dtype_t t, hcomm_reduce_op_t op, double got, double want) {
  if (op == HCOMM_AVG && is_float(t)) {
    const double scale = fabs(want) > 1 ? fabs(want) : 1;
    return fabs(got - want) <= tolerance(t) * scale;
  }
  return got == want;
}

/* Fills buf[0, count) with rank's inputs for indices base.. */
static void fill_inputs(void* buf, hcomm_dtype_t t, hcomm_reduce_op_t op, int rank, size_t base,
                        size_t count) {
  for (size_t i = 0; i < count; ++i) put_elem(buf, t, i, input_val(t, op, rank, base + i));
}

static void check_inputs(const void* buf, hcomm_dtype_t t, hcomm_reduce_op_t op, int rank,
                         size_t base, size_t count, const char* what) {
  for (size_t i = 0; i < count; ++i) {
    const double got = get_elem(buf, t, i);
    const double want = input_val(t, op, rank, base + i);
    if (got != want) {
      fail("%s: %s %s element %zu changed to %.17g (was %.17g)", what, dtype_name(t),
           op_name(op), i, got, want);
    }
  }
}

/* buf[0, count) must hold the reduction over n ranks for indices base.. */
static void check_reduced(const void* buf, hcomm_dtype_t t, hcomm_reduce_op_t op, int n,
                          size_t base, size_t count, const char* what) {
  for (size_t i = 0; i < count; ++i) {
    const double got = get_elem(buf, t, i);
    const double want = expect_val(t, op, n, base + i);
    if (!value_matches(t, op, got, want)) {
      fail("%s: %s %s count %zu: element %zu is %.17g, expected %.17g", what, dtype_name(t),
           op_name(op), count, i, got, want);
    }
  }
}

/* Guard bytes after a receive region. */
static void fill_guard(void* p, size_t bytes) { memset(p, 0xA5, bytes); }

static void check_guard(const void* p, size_t bytes, const char* what) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t i = 0; i < bytes; ++i) {
    if (b[i] != 0xA5) fail("%s: wrote past the end of its buffer (guard byte %zu)", what, i);
  }
}

/* Byte patterns for the data-movement collectives: block (from, to) of
 * `bytes` bytes; distinct for every pair and seed. */
static unsigned char pat(int seed, int from, int to, size_t k) {
  return (unsigned char)(seed * 13 + (from + 1) * 37 + (to + 1) * 101 + k * 7 + (k >> 8) * 3 + 1);
}

static void fill_pat(void* p, size_t bytes, int seed, int from, int to) {
  unsigned char* b = (unsigned char*)p;
  for (size_t k = 0; k < bytes; ++k) b[k] = pat(seed, from, to, k);
}

static void check_pat(const void* p, size_t bytes, int seed, int from, int to,
                      const char* what) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t k = 0; k < bytes; ++k) {
    if (b[k] != pat(seed, from, to, k)) {
      fail("%s: byte %zu of the block from rank %d to rank %d is 0x%02x, expected 0x%02x",
           what, k, from, to, b[k], pat(seed, from, to, k));
    }
  }
}

static void set_algo(hcomm_comm_t comm, const char* algo) {
  CALL(hcomm_comm_set(comm, "algo", algo));
}

/* ------------------------------------------------------------------------ */
/* Allreduce                                                                */

static void allreduce_case(hcomm_dtype_t t, hcomm_reduce_op_t op, size_t count, int in_place) {
  const size_t es = dsize(t);
  const size_t bytes = count * es, guard = kGuard * es;
  unsigned char* send = (unsigned char*)xmalloc(bytes + guard);
  unsigned char* recv = (unsigned char*)xmalloc(bytes + guard);
  fill_inputs(send, t, op, g_rank, 0, count);
  fill_guard(send + bytes, guard);
  if (in_place) {
    CALL(hcomm_allreduce(send, send, count, t, op, g_comm));
    check_reduced(send, t, op, g_size, 0, count, "in-place allreduce");
    check_guard(send + bytes, guard, "in-place allreduce");
  } else {
    memset(recv, 0x5A, bytes);
    fill_guard(recv + bytes, guard);
    CALL(hcomm_allreduce(send, recv, count, t, op, g_comm));
    check_reduced(recv, t, op, g_size, 0, count, "allreduce");
    check_guard(recv + bytes, guard, "allreduce");
    check_inputs(send, t, op, g_rank, 0, count, "allreduce sendbuf");
  }
  free(send);
  free(recv);
}

static void check_allreduce(void) {
  static const size_t kCounts[] = {0, 1, 7, 1023};
  set_check("allreduce: every dtype x op, counts 0/1/7/1023, in and out of place");
  for (int d = 0; d < kNumDtypes; ++d) {
    for (int o = 0; o < kNumOps; ++o) {
      for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
        allreduce_case(kDtypes[d], kOps[o], kCounts[c], 0);
        allreduce_case(kDtypes[d], kOps[o], kCounts[c], 1);
      }
    }
  }
  /* count 0 needs no buffers */
  CALL(hcomm_allreduce(NULL, NULL, 0, HCOMM_FLOAT32, HCOMM_SUM, g_comm));
  check_done();

  set_check("allreduce: float32 sum of 1M+3 elements, in and out of place");
  allreduce_case(HCOMM_FLOAT32, HCOMM_SUM, (1u << 20) + 3, 0);
  allreduce_case(HCOMM_FLOAT32, HCOMM_SUM, (1u << 20) + 3, 1);
  check_done();
}

/* ------------------------------------------------------------------------ */
/* Rooted collectives                                                       */

static void check_broadcast(void) {
  static const size_t kCounts[] = {0, 1, 7, 1023, 65537, 1048579};
  static const hcomm_dtype_t kTypes[] = {HCOMM_INT32, HCOMM_UINT8, HCOMM_FLOAT16, HCOMM_FLOAT64};
  set_check("broadcast: every root, int32/uint8/float16/float64, counts 0..1M+3");
  for (int root = 0; root < g_size; ++root) {
    for (size_t ti = 0; ti < sizeof kTypes / sizeof kTypes[0]; ++ti) {
      for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
        const hcomm_dtype_t t = kTypes[ti];
        const size_t bytes = kCounts[c] * dsize(t), guard = kGuard * dsize(t);
        unsigned char* buf = (unsigned char*)xmalloc(bytes + guard);
        if (g_rank == root) {
          fill_pat(buf, bytes, (int)c, root, -1);
        } else {
          memset(buf, 0x5A, bytes);
        }
        fill_guard(buf + bytes, guard);
        CALL(hcomm_broadcast(buf, kCounts[c], t, root, g_comm));
        check_pat(buf, bytes, (int)c, root, -1, "broadcast");
        check_guard(buf + bytes, guard, "broadcast");
        free(buf);
      }
    }
  }
  check_done();
}

static void reduce_case(hcomm_dtype_t t, hcomm_reduce_op_t op, size_t count, int root,
                        int mode /* 0 out of place, 1 in place at the root, 2 NULL off root */) {
  const size_t es = dsize(t);
  const size_t bytes = count * es, guard = kGuard * es;
  unsigned char* send = (unsigned char*)xmalloc(bytes + guard);
  unsigned char* recv = (unsigned char*)xmalloc(bytes + guard);
  fill_inputs(send, t, op, g_rank, 0, count);
  fill_guard(send + bytes, guard);
  memset(recv, 0x5A, bytes);
  fill_guard(recv + bytes, guard);
  const int is_root = g_rank == root;
  if (mode == 1 && is_root) {
    CALL(hcomm_reduce(send, send, count, t, op, root, g_comm));
    check_reduced(send, t, op, g_size, 0, count, "in-place reduce at the root");
    check_guard(send + bytes, guard, "in-place reduce");
  } else {
    void* r = (mode == 2 && !is_root) ? NULL : recv;
    CALL(hcomm_reduce(send, r, count, t, op, root, g_comm));
    if (is_root) {
      check_reduced(recv, t, op, g_size, 0, count, "reduce at the root");
    } else {
      /* Only the root's recvbuf is used: a non-root's stays as it was. */
      for (size_t k = 0; k < bytes; ++k) {
        if (recv[k] != 0x5A) fail("reduce wrote to the recvbuf of non-root rank %d", g_rank);
      }
    }
    check_guard(recv + bytes, guard, "reduce");
    check_inputs(send, t, op, g_rank, 0, count, "reduce sendbuf");
  }
  free(send);
  free(recv);
}

static void check_reduce(void) {
  static const size_t kCounts[] = {0, 1, 7, 1023, 65537};
  set_check("reduce: every root, int32 sum (0..64K+1), float32 max, float16 sum, "
            "uint64 min, bfloat16 avg; out of place, in place, NULL recvbuf off root");
  for (int root = 0; root < g_size; ++root) {
    for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
      for (int mode = 0; mode < 3; ++mode) reduce_case(HCOMM_INT32, HCOMM_SUM, kCounts[c], root, mode);
    }
    for (int mode = 0; mode < 3; ++mode) {
      reduce_case(HCOMM_FLOAT32, HCOMM_MAX, 1023, root, mode);
      reduce_case(HCOMM_FLOAT16, HCOMM_SUM, 7, root, mode);
      reduce_case(HCOMM_UINT64, HCOMM_MIN, 7, root, mode);
      reduce_case(HCOMM_BFLOAT16, HCOMM_AVG, 7, root, mode);
      reduce_case(HCOMM_INT8, HCOMM_PROD, 7, root, mode);
    }
  }
  check_done();
}

static void gather_case(hcomm_dtype_t t, size_t count, int root, int in_place, int seed) {
  const size_t bytes = count * dsize(t), guard = kGuard * dsize(t);
  const size_t total = bytes * (size_t)g_size;
  unsigned char* send = (unsigned char*)xmalloc(bytes);
  unsigned char* recv = (unsigned char*)xmalloc(total + guard);
  fill_pat(send, bytes, seed, g_rank, root);
  memset(recv, 0x5A, total);
  fill_guard(recv + total, guard);
  if (g_rank == root) {
    if (in_place) {
      fill_pat(recv + (size_t)root * bytes, bytes, seed, root, root);
      CALL(hcomm_gather(recv, recv, count, t, root, g_comm));
    } else {
      CALL(hcomm_gather(send, recv, count, t, root, g_comm));
    }
    for (int r = 0; r < g_size; ++r) {
      check_pat(recv + (size_t)r * bytes, bytes, seed, r, root,
                in_place ? "in-place gather" : "gather");
    }
    check_guard(recv + total, guard, "gather");
  } else {
    CALL(hcomm_gather(send, NULL, count, t, root, g_comm)); /* recvbuf unused off root */
  }
  check_pat(send, bytes, seed, g_rank, root, "gather sendbuf");
  free(send);
  free(recv);
}

static void scatter_case(hcomm_dtype_t t, size_t count, int root, int in_place, int seed) {
  const size_t bytes = count * dsize(t), guard = kGuard * dsize(t);
  const size_t total = bytes * (size_t)g_size;
  unsigned char* send = (unsigned char*)xmalloc(total + guard);
  unsigned char* recv = (unsigned char*)xmalloc(bytes + guard);
  for (int r = 0; r < g_size; ++r) fill_pat(send + (size_t)r * bytes, bytes, seed, root, r);
  fill_guard(send + total, guard);
  memset(recv, 0x5A, bytes);
  fill_guard(recv + bytes, guard);
  if (g_rank == root && in_place) {
    /* In place at the root: its block stays in sendbuf; nothing moves there. */
    CALL(hcomm_scatter(send, send, count, t, root, g_comm));
    for (int r = 0; r < g_size; ++r) {
      check_pat(send + (size_t)r * bytes, bytes, seed, root, r, "in-place scatter: root's sendbuf");
    }
    check_guard(send + total, guard, "in-place scatter");
  } else {
    CALL(hcomm_scatter(g_rank == root ? send : NULL, recv, count, t, root, g_comm));
    check_pat(recv, bytes, seed, root, g_rank, "scatter");
    check_guard(recv + bytes, guard, "scatter");
    if (g_rank == root) {
      for (int r = 0; r < g_size; ++r) {
        check_pat(send + (size_t)r * bytes, bytes, seed, root, r, "scatter: root's sendbuf");
      }
    }
  }
  free(send);
  free(recv);
}

static void check_gather_scatter(void) {
  static const size_t kCounts[] = {0, 1, 7, 1023, 65537};
  static const hcomm_dtype_t kTypes[] = {HCOMM_INT32, HCOMM_UINT8, HCOMM_BFLOAT16, HCOMM_INT64};
  set_check("gather / scatter: every root, in and out of place, counts 0..64K+1");
  int seed = 0;
  for (int root = 0; root < g_size; ++root) {
    for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
      for (int ip = 0; ip < 2; ++ip) {
        gather_case(HCOMM_INT32, kCounts[c], root, ip, ++seed);
        scatter_case(HCOMM_INT32, kCounts[c], root, ip, ++seed);
      }
    }
    for (size_t ti = 1; ti < sizeof kTypes / sizeof kTypes[0]; ++ti) {
      gather_case(kTypes[ti], 7, root, 0, ++seed);
      scatter_case(kTypes[ti], 7, root, 0, ++seed);
    }
  }
  check_done();
}

/* ------------------------------------------------------------------------ */
/* allgather, reduce_scatter, alltoall                                      */

static void allgather_case(hcomm_dtype_t t, size_t count, int in_place, int seed) {
  const size_t bytes = count * dsize(t), guard = kGuard * dsize(t);
  const size_t total = bytes * (size_t)g_size;
  unsigned char* send = (unsigned char*)xmalloc(bytes);
  unsigned char* recv = (unsigned char*)xmalloc(total + guard);
  fill_pat(send, bytes, seed, g_rank, -1);
  memset(recv, 0x5A, total);
  fill_guard(recv + total, guard);
  if (in_place) {
    fill_pat(recv + (size_t)g_rank * bytes, bytes, seed, g_rank, -1);
    CALL(hcomm_allgather(recv, recv, count, t, g_comm));
  } else {
    CALL(hcomm_allgather(send, recv, count, t, g_comm));
    check_pat(send, bytes, seed, g_rank, -1, "allgather sendbuf");
  }
  for (int r = 0; r < g_size; ++r) {
    check_pat(recv + (size_t)r * bytes, bytes, seed, r, -1,
              in_place ? "in-place allgather" : "allgather");
  }
  check_guard(recv + total, guard, "allgather");
  free(send);
  free(recv);
}

static void reduce_scatter_case(hcomm_dtype_t t, hcomm_reduce_op_t op, size_t count,
                                int in_place) {
  const size_t es = dsize(t);
  const size_t n = count * (size_t)g_size;
  const size_t guard = kGuard * es;
  unsigned char* send = (unsigned char*)xmalloc(n * es + guard);
  unsigned char* recv = (unsigned char*)xmalloc(count * es + guard);
  fill_inputs(send, t, op, g_rank, 0, n);
  fill_guard(send + n * es, guard);
  memset(recv, 0x5A, count * es);
  fill_guard(recv + count * es, guard);
  const size_t base = (size_t)g_rank * count;
  if (in_place) {
    CALL(hcomm_reduce_scatter(send, send, count, t, op, g_comm));
    check_reduced(send, t, op, g_size, base, count, "in-place reduce_scatter");
    check_guard(send + n * es, guard, "in-place reduce_scatter");
  } else {
    CALL(hcomm_reduce_scatter(send, recv, count, t, op, g_comm));
    check_reduced(recv, t, op, g_size, base, count, "reduce_scatter");
    check_guard(recv + count * es, guard, "reduce_scatter");
    check_inputs(send, t, op, g_rank, 0, n, "reduce_scatter sendbuf");
  }
  free(send);
  free(recv);
}

static void alltoall_case(hcomm_dtype_t t, size_t count, int in_place, int seed) {
  const size_t bytes = count * dsize(t), guard = kGuard * dsize(t);
  const size_t total = bytes * (size_t)g_size;
  unsigned char* send = (unsigned char*)xmalloc(total + guard);
  unsigned char* recv = (unsigned char*)xmalloc(total + guard);
  for (int j = 0; j < g_size; ++j) fill_pat(send + (size_t)j * bytes, bytes, seed, g_rank, j);
  fill_guard(send + total, guard);
  memset(recv, 0x5A, total);
  fill_guard(recv + total, guard);
  unsigned char* out = in_place ? send : recv;
  CALL(hcomm_alltoall(send, out, count, t, g_comm));
  for (int i = 0; i < g_size; ++i) {
    check_pat(out + (size_t)i * bytes, bytes, seed, i, g_rank,
              in_place ? "in-place alltoall" : "alltoall");
  }
  check_guard(out + total, guard, "alltoall");
  if (!in_place) {
    for (int j = 0; j < g_size; ++j) {
      check_pat(send + (size_t)j * bytes, bytes, seed, g_rank, j, "alltoall sendbuf");
    }
  }
  free(send);
  free(recv);
}

static void check_allgather_rs_a2a(void) {
  static const size_t kCounts[] = {0, 1, 7, 1023, 65537, 262147};
  int seed = 100;
  set_check("allgather: in and out of place, counts 0..256K+3");
  for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
    for (int ip = 0; ip < 2; ++ip) allgather_case(HCOMM_INT32, kCounts[c], ip, ++seed);
  }
  allgather_case(HCOMM_UINT8, 7, 0, ++seed);
  allgather_case(HCOMM_FLOAT16, 3, 1, ++seed);
  allgather_case(HCOMM_FLOAT64, 5, 0, ++seed);
  check_done();

  set_check("reduce_scatter: in and out of place, every dtype x op (count 7), int32 sum "
            "counts 0..256K+3");
  for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
    for (int ip = 0; ip < 2; ++ip) reduce_scatter_case(HCOMM_INT32, HCOMM_SUM, kCounts[c], ip);
  }
  for (int d = 0; d < kNumDtypes; ++d) {
    for (int o = 0; o < kNumOps; ++o) {
      reduce_scatter_case(kDtypes[d], kOps[o], 7, 0);
      reduce_scatter_case(kDtypes[d], kOps[o], 7, 1);
    }
  }
  check_done();

  set_check("alltoall: in and out of place, counts 0..256K+3");
  for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
    for (int ip = 0; ip < 2; ++ip) alltoall_case(HCOMM_INT32, kCounts[c], ip, ++seed);
  }
  alltoall_case(HCOMM_UINT8, 7, 1, ++seed);
  alltoall_case(HCOMM_BFLOAT16, 3, 0, ++seed);
  alltoall_case(HCOMM_UINT64, 5, 1, ++seed);
  check_done();
}

/* ------------------------------------------------------------------------ */
/* Barrier                                                                  */

static void check_barrier(void) {
  set_check("barrier: a late rank 0 holds everyone");
  const double kLate = 0.3;
  if (g_rank == 0) sleep_us((long)(kLate * 1e6));
  const double t0 = now_s();
  CALL(hcomm_barrier(g_comm));
  const double waited = now_s() - t0;
  /* Every other rank entered at least kLate before rank 0 (after the
   * message barrier that ended the previous check), so it must wait. */
  if (g_rank != 0 && waited < kLate * 0.5) {
    fail("hcomm_barrier returned after %.3f s although rank 0 arrived %.1f s late", waited,
         kLate);
  }
  for (int i = 0; i < 20; ++i) CALL(hcomm_barrier(g_comm));
  check_done();
}

/* ------------------------------------------------------------------------ */
/* iallreduce                                                               */

static void check_iallreduce(void) {
  set_check("iallreduce + hcomm_wait with blocking collectives issued after it");
  {
    const size_t n = 65537;
    int32_t* a_in = (int32_t*)xmalloc(n * 4);
    int32_t* a_out = (int32_t*)xmalloc(n * 4);
    double b[7];
    unsigned char c[33];
    fill_inputs(a_in, HCOMM_INT32, HCOMM_SUM, g_rank, 0, n);
    memset(a_out, 0x5A, n * 4);
    hcomm_request_t req = NULL;
    CALL(hcomm_iallreduce(a_in, a_out, n, HCOMM_INT32, HCOMM_SUM, g_comm, &req));
    /* Blocking collectives after the nonblocking one: they are ordered
     * after it on every rank, so neither may see the other's data. */
    fill_inputs(b, HCOMM_FLOAT64, HCOMM_MAX, g_rank, 0, 7);
    CALL(hcomm_allreduce(b, b, 7, HCOMM_FLOAT64, HCOMM_MAX, g_comm));
    check_reduced(b, HCOMM_FLOAT64, HCOMM_MAX, g_size, 0, 7, "allreduce after iallreduce");
    if (g_rank == g_size - 1) {
      fill_pat(c, sizeof c, 7, g_size - 1, -1);
    } else {
      memset(c, 0, sizeof c);
    }
    CALL(hcomm_broadcast(c, sizeof c, HCOMM_UINT8, g_size - 1, g_comm));
    check_pat(c, sizeof c, 7, g_size - 1, -1, "broadcast after iallreduce");
    CALL(hcomm_wait(req));
    check_reduced(a_out, HCOMM_INT32, HCOMM_SUM, g_size, 0, n, "iallreduce (wait)");
    CALL(hcomm_wait(req)); /* waiting again returns its status again */
    CALL(hcomm_request_free(req));
    free(a_in);
    free(a_out);
  }
  check_done();

  set_check("iallreduce + hcomm_test polling (in place), then a blocking collective");
  {
    float v[1023];
    fill_inputs(v, HCOMM_FLOAT32, HCOMM_SUM, g_rank, 0, 1023);
    hcomm_request_t req = NULL;
    CALL(hcomm_iallreduce(v, v, 1023, HCOMM_FLOAT32, HCOMM_SUM, g_comm, &req));
    const double deadline = now_s() + 60;
    int done = 0, polls = 0;
    while (!done) {
      CALL(hcomm_test(req, &done));
      ++polls;
      if (!done) {
        if (now_s() > deadline) fail("hcomm_test still not done after 60 s (%d polls)", polls);
        sleep_us(50);
      }
    }
    check_reduced(v, HCOMM_FLOAT32, HCOMM_SUM, g_size, 0, 1023, "iallreduce (test)");
    done = 0;
    CALL(hcomm_test(req, &done));
    if (!done) fail("hcomm_test on a completed iallreduce says not done");
    CALL(hcomm_request_free(req));
    int64_t x = g_rank;
    CALL(hcomm_allreduce(&x, &x, 1, HCOMM_INT64, HCOMM_SUM, g_comm));
    if (x != (int64_t)g_size * (g_size - 1) / 2) fail("allreduce after polling gave %" PRId64, x);
  }
  check_done();

  set_check("two iallreduces pending at once, waited in reverse order; count 0");
  {
    uint8_t a[1000], b[1000];
    fill_inputs(a, HCOMM_UINT8, HCOMM_MAX, g_rank, 0, 1000);
    fill_inputs(b, HCOMM_UINT8, HCOMM_SUM, g_rank, 0, 1000);
    hcomm_request_t r[3];
    CALL(hcomm_iallreduce(a, a, 1000, HCOMM_UINT8, HCOMM_MAX, g_comm, &r[0]));
    CALL(hcomm_iallreduce(b, b, 1000, HCOMM_UINT8, HCOMM_SUM, g_comm, &r[1]));
    CALL(hcomm_iallreduce(NULL, NULL, 0, HCOMM_UINT8, HCOMM_SUM, g_comm, &r[2]));
    CALL(hcomm_wait(r[2]));
    CALL(hcomm_wait(r[1]));
    CALL(hcomm_wait(r[0]));
    check_reduced(a, HCOMM_UINT8, HCOMM_MAX, g_size, 0, 1000, "first pending iallreduce");
    check_reduced(b, HCOMM_UINT8, HCOMM_SUM, g_size, 0, 1000, "second pending iallreduce");
    for (int i = 0; i < 3; ++i) CALL(hcomm_request_free(r[i]));
  }
  check_done();
}

/* ------------------------------------------------------------------------ */
/* Groups                                                                   */

static int comm_rank(hcomm_comm_t c) {
  int r = -1;
  CALL(hcomm_comm_rank(c, &r));
  return r;
}

static int comm_size(hcomm_comm_t c) {
  int s = -1;
  CALL(hcomm_comm_size(c, &s));
  return s;
}

/* Collectives on a child whose members' parent ranks are members[0..n-1]
 * (in child rank order), under every algorithm. */
static void child_collectives(hcomm_comm_t child, const int* members, int n, const char* what) {
  static const char* kAlgos[] = {"ring", "tree", "direct", "auto"};
  const int me = comm_rank(child);
  if (comm_size(child) != n) fail("%s: size %d, expected %d", what, comm_size(child), n);
  if (members[me] != g_rank) {
    fail("%s: child rank %d belongs to parent rank %d, but this is parent rank %d", what, me,
         members[me], g_rank);
  }
  int64_t sum_parent = 0;
  for (int i = 0; i < n; ++i) sum_parent += members[i];
  for (size_t a = 0; a < sizeof kAlgos / sizeof kAlgos[0]; ++a) {
    set_algo(child, kAlgos[a]);
    int64_t x = g_rank;
    CALL(hcomm_allreduce(&x, &x, 1, HCOMM_INT64, HCOMM_SUM, child));
    if (x != sum_parent) fail("%s (%s): allreduce of parent ranks gave %" PRId64 ", expected %" PRId64,
                              what, kAlgos[a], x, sum_parent);
    int32_t big[5000];
    for (int i = 0; i < 5000; ++i) big[i] = g_rank + i;
    CALL(hcomm_allreduce(big, big, 5000, HCOMM_INT32, HCOMM_MAX, child));
    for (int i = 0; i < 5000; ++i) {
      int32_t want = members[0];
      for (int k = 1; k < n; ++k) want = members[k] > want ? members[k] : want;
      if (big[i] != want + i) fail("%s (%s): allreduce max element %d is %d", what, kAlgos[a], i, big[i]);
    }
    int32_t gathered[64];
    int32_t mine = 1000 + g_rank;
    CALL(hcomm_allgather(&mine, gathered, 1, HCOMM_INT32, child));
    for (int i = 0; i < n; ++i) {
      if (gathered[i] != 1000 + members[i]) {
        fail("%s (%s): allgather slot %d is %d, expected %d", what, kAlgos[a], i, gathered[i],
             1000 + members[i]);
      }
    }
    int32_t b = me == n - 1 ? 4242 : -1;
    CALL(hcomm_broadcast(&b, 1, HCOMM_INT32, n - 1, child));
    if (b != 4242) fail("%s (%s): broadcast from child root %d gave %d", what, kAlgos[a], n - 1, b);
    CALL(hcomm_barrier(child));
  }
  set_algo(child, g_algo);
}

static void check_groups(void) {
  set_check("split by parity (reversed keys); collectives on the halves; sub-rank p2p info");
  {
    const int color = g_rank % 2;
    /* key = size - rank: the members come in descending parent rank. */
    int members[64], n = 0;
    for (int r = g_size - 1; r >= 0; --r) {
      if (r % 2 == color) members[n++] = r;
    }
    hcomm_comm_t half = NULL;
    CALL(hcomm_comm_split(g_comm, color, g_size - g_rank, &half));
    if (half == NULL) fail("hcomm_comm_split gave NULL to a member");
    child_collectives(half, members, n, "parity half");

    /* p2p inside the half: child rank 0 -> child rank n-1 (itself when
     * alone); both sides see child ranks in hcomm_request_info. */
    const int me = comm_rank(half);
    int32_t payload[3] = {g_rank, 77, -5};
    int32_t in[8] = {0};
    hcomm_request_t sreq = NULL, rreq = NULL;
    if (me == n - 1) {
      CALL(hcomm_irecv(in, 8, HCOMM_INT32, HCOMM_ANY_SOURCE, HCOMM_ANY_TAG, half, &rreq));
    }
    if (me == 0) CALL(hcomm_isend(payload, 3, HCOMM_INT32, n - 1, 21, half, &sreq));
    if (sreq) {
      CALL(hcomm_wait(sreq));
      int s = -9, t = -9;
      size_t c = 99;
      CALL(hcomm_request_info(sreq, &s, &t, &c));
      if (s != n - 1 || t != 21 || c != 3) {
        fail("send on the half: request_info gave dest %d tag %d count %zu, expected %d/21/3",
             s, t, c, n - 1);
      }
      CALL(hcomm_request_free(sreq));
    }
    if (rreq) {
      CALL(hcomm_wait(rreq));
      int s = -9, t = -9;
      size_t c = 99;
      CALL(hcomm_request_info(rreq, &s, &t, &c));
      if (s != 0 || t != 21 || c != 3) {
        fail("receive on the half: request_info gave source %d tag %d count %zu, expected "
             "0 (the sub-communicator rank, parent rank %d)/21/3", s, t, c, members[0]);
      }
      if (in[0] != members[0] || in[1] != 77 || in[2] != -5) fail("receive on the half: bad payload");
      CALL(hcomm_request_free(rreq));
    }
    /* The parent still works between and after children's collectives. */
    int32_t x = 1;
    CALL(hcomm_allreduce(&x, &x, 1, HCOMM_INT32, HCOMM_SUM, g_comm));
    if (x != g_size) fail("parent allreduce with a live child gave %d", x);
    CALL(hcomm_comm_destroy(half));
  }
  check_done();

  set_check("split with HCOMM_UNDEFINED: that rank gets NULL");
  {
    const int out_rank = g_size - 1;
    hcomm_comm_t sub = (hcomm_comm_t)&g_size; /* must be overwritten */
    CALL(hcomm_comm_split(g_comm, g_rank == out_rank ? HCOMM_UNDEFINED : 5, g_rank, &sub));
    if (g_rank == out_rank) {
      if (sub != NULL) fail("rank with HCOMM_UNDEFINED got a communicator");
    } else {
      if (sub == NULL) fail("a member got NULL");
      int members[64];
      for (int i = 0; i < g_size - 1; ++i) members[i] = i;
      child_collectives(sub, members, g_size - 1, "split without the last rank");
      CALL(hcomm_comm_destroy(sub));
    }
  }
  check_done();

  set_check("create_group of {0, 2} and {2, 0}: collectives; parent/child tags never cross");
  {
    int list[2], n = 0;
    list[n++] = 0;
    if (g_size > 2) list[n++] = 2;
    for (int order = 0; order < 2; ++order) {
      int members[2];
      for (int i = 0; i < n; ++i) members[i] = order ? list[n - 1 - i] : list[i];
      hcomm_comm_t grp = (hcomm_comm_t)&g_size;
      CALL(hcomm_comm_create_group(g_comm, members, n, &grp));
      int is_member = 0;
      for (int i = 0; i < n; ++i) is_member |= members[i] == g_rank;
      if (!is_member) {
        if (grp != NULL) fail("non-member of the group got a communicator");
        /* A parent collective, while the members also work on the child. */
        int32_t y = 2;
        CALL(hcomm_allreduce(&y, &y, 1, HCOMM_INT32, HCOMM_SUM, g_comm));
        if (y != 2 * g_size) fail("parent allreduce gave %d", y);
        continue;
      }
      if (grp == NULL) fail("group member got NULL");
      child_collectives(grp, members, n, order ? "group {2, 0}" : "group {0, 2}");

      /* Same tag (9) on the parent and on the child between the same two
       * processes: the child message is sent first, yet a parent receive
       * with ANY_SOURCE gets the parent message, and vice versa. */
      const int me = comm_rank(grp);
      const int src_parent = members[0], dst_parent = members[n - 1];
      hcomm_request_t s[4] = {NULL, NULL, NULL, NULL};
      int32_t child_msg[2] = {111, 1}, parent_msg[2] = {222, 2};
      int32_t child_msg2[2] = {333, 3}, parent_msg2[2] = {444, 4};
      if (me == 0) {
        CALL(hcomm_isend(child_msg, 2, HCOMM_INT32, n - 1, 9, grp, &s[0]));
        CALL(hcomm_isend(parent_msg, 2, HCOMM_INT32, dst_parent, 9, g_comm, &s[1]));
        CALL(hcomm_isend(parent_msg2, 2, HCOMM_INT32, dst_parent, 10, g_comm, &s[2]));
        CALL(hcomm_isend(child_msg2, 2, HCOMM_INT32, n - 1, 10, grp, &s[3]));
      }
      if (me == n - 1) {
        int32_t got[4] = {0, 0, 0, 0};
        int src = -9, tag = -9;
        hcomm_request_t r = NULL;
        CALL(hcomm_irecv(got, 4, HCOMM_INT32, HCOMM_ANY_SOURCE, 9, g_comm, &r));
        CALL(hcomm_wait(r));
        CALL(hcomm_request_info(r, &src, &tag, NULL));
        CALL(hcomm_request_free(r));
        if (got[0] != 222 || src != src_parent || tag != 9) {
          fail("parent receive (tag 9) got payload %d from %d tag %d: expected the parent "
               "message 222 from parent rank %d", got[0], src, tag, src_parent);
        }
        CALL(hcomm_irecv(got, 4, HCOMM_INT32, HCOMM_ANY_SOURCE, HCOMM_ANY_TAG, grp, &r));
        CALL(hcomm_wait(r));
        CALL(hcomm_request_info(r, &src, &tag, NULL));
        CALL(hcomm_request_free(r));
        if (got[0] != 111 || src != 0 || tag != 9) {
          fail("child receive got payload %d from %d tag %d: expected the child message 111 "
               "from child rank 0 tag 9", got[0], src, tag);
        }
        /* Now the other order: the parent message was sent first. */
        CALL(hcomm_irecv(got, 4, HCOMM_INT32, HCOMM_ANY_SOURCE, HCOMM_ANY_TAG, grp, &r));
        CALL(hcomm_wait(r));
        CALL(hcomm_request_info(r, &src, &tag, NULL));
        CALL(hcomm_request_free(r));
        if (got[0] != 333 || src != 0 || tag != 10) {
          fail("child receive (tag 10) got payload %d from %d tag %d: expected 333 from child "
               "rank 0", got[0], src, tag);
        }
        CALL(hcomm_recv(got, 4, HCOMM_INT32, src_parent, 10, g_comm));
        if (got[0] != 444) fail("parent receive (tag 10) got payload %d, expected 444", got[0]);
      }
      if (me == 0) {
        CALL(hcomm_waitall(4, s));
        for (int i = 0; i < 4; ++i) CALL(hcomm_request_free(s[i]));
      }
      int32_t y = 2;
      CALL(hcomm_allreduce(&y, &y, 1, HCOMM_INT32, HCOMM_SUM, g_comm));
      if (y != 2 * g_size) fail("parent allreduce gave %d", y);
      CALL(hcomm_comm_destroy(grp));
    }
  }
  check_done();
}

/* Aborting a group ends that group alone. The last rank aborts a group of
 * every rank with a receive pending there: that receive and its later calls
 * on the group fail with ABORTED; every
 * other rank, told through the world after the abort, sees the group's
 * allreduce and a receive from the aborting rank fail with PEER_FAILURE
 * (not TIMEOUT), while p2p among the others in the group still works; then
 * everyone destroys the group, and the world and a new group work. */
static void check_group_abort(void) {
  set_check("abort of a group: that group alone fails, its members are told");
  const int aborter = g_size - 1;
  hcomm_comm_t grp = NULL;
  CALL(hcomm_comm_split(g_comm, 0, g_rank, &grp));
  if (grp == NULL) fail("hcomm_comm_split gave NULL to a member");
  /* A split returns on each rank when its own part is done: an abort before
   * another rank's split returned would fail that split (PEER_FAILURE). */
  barrier();
  int32_t v = 1, sum = 0;
  const double start = now_s();
  if (g_rank == aborter) {
    int32_t in = -1;
    hcomm_request_t pending = NULL;
    CALL(hcomm_irecv(&in, 1, HCOMM_INT32, 0, 5, grp, &pending));
    CALL(hcomm_comm_abort(grp));
    expect_status("hcomm_wait(irecv pending at the abort)", hcomm_wait(pending),
                  HCOMM_ERR_ABORTED);
    CALL(hcomm_request_free(pending));
    expect_status("hcomm_allreduce on the aborted group",
                  hcomm_allreduce(&v, &sum, 1, HCOMM_INT32, HCOMM_SUM, grp), HCOMM_ERR_ABORTED);
    expect_status("hcomm_send to itself on the aborted group",
                  hcomm_send(&v, 1, HCOMM_INT32, g_rank, 1, grp), HCOMM_ERR_ABORTED);
    for (int r = 0; r < g_size; ++r) {
      if (r != g_rank) CALL(hcomm_send(&v, 1, HCOMM_INT32, r, 30010, g_comm));
    }
  } else {
    /* The world's message follows the abort's notice on one connection. */
    int32_t token = 0;
    CALL(hcomm_recv(&token, 1, HCOMM_INT32, aborter, 30010, g_comm));
    expect_status("hcomm_recv from the aborting rank on its group",
                  hcomm_recv(&token, 1, HCOMM_INT32, aborter, 6, grp), HCOMM_ERR_PEER_FAILURE);
    if (strstr(hcomm_last_error(), "aborted the communicator") == NULL) {
      fail("the receive's error does not say the peer aborted: %s", hcomm_last_error());
    }
    if (g_size > 2 && g_rank < 2) {
      /* Group ranks 0 and 1 (not the aborter): p2p between them goes on. */
      int32_t out = 40 + g_rank, got = -1;
      hcomm_request_t r = NULL;
      CALL(hcomm_irecv(&got, 1, HCOMM_INT32, 1 - g_rank, 7, grp, &r));
      CALL(hcomm_send(&out, 1, HCOMM_INT32, 1 - g_rank, 7, grp));
      CALL(hcomm_wait(r));
      CALL(hcomm_request_free(r));
      if (got != 41 - g_rank) fail("p2p in the group after the abort gave %d", got);
    }
    expect_status("hcomm_allreduce on a group another rank aborted",
                  hcomm_allreduce(&v, &sum, 1, HCOMM_INT32, HCOMM_SUM, grp),
                  HCOMM_ERR_PEER_FAILURE);
  }
  /* The job's timeout is far longer: nothing here waited it out. */
  if (now_s() - start > 20) fail("the abort took %.1f s to be seen", now_s() - start);
  CALL(hcomm_comm_destroy(grp));
  CALL(hcomm_allreduce(&v, &sum, 1, HCOMM_INT32, HCOMM_SUM, g_comm));
  if (sum != g_size) fail("world allreduce after a group's abort gave %d", sum);
  CALL(hcomm_comm_split(g_comm, 0, g_rank, &grp));
  sum = 0;
  CALL(hcomm_allreduce(&v, &sum, 1, HCOMM_INT32, HCOMM_SUM, grp));
  if (sum != g_size) fail("a new group's allreduce gave %d", sum);
  CALL(hcomm_comm_destroy(grp));
  check_done();
}

/* ------------------------------------------------------------------------ */
/* Bad arguments                                                            */

static void check_invalid_arguments(void) {
  set_check("bad arguments to collectives: INVALID_ARGUMENT with a message, comm usable");
  const hcomm_dtype_t bad_t = (hcomm_dtype_t)42;
  const hcomm_reduce_op_t bad_op = (hcomm_reduce_op_t)17;
  int32_t a[64], b[64];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  hcomm_request_t req = NULL;
  const int n = g_size;

  /* unknown dtype */
  EXPECT_BAD(hcomm_allreduce(a, b, 4, bad_t, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_allreduce(a, b, 4, (hcomm_dtype_t)-1, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_broadcast(a, 4, bad_t, 0, g_comm));
  EXPECT_BAD(hcomm_reduce(a, b, 4, bad_t, HCOMM_SUM, 0, g_comm));
  EXPECT_BAD(hcomm_allgather(a, b, 1, bad_t, g_comm));
  EXPECT_BAD(hcomm_reduce_scatter(a, b, 1, bad_t, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_alltoall(a, b, 1, bad_t, g_comm));
  EXPECT_BAD(hcomm_gather(a, b, 1, bad_t, 0, g_comm));
  EXPECT_BAD(hcomm_scatter(a, b, 1, bad_t, 0, g_comm));
  EXPECT_BAD(hcomm_iallreduce(a, b, 4, bad_t, HCOMM_SUM, g_comm, &req));
  /* unknown op */
  EXPECT_BAD(hcomm_allreduce(a, b, 4, HCOMM_INT32, bad_op, g_comm));
  EXPECT_BAD(hcomm_reduce(a, b, 4, HCOMM_INT32, bad_op, 0, g_comm));
  EXPECT_BAD(hcomm_reduce_scatter(a, b, 1, HCOMM_INT32, bad_op, g_comm));
  EXPECT_BAD(hcomm_iallreduce(a, b, 4, HCOMM_INT32, bad_op, g_comm, &req));
  /* root out of range */
  EXPECT_BAD(hcomm_broadcast(a, 4, HCOMM_INT32, n, g_comm));
  EXPECT_BAD(hcomm_broadcast(a, 4, HCOMM_INT32, -1, g_comm));
  EXPECT_BAD(hcomm_reduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, n, g_comm));
  EXPECT_BAD(hcomm_reduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, -1, g_comm));
  EXPECT_BAD(hcomm_gather(a, b, 1, HCOMM_INT32, n, g_comm));
  EXPECT_BAD(hcomm_scatter(a, b, 1, HCOMM_INT32, -1, g_comm));
  EXPECT_BAD(hcomm_scatter(a, b, 1, HCOMM_INT32, n + 5, g_comm));
  /* NULL buffers with count > 0 (on every rank, so that every rank fails
   * locally and none waits in a collective the others never join) */
  EXPECT_BAD(hcomm_allreduce(NULL, b, 4, HCOMM_INT32, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_allreduce(a, NULL, 4, HCOMM_INT32, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_broadcast(NULL, 4, HCOMM_INT32, 0, g_comm));
  EXPECT_BAD(hcomm_reduce(NULL, b, 4, HCOMM_INT32, HCOMM_SUM, 0, g_comm));
  /* the root's recvbuf NULL: the root fails on it, the others on sendbuf */
  EXPECT_BAD(hcomm_reduce(g_rank == 0 ? a : NULL, NULL, 4, HCOMM_INT32, HCOMM_SUM, 0, g_comm));
  EXPECT_BAD(hcomm_gather(g_rank == 0 ? a : NULL, NULL, 1, HCOMM_INT32, 0, g_comm));
  EXPECT_BAD(hcomm_allgather(NULL, b, 1, HCOMM_INT32, g_comm));
  EXPECT_BAD(hcomm_allgather(a, NULL, 1, HCOMM_INT32, g_comm));
  EXPECT_BAD(hcomm_reduce_scatter(NULL, b, 1, HCOMM_INT32, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_reduce_scatter(a, NULL, 1, HCOMM_INT32, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_alltoall(NULL, b, 1, HCOMM_INT32, g_comm));
  EXPECT_BAD(hcomm_alltoall(a, NULL, 1, HCOMM_INT32, g_comm));
  EXPECT_BAD(hcomm_gather(NULL, b, 1, HCOMM_INT32, 0, g_comm));
  EXPECT_BAD(hcomm_scatter(g_rank == 0 ? NULL : a, g_rank == 0 ? b : NULL, 1, HCOMM_INT32, 0,
                           g_comm));
  EXPECT_BAD(hcomm_iallreduce(NULL, b, 4, HCOMM_INT32, HCOMM_SUM, g_comm, &req));
  EXPECT_BAD(hcomm_iallreduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, g_comm, NULL));
  /* NULL comm */
  EXPECT_BAD(hcomm_allreduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, NULL));
  EXPECT_BAD(hcomm_broadcast(a, 4, HCOMM_INT32, 0, NULL));
  EXPECT_BAD(hcomm_reduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, 0, NULL));
  EXPECT_BAD(hcomm_allgather(a, b, 1, HCOMM_INT32, NULL));
  EXPECT_BAD(hcomm_reduce_scatter(a, b, 1, HCOMM_INT32, HCOMM_SUM, NULL));
  EXPECT_BAD(hcomm_alltoall(a, b, 1, HCOMM_INT32, NULL));
  EXPECT_BAD(hcomm_gather(a, b, 1, HCOMM_INT32, 0, NULL));
  EXPECT_BAD(hcomm_scatter(a, b, 1, HCOMM_INT32, 0, NULL));
  EXPECT_BAD(hcomm_barrier(NULL));
  EXPECT_BAD(hcomm_iallreduce(a, b, 4, HCOMM_INT32, HCOMM_SUM, NULL, &req));
  /* counts no buffer can hold: count * element size, and for the per-rank
   * collectives count * size * ranks, past PTRDIFF_MAX or past SIZE_MAX */
  const size_t huge = SIZE_MAX / 2;
  EXPECT_BAD(hcomm_allreduce(a, b, huge, HCOMM_INT32, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_allreduce(a, b, SIZE_MAX, HCOMM_INT8, HCOMM_SUM, g_comm));
  EXPECT_BAD(hcomm_broadcast(a, huge, HCOMM_FLOAT64, 0, g_comm));
  EXPECT_BAD(hcomm_reduce(a, b, huge, HCOMM_INT32, HCOMM_SUM, 0, g_comm));
  EXPECT_BAD(hcomm_iallreduce(a, b, huge, HCOMM_INT32, HCOMM_SUM, g_comm, &req));
  if (n > 1) {
    /* one element per rank fits; n ranks' worth of them does not */
    const size_t per_rank = (size_t)PTRDIFF_MAX / 4 / (size_t)n + 1;
    EXPECT_BAD(hcomm_allgather(a, b, per_rank, HCOMM_INT32, g_comm));
    EXPECT_BAD(hcomm_reduce_scatter(a, b, per_rank, HCOMM_INT32, HCOMM_SUM, g_comm));
    EXPECT_BAD(hcomm_alltoall(a, b, per_rank, HCOMM_INT32, g_comm));
  }
  /* (only the root's buffer of a gather or scatter holds n counts: a count
   * that fails there alone would leave the others waiting for the root) */
  EXPECT_BAD(hcomm_gather(a, b, huge, HCOMM_INT32, 0, g_comm));
  EXPECT_BAD(hcomm_scatter(a, b, huge, HCOMM_INT32, 0, g_comm));
  if (strstr(hcomm_last_error(), "count") == NULL) {
    fail("a count too large: the last error \"%s\" does not name the count",
         hcomm_last_error());
  }
  /* groups and settings */
  hcomm_comm_t sub = NULL;
  EXPECT_BAD(hcomm_comm_split(NULL, 0, 0, &sub));
  EXPECT_BAD(hcomm_comm_split(g_comm, 0, 0, NULL));
  EXPECT_BAD(hcomm_comm_split(g_comm, -7, 0, &sub));
  int dup[2] = {0, 0}, out_of_range[1] = {n};
  EXPECT_BAD(hcomm_comm_create_group(NULL, dup, 1, &sub));
  EXPECT_BAD(hcomm_comm_create_group(g_comm, NULL, 1, &sub));
  EXPECT_BAD(hcomm_comm_create_group(g_comm, dup, 2, &sub));
  EXPECT_BAD(hcomm_comm_create_group(g_comm, out_of_range, 1, &sub));
  EXPECT_BAD(hcomm_comm_set(g_comm, "algo", "bogus"));
  EXPECT_BAD(hcomm_comm_set(g_comm, "algo", NULL));

  /* A negative op is as unknown as 17 (the C API uses -1 internally for
   * "no op": it must not leak through). */
  EXPECT_BAD(hcomm_allreduce(a, b, 4, HCOMM_INT32, (hcomm_reduce_op_t)-1, g_comm));
  EXPECT_BAD(hcomm_reduce(a, b, 4, HCOMM_FLOAT32, (hcomm_reduce_op_t)-1, 0, g_comm));
  EXPECT_BAD(hcomm_reduce_scatter(a, b, 1, HCOMM_INT32, (hcomm_reduce_op_t)-2, g_comm));
  EXPECT_BAD(hcomm_iallreduce(a, b, 4, HCOMM_INT32, (hcomm_reduce_op_t)-1, g_comm, &req));

  /* Still usable, with the algorithm that was set before. */
  allreduce_case(HCOMM_INT32, HCOMM_SUM, 1023, 0);
  allreduce_case(HCOMM_FLOAT16, HCOMM_MAX, 7, 1);
  CALL(hcomm_barrier(g_comm));

  /* One rank alone passes a bad argument: its call still takes its turn,
   * the others' call fails at once naming it, and the calls after it stay
   * paired (equal calls used to pair one apart and return each other's
   * sums with SUCCESS). */
  if (n > 1) {
    const int bad_rank = n - 1;
    int32_t v = 1;
    hcomm_status_t st = hcomm_allreduce(&v, &v, 1, g_rank == bad_rank ? bad_t : HCOMM_INT32,
                                        HCOMM_SUM, g_comm);
    char message[2048];
    snprintf(message, sizeof message, "%s", hcomm_last_error());
    expect_status("hcomm_allreduce (a bad dtype on the last rank alone)", st,
                  g_rank == bad_rank ? HCOMM_ERR_INVALID_ARGUMENT : HCOMM_ERR_MISMATCH);
    if (g_rank != bad_rank && strstr(message, "rejected its call") == NULL) {
      fail("the others' call failed without naming the rejected call: %s", message);
    }
    for (int k = 0; k < 3; ++k) {
      int32_t x = 100 * k + g_rank;
      CALL(hcomm_allreduce(&x, &x, 1, HCOMM_INT32, HCOMM_SUM, g_comm));
      const int32_t want = 100 * k * n + n * (n - 1) / 2;
      if (x != want) fail("allreduce %d after a rejected call: %d, expected %d", k, x, want);
    }
  }
  check_done();
}

/* ------------------------------------------------------------------------ */

int main(void) {
  static const char* kAlgos[] = {"ring", "tree", "direct", "auto"};
  setvbuf(stdout, NULL, _IOLBF, 0);
  CALL(hcomm_comm_init(NULL, &g_comm));
  CALL(hcomm_comm_rank(g_comm, &g_rank));
  CALL(hcomm_comm_size(g_comm, &g_size));
  if (g_size > 64) fail("at most 64 ranks, got %d", g_size);
  barrier();
  ok("init");

  for (size_t a = 0; a < sizeof kAlgos / sizeof kAlgos[0]; ++a) {
    g_algo = kAlgos[a];
    set_check("hcomm_comm_set algo %s", g_algo);
    set_algo(g_comm, g_algo);
    check_done();
    check_allreduce();
    check_broadcast();
    check_reduce();
    check_gather_scatter();
    check_allgather_rs_a2a();
    check_barrier();
    check_iallreduce();
  }
  g_algo = "auto";
  check_groups();
  check_group_abort();
  check_invalid_arguments();

  set_check("destroy");
  barrier();
  CALL(hcomm_comm_destroy(g_comm));
  g_comm = NULL;
  ok("all");
  return 0;
}
