/* stream_acceptance: hcomm's streams and events as a C program uses them
 * (API.md, "Streams, priorities and fusion"), run as real processes by
 * hcomm_run (tests/streams/stream_acceptance_test.sh: 4 and 2 ranks, shared
 * memory and tcp).
 *
 * Checks, in order:
 *   - every kind of operation on a stream gives what its blocking call gives;
 *   - order within a stream: host callbacks see the operations before them;
 *   - streams are matching contexts of their own: a stream's recv never
 *     takes a blocking send of the same peer and tag, nor another stream's;
 *   - events: a stream waits for another's mark; event query/synchronize;
 *   - 200 small allreduces back to back (what fusion runs as one) and
 *     mixed dtypes and ops between them, every result exact;
 *   - errors: a collective refused on one rank fails the others' stream
 *     with MISMATCH, sticks until synchronize, and the stream works after;
 *   - bad input: INVALID_ARGUMENT naming the argument, stream still usable;
 *   - the scheduler: the seed's three tasks, a disagreeing policy (MISMATCH
 *     on every rank), a failing task, bad input;
 *   - destroy runs out what is queued; a stream outlives its communicator.
 * Every rank prints "ok: <check>" per check and "ok: all" at the end.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcomm/hcomm.h"

static int g_rank = -1;
static int g_size = 0;
static hcomm_comm_t g_comm = NULL;
static char g_check[256] = "init";

static void set_check(const char* what) { snprintf(g_check, sizeof g_check, "%s", what); }

static void fail(const char* fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "FAIL: %s: rank %d of %d: ", g_check, g_rank, g_size);
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

/* A call that had to fail with `want` and a message containing `needle`. */
static void expect(const char* call, hcomm_status_t got, hcomm_status_t want,
                   const char* needle) {
  char message[2048];
  snprintf(message, sizeof message, "%s", hcomm_last_error());
  if (got != want) {
    fail("%s returned %s, expected %s (last error: %s)", call, hcomm_status_string(got),
         hcomm_status_string(want), message);
  }
  if (strstr(message, needle) == NULL) {
    fail("%s: the message does not say \"%s\": %s", call, needle, message);
  }
}
#define EXPECT(expr, want, needle) expect(#expr, (expr), (want), (needle))

static void ok(const char* check) { printf("ok: %s\n", check); }

static hcomm_op_t make_op(hcomm_op_kind_t kind, const void* send, void* recv, size_t count,
                          hcomm_dtype_t dtype) {
  hcomm_op_t op = HCOMM_OP_INIT;
  op.kind = kind;
  op.sendbuf = send;
  op.recvbuf = recv;
  op.count = count;
  op.dtype = dtype;
  op.op = HCOMM_SUM;
  return op;
}

static void enqueue(hcomm_stream_t s, hcomm_op_t op) { CALL(hcomm_stream_enqueue(s, &op)); }

/* Triangular numbers: the sum over ranks r of (r + 1) * k is k * n(n+1)/2. */
static int64_t rank_sum(int64_t k) { return k * g_size * (g_size + 1) / 2; }

static void check_every_kind(hcomm_stream_t s) {
  enum { N = 5 };
  const int n = g_size, me = g_rank;
  int32_t in[N], ar[N], bc[N], red[N], ag[N * 64], rs[N], rs_in[N * 64], a2a_in[N * 64],
      a2a[N * 64], ga[N * 64], sc_in[N * 64], sc[N], got = -1;
  int i, r;
  hcomm_op_t op;
  set_check("every kind of operation on a stream");
  for (i = 0; i < N; ++i) {
    in[i] = (me + 1) * (i + 1);
    bc[i] = me == 1 % n ? 1000 + i : -1;
  }
  for (i = 0; i < N * n; ++i) {
    rs_in[i] = (me + 1) * (i + 1);
    a2a_in[i] = me * 1000 + i;
    sc_in[i] = me == 0 ? 7 * i : -1;
  }
  enqueue(s, make_op(HCOMM_OP_ALLREDUCE, in, ar, N, HCOMM_INT32));
  op = make_op(HCOMM_OP_BROADCAST, NULL, bc, N, HCOMM_INT32);
  op.peer_or_root = 1 % n;
  enqueue(s, op);
  op = make_op(HCOMM_OP_REDUCE, in, red, N, HCOMM_INT32);
  op.op = HCOMM_MAX;
  op.peer_or_root = n - 1;
  enqueue(s, op);
  enqueue(s, make_op(HCOMM_OP_ALLGATHER, in, ag, N, HCOMM_INT32));
  enqueue(s, make_op(HCOMM_OP_REDUCE_SCATTER, rs_in, rs, N, HCOMM_INT32));
  enqueue(s, make_op(HCOMM_OP_ALLTOALL, a2a_in, a2a, N, HCOMM_INT32));
  enqueue(s, make_op(HCOMM_OP_GATHER, in, ga, N, HCOMM_INT32));
  enqueue(s, make_op(HCOMM_OP_SCATTER, sc_in, sc, N, HCOMM_INT32));
  enqueue(s, make_op(HCOMM_OP_BARRIER, NULL, NULL, 0, HCOMM_INT8));
  if (n > 1) {
    op = make_op(HCOMM_OP_SEND, &me, NULL, 1, HCOMM_INT32);
    op.peer_or_root = (me + 1) % n;
    op.tag = 3;
    enqueue(s, op);
    op = make_op(HCOMM_OP_RECV, NULL, &got, 1, HCOMM_INT32);
    op.peer_or_root = (me + n - 1) % n;
    op.tag = 3;
    enqueue(s, op);
  }
  CALL(hcomm_stream_synchronize(s));
  for (i = 0; i < N; ++i) {
    if (ar[i] != rank_sum(i + 1)) fail("allreduce[%d] = %d, expected %lld", i, ar[i], (long long)rank_sum(i + 1));
    if (bc[i] != 1000 + i) fail("broadcast[%d] = %d", i, bc[i]);
    if (me == n - 1 && red[i] != n * (i + 1)) fail("reduce max[%d] = %d", i, red[i]);
    if (rs[i] != rank_sum(me * N + i + 1)) fail("reduce_scatter[%d] = %d", i, rs[i]);
    if (sc[i] != 7 * (me * N + i)) fail("scatter[%d] = %d", i, sc[i]);
  }
  for (r = 0; r < n; ++r) {
    for (i = 0; i < N; ++i) {
      if (ag[r * N + i] != (r + 1) * (i + 1)) fail("allgather[%d][%d] = %d", r, i, ag[r * N + i]);
      if (me == 0 && ga[r * N + i] != (r + 1) * (i + 1)) fail("gather[%d][%d]", r, i);
      if (a2a[r * N + i] != r * 1000 + me * N + i) fail("alltoall[%d][%d] = %d", r, i, a2a[r * N + i]);
    }
  }
  if (n > 1 && got != (me + n - 1) % n) fail("stream recv got %d", got);
  ok("every kind of operation on a stream");
}

/* Host callbacks run in order with the stream's operations. */
struct chain {
  int64_t value;
  int64_t seen[3];
  int calls;
};
static void note_value(void* arg) {
  struct chain* c = (struct chain*)arg;
  if (c->calls < 3) c->seen[c->calls] = c->value;
  ++c->calls;
}

static void check_order(hcomm_stream_t s) {
  struct chain c;
  int k;
  set_check("order within a stream, host callbacks");
  memset(&c, 0, sizeof c);
  c.value = 1;
  for (k = 0; k < 3; ++k) {  /* value <- value * size, three times, in place */
    enqueue(s, make_op(HCOMM_OP_ALLREDUCE, &c.value, &c.value, 1, HCOMM_INT64));
    CALL(hcomm_stream_enqueue_host(s, note_value, &c));
  }
  CALL(hcomm_stream_synchronize(s));
  if (c.calls != 3) fail("%d host callbacks ran, expected 3", c.calls);
  for (k = 0; k < 3; ++k) {
    int64_t want = 1;
    int j;
    for (j = 0; j <= k; ++j) want *= g_size;
    if (c.seen[k] != want) fail("callback %d saw %lld, expected %lld", k, (long long)c.seen[k], (long long)want);
  }
  ok("order within a stream, host callbacks");
}

/* A stream's recv takes only that stream's send of the same peer and tag. */
static void check_contexts(hcomm_stream_t a, hcomm_stream_t b) {
  int32_t from_blocking = -1, from_a = -1, from_b = -1, v;
  hcomm_op_t op;
  int idle = -1;
  set_check("streams are matching contexts of their own");
  if (g_size < 2) return;
  if (g_rank == 0) {
    /* Posted first, on both streams: the blocking send below must not match them. */
    op = make_op(HCOMM_OP_RECV, NULL, &from_b, 1, HCOMM_INT32);
    op.peer_or_root = 1;
    op.tag = 9;
    enqueue(b, op);
    op.recvbuf = &from_a;
    enqueue(a, op);
    CALL(hcomm_recv(&from_blocking, 1, HCOMM_INT32, 1, 9, g_comm));
    CALL(hcomm_stream_synchronize(a));
    CALL(hcomm_stream_synchronize(b));
    CALL(hcomm_stream_query(a, &idle));
    if (idle != 1) fail("stream a is not idle after synchronize");
    if (from_blocking != 100 || from_a != 200 || from_b != 300) {
      fail("blocking recv got %d (100), stream a %d (200), stream b %d (300)", from_blocking,
           from_a, from_b);
    }
  } else if (g_rank == 1) {
    v = 100;
    CALL(hcomm_send(&v, 1, HCOMM_INT32, 0, 9, g_comm));
    v = 300;
    op = make_op(HCOMM_OP_SEND, &v, NULL, 1, HCOMM_INT32);
    op.peer_or_root = 0;
    op.tag = 9;
    enqueue(b, op);
    CALL(hcomm_stream_synchronize(b));
    v = 200;
    enqueue(a, op);
    CALL(hcomm_stream_synchronize(a));
  }
  ok("streams are matching contexts of their own");
}

static void check_events(hcomm_stream_t a, hcomm_stream_t b) {
  enum { N = 1 << 16 };
  float* x = (float*)malloc(N * sizeof(float));
  float* y = (float*)malloc(N * sizeof(float));
  hcomm_event_t e;
  int done = -1, i;
  set_check("events across streams");
  if (x == NULL || y == NULL) fail("out of memory");
  for (i = 0; i < N; ++i) x[i] = 1.0f;
  CALL(hcomm_event_create(&e));
  CALL(hcomm_event_query(e, &done));
  if (done != 1) fail("an event never recorded is not reached");
  CALL(hcomm_event_synchronize(e));
  /* b's allreduce of x waits for a's allreduce that produces x. */
  enqueue(a, make_op(HCOMM_OP_ALLREDUCE, x, x, N, HCOMM_FLOAT32));
  CALL(hcomm_event_record(e, a));
  CALL(hcomm_stream_wait_event(b, e));
  enqueue(b, make_op(HCOMM_OP_ALLREDUCE, x, y, N, HCOMM_FLOAT32));
  CALL(hcomm_event_record(e, b));
  CALL(hcomm_event_synchronize(e));
  CALL(hcomm_event_query(e, &done));
  if (done != 1) fail("event not reached after its synchronize");
  for (i = 0; i < N; ++i) {
    if (y[i] != (float)g_size * (float)g_size) fail("y[%d] = %g, expected %d", i, y[i], g_size * g_size);
  }
  CALL(hcomm_stream_synchronize(a));
  CALL(hcomm_stream_synchronize(b));
  CALL(hcomm_event_destroy(e));
  free(x);
  free(y);
  ok("events across streams");
}

/* Back-to-back small allreduces (what fusion runs as one), with changes of
 * dtype and op and a host callback among them. */
static void check_many_small(hcomm_stream_t s) {
  enum { K = 200, N = 33 };
  static int32_t a[K][N];
  static double d[N];
  static float f[N];
  struct chain c;
  hcomm_op_t op;
  int k, i;
  set_check("200 small allreduces back to back");
  memset(&c, 0, sizeof c);
  for (k = 0; k < K; ++k) {
    for (i = 0; i < N; ++i) a[k][i] = (g_rank + 1) * (k * N + i);
    op = make_op(HCOMM_OP_ALLREDUCE, a[k], a[k], N, HCOMM_INT32);
    if (k % 50 == 49) op.op = HCOMM_MAX;  /* another op ends a run */
    enqueue(s, op);
    if (k == 120) {
      for (i = 0; i < N; ++i) d[i] = g_rank + 0.5;
      enqueue(s, make_op(HCOMM_OP_ALLREDUCE, d, d, N, HCOMM_FLOAT64));  /* another dtype */
      CALL(hcomm_stream_enqueue_host(s, note_value, &c));
    }
    if (k == 150) {
      for (i = 0; i < N; ++i) f[i] = 2.0f;
      op = make_op(HCOMM_OP_ALLREDUCE, f, f, N, HCOMM_FLOAT32);
      op.op = HCOMM_PROD;
      enqueue(s, op);
    }
  }
  CALL(hcomm_stream_synchronize(s));
  for (k = 0; k < K; ++k) {
    for (i = 0; i < N; ++i) {
      int64_t want = k % 50 == 49 ? (int64_t)g_size * (k * N + i) : rank_sum(k * N + i);
      if (a[k][i] != want) fail("allreduce %d [%d] = %d, expected %lld", k, i, a[k][i], (long long)want);
    }
  }
  for (i = 0; i < N; ++i) {
    if (d[i] != g_size * (g_size - 1) / 2.0 + 0.5 * g_size) fail("float64 allreduce [%d] = %g", i, d[i]);
    if (f[i] != (float)(1 << g_size)) fail("float32 prod [%d] = %g", i, f[i]);
  }
  if (c.calls != 1) fail("the host callback among them ran %d times", c.calls);
  ok("200 small allreduces back to back");
}

static void check_errors(hcomm_stream_t s) {
  int32_t v = 1, w = 0;
  hcomm_op_t op;
  set_check("a refused collective fails the other ranks' stream");
  if (g_size < 2) return;
  op = make_op(HCOMM_OP_ALLREDUCE, &v, &w, 1, HCOMM_INT32);
  if (g_rank == 1) op.dtype = (hcomm_dtype_t)99;
  if (g_rank == 1) {
    EXPECT(hcomm_stream_enqueue(s, &op), HCOMM_ERR_INVALID_ARGUMENT, "dtype 99");
  } else {
    enqueue(s, op);
  }
  /* Queued after the failure: skipped on the ranks whose stream failed. */
  op.dtype = HCOMM_INT32;
  enqueue(s, op);
  if (g_rank == 1) {
    hcomm_status_t st = hcomm_stream_synchronize(s);
    if (st != HCOMM_SUCCESS && st != HCOMM_ERR_MISMATCH) fail_call("hcomm_stream_synchronize", st);
  } else {
    EXPECT(hcomm_stream_synchronize(s), HCOMM_ERR_MISMATCH, "allreduce");
    CALL(hcomm_stream_synchronize(s));  /* cleared */
  }
  /* Cleared on every rank: the stream works again. */
  CALL(hcomm_barrier(g_comm));
  v = g_rank + 1;
  enqueue(s, make_op(HCOMM_OP_ALLREDUCE, &v, &w, 1, HCOMM_INT32));
  CALL(hcomm_stream_synchronize(s));
  if (w != rank_sum(1)) fail("allreduce after the failure gave %d", w);
  ok("a refused collective fails the other ranks' stream");
}

static void check_bad_input(hcomm_stream_t s) {
  hcomm_op_t op = HCOMM_OP_INIT;
  int32_t v = 0;
  struct {
    hcomm_op_t op;
    int64_t future_field;
  } big;
  set_check("bad input");
  EXPECT(hcomm_stream_enqueue(NULL, &op), HCOMM_ERR_INVALID_ARGUMENT, "s is NULL");
  EXPECT(hcomm_stream_enqueue(s, NULL), HCOMM_ERR_INVALID_ARGUMENT, "op is NULL");
  op.struct_size = 8;
  EXPECT(hcomm_stream_enqueue(s, &op), HCOMM_ERR_INVALID_ARGUMENT, "struct_size is 8");
  op.struct_size = sizeof op;
  op.kind = (hcomm_op_kind_t)42;
  EXPECT(hcomm_stream_enqueue(s, &op), HCOMM_ERR_INVALID_ARGUMENT, "kind 42");
  op = make_op(HCOMM_OP_SEND, NULL, NULL, 4, HCOMM_INT32);
  EXPECT(hcomm_stream_enqueue(s, &op), HCOMM_ERR_INVALID_ARGUMENT, "buf is NULL");
  op = make_op(HCOMM_OP_RECV, NULL, &v, 1, HCOMM_INT32);
  op.peer_or_root = g_size;
  EXPECT(hcomm_stream_enqueue(s, &op), HCOMM_ERR_INVALID_ARGUMENT, "peer");
  /* A larger struct from a later header: taken with its new fields unset. */
  memset(&big, 0, sizeof big);
  big.op = make_op(HCOMM_OP_BARRIER, NULL, NULL, 0, HCOMM_INT8);
  big.op.struct_size = sizeof big;
  CALL(hcomm_stream_enqueue(s, &big.op));
  big.future_field = 1;
  EXPECT(hcomm_stream_enqueue(s, &big.op), HCOMM_ERR_INVALID_ARGUMENT, "does not know");
  EXPECT(hcomm_stream_enqueue_host(s, NULL, NULL), HCOMM_ERR_INVALID_ARGUMENT, "fn is NULL");
  EXPECT(hcomm_stream_query(s, NULL), HCOMM_ERR_INVALID_ARGUMENT, "idle is NULL");
  EXPECT(hcomm_stream_create(g_comm, 0, NULL), HCOMM_ERR_INVALID_ARGUMENT, "out is NULL");
  EXPECT(hcomm_stream_create(NULL, 0, &s), HCOMM_ERR_INVALID_ARGUMENT, "comm is NULL");
  EXPECT(hcomm_event_create(NULL), HCOMM_ERR_INVALID_ARGUMENT, "out is NULL");
  EXPECT(hcomm_event_record(NULL, s), HCOMM_ERR_INVALID_ARGUMENT, "e is NULL");
  EXPECT(hcomm_stream_wait_event(s, NULL), HCOMM_ERR_INVALID_ARGUMENT, "e is NULL");
  EXPECT(hcomm_event_synchronize(NULL), HCOMM_ERR_INVALID_ARGUMENT, "e is NULL");
  CALL(hcomm_stream_synchronize(s));  /* the barrier above ran; nothing failed */
  ok("bad input");
}

/* ---- the communication scheduler ---------------------------------------- */

/* The seed's three tasks: gradient sync (priority 10) allreduces the
 * gradients, the parameter update (5) after it applies them, logging (1)
 * after both records the step. */
struct model {
  float grad[256];
  float param[256];
  int steps_logged;
  float logged;
};

static hcomm_status_t sync_task(hcomm_stream_t s, void* arg) {
  struct model* m = (struct model*)arg;
  hcomm_op_t op = make_op(HCOMM_OP_ALLREDUCE, m->grad, m->grad, 256, HCOMM_FLOAT32);
  int i;
  for (i = 0; i < 256; ++i) m->grad[i] = (float)(g_rank + 1);
  return hcomm_stream_enqueue(s, &op);
}

static hcomm_status_t update_task(hcomm_stream_t s, void* arg) {
  struct model* m = (struct model*)arg;
  int i;
  (void)s;
  for (i = 0; i < 256; ++i) m->param[i] -= 0.5f * m->grad[i];
  return HCOMM_SUCCESS;
}

static hcomm_status_t log_task(hcomm_stream_t s, void* arg) {
  struct model* m = (struct model*)arg;
  (void)s;
  m->logged = m->param[0];
  ++m->steps_logged;
  return HCOMM_SUCCESS;
}

static hcomm_status_t failing_task(hcomm_stream_t s, void* arg) {
  int32_t v = 0;
  hcomm_op_t op = make_op(HCOMM_OP_SEND, &v, NULL, 1, HCOMM_INT32);
  (void)arg;
  op.peer_or_root = g_size + 5;  /* refused: the task fails with that error */
  return hcomm_stream_enqueue(s, &op);
}

static int lowest_first(const hcomm_task_info_t* ready, int nready, void* user) {
  int best = 0, i;
  (void)user;
  for (i = 1; i < nready; ++i) {
    if (ready[i].priority < ready[best].priority) best = i;
  }
  return best;
}

static void check_scheduler(void) {
  static struct model m;
  static const char* const kSync[] = {"gradient_sync"};
  static const char* const kBoth[] = {"gradient_sync", "param_update"};
  static const char* const kGhost[] = {"ghost"};
  hcomm_scheduler_t sch, other;
  int i, step;
  set_check("the seed's three tasks on the scheduler");
  memset(&m, 0, sizeof m);
  CALL(hcomm_scheduler_create(g_comm, &sch));
  CALL(hcomm_scheduler_add_task(sch, "logging", 1, kBoth, 2, log_task, &m));
  CALL(hcomm_scheduler_add_task(sch, "param_update", 5, kSync, 1, update_task, &m));
  CALL(hcomm_scheduler_add_task(sch, "gradient_sync", 10, NULL, 0, sync_task, &m));
  for (step = 1; step <= 3; ++step) {
    CALL(hcomm_scheduler_run(sch));
    if (m.logged != -0.5f * step * rank_sum(1)) {
      fail("step %d logged %g, expected %g", step, m.logged, -0.5f * step * rank_sum(1));
    }
  }
  for (i = 0; i < 256; ++i) {
    if (m.param[i] != -1.5f * rank_sum(1)) fail("param[%d] = %g", i, m.param[i]);
  }
  if (m.steps_logged != 3) fail("logging ran %d times", m.steps_logged);
  ok("the seed's three tasks on the scheduler");

  set_check("scheduler errors");
  EXPECT(hcomm_scheduler_add_task(sch, "logging", 1, NULL, 0, log_task, &m),
         HCOMM_ERR_INVALID_ARGUMENT, "'logging' is registered twice");
  EXPECT(hcomm_scheduler_add_task(sch, "x", 1, NULL, 0, NULL, NULL), HCOMM_ERR_INVALID_ARGUMENT,
         "fn is NULL");
  EXPECT(hcomm_scheduler_add_task(sch, NULL, 1, NULL, 0, log_task, NULL),
         HCOMM_ERR_INVALID_ARGUMENT, "id is NULL");
  EXPECT(hcomm_scheduler_add_task(sch, "x", 1, NULL, 2, log_task, NULL),
         HCOMM_ERR_INVALID_ARGUMENT, "depends_on is NULL with ndeps 2");
  EXPECT(hcomm_scheduler_run(NULL), HCOMM_ERR_INVALID_ARGUMENT, "s is NULL");
  /* A policy that disagrees on one rank: MISMATCH everywhere, naming both. */
  if (g_size > 1) {
    if (g_rank == g_size - 1) CALL(hcomm_scheduler_set_policy(sch, lowest_first, NULL));
    CALL(hcomm_scheduler_add_task(sch, "prefetch", 7, NULL, 0, log_task, &m));
    EXPECT(hcomm_scheduler_run(sch), HCOMM_ERR_MISMATCH,
           "starts task 'gradient_sync' (priority 10) where rank");
    CALL(hcomm_scheduler_set_policy(sch, NULL, NULL));
    CALL(hcomm_scheduler_run(sch));
  }
  /* A failing task is named; what depends on it does not run. */
  CALL(hcomm_scheduler_create(g_comm, &other));
  CALL(hcomm_scheduler_add_task(other, "bad", 3, NULL, 0, failing_task, NULL));
  m.steps_logged = 0;
  CALL(hcomm_scheduler_add_task(other, "after_bad", 3, (const char* const[]){"bad"}, 1, log_task, &m));
  EXPECT(hcomm_scheduler_run(other), HCOMM_ERR_INVALID_ARGUMENT, "task 'bad' (priority 3) failed");
  EXPECT(hcomm_scheduler_run(other), HCOMM_ERR_INVALID_ARGUMENT, "not run, as they depend on a failed task: 'after_bad'");
  if (m.steps_logged != 0) fail("a task that depends on a failed one ran");
  CALL(hcomm_scheduler_destroy(other));
  CALL(hcomm_scheduler_create(g_comm, &other));
  CALL(hcomm_scheduler_add_task(other, "a", 1, kGhost, 1, log_task, &m));
  EXPECT(hcomm_scheduler_run(other), HCOMM_ERR_INVALID_ARGUMENT, "depends on 'ghost'");
  CALL(hcomm_scheduler_destroy(other));
  CALL(hcomm_scheduler_destroy(sch));
  EXPECT(hcomm_scheduler_destroy(sch), HCOMM_ERR_INVALID_ARGUMENT, "destroyed already");
  ok("scheduler errors");
}

int main(void) {
  hcomm_stream_t hi, lo, third;
  hcomm_event_t e;
  int32_t v = 0, w = 0, w2 = 0;
  hcomm_op_t op;
  setvbuf(stdout, NULL, _IOLBF, 0);
  CALL(hcomm_comm_init(NULL, &g_comm));
  CALL(hcomm_comm_rank(g_comm, &g_rank));
  CALL(hcomm_comm_size(g_comm, &g_size));
  if (g_size > 64) fail("at most 64 ranks, got %d", g_size);
  set_check("hcomm_stream_create");
  CALL(hcomm_stream_create(g_comm, 10, &hi));
  CALL(hcomm_stream_create(g_comm, 0, &lo));
  ok("hcomm_stream_create");

  check_every_kind(hi);
  check_every_kind(lo);
  check_order(lo);
  check_contexts(hi, lo);
  check_events(hi, lo);
  check_many_small(lo);
  check_errors(hi);
  check_bad_input(lo);
  check_scheduler();

  set_check("destroy runs out what is queued");
  v = g_rank + 1;
  enqueue(hi, make_op(HCOMM_OP_ALLREDUCE, &v, &w, 1, HCOMM_INT32));
  CALL(hcomm_stream_destroy(hi));
  if (w != rank_sum(1)) fail("allreduce queued before destroy gave %d", w);
  EXPECT(hcomm_stream_synchronize(hi), HCOMM_ERR_INVALID_ARGUMENT, "destroyed");
  EXPECT(hcomm_stream_destroy(hi), HCOMM_ERR_INVALID_ARGUMENT, "destroyed already");
  ok("destroy runs out what is queued");

  set_check("a stream outlives its communicator");
  CALL(hcomm_stream_create(g_comm, 5, &third));
  CALL(hcomm_event_create(&e));
  CALL(hcomm_comm_destroy(g_comm));
  g_comm = NULL;
  v = g_rank + 1;
  op = make_op(HCOMM_OP_ALLREDUCE, &v, &w, 1, HCOMM_INT32);
  enqueue(third, op);
  op.recvbuf = &w2;  /* the two streams run at once: buffers of their own */
  enqueue(lo, op);
  CALL(hcomm_event_record(e, lo));
  CALL(hcomm_event_synchronize(e));
  CALL(hcomm_event_destroy(e));
  EXPECT(hcomm_event_destroy(e), HCOMM_ERR_INVALID_ARGUMENT, "destroyed already");
  CALL(hcomm_stream_destroy(third));
  CALL(hcomm_stream_destroy(lo));
  if (w != rank_sum(1) || w2 != rank_sum(1)) {
    fail("allreduces after the communicator's destroy gave %d and %d", w, w2);
  }
  ok("a stream outlives its communicator");
  ok("all");
  return 0;
}
