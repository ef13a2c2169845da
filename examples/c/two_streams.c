/* two_streams: a bulk transfer and urgent messages on streams of different
 * priorities.
 *
 *   bazel run //examples/c:two_streams                  # 4 ranks, 64 MiB bulk
 *   bazel run //examples/c:two_streams -- --bulk 256M
 *
 * Every rank queues one large allreduce (the "bulk", e.g. a model's
 * weights) on a stream of priority 0, and while it runs, ten small
 * allreduces (e.g. a learning-rate or stop signal) one after another on a
 * stream of priority 10, each waited for through an event. The bulk steps
 * aside between its pieces while an urgent one runs, so each urgent
 * allreduce takes about a piece's time instead of the whole bulk's. A host
 * callback queued after the bulk reports when it has run. Rank 0 prints
 * the times; every rank checks every result.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcomm/hcomm.h"

static int g_rank = -1;

static void check(hcomm_status_t st, const char* what) {
  if (st != HCOMM_SUCCESS) {
    fprintf(stderr, "two_streams: rank %d: %s: %s: %s\n", g_rank, what, hcomm_status_string(st),
            hcomm_last_error());
    exit(1);
  }
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static size_t parse_size(const char* s) {
  char* end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return (size_t)v;
}

static double g_bulk_done_at;
static void bulk_done(void* arg) {
  (void)arg;
  g_bulk_done_at = now_us();
}

int main(int argc, char** argv) {
  size_t bulk_bytes = (size_t)64 << 20, count, i;
  hcomm_comm_t comm;
  hcomm_stream_t bulk, urgent;
  hcomm_event_t done;
  hcomm_op_t op = HCOMM_OP_INIT;
  float *big, signal[2];
  double t0, slowest = 0, total = 0;
  int size, k;
  if (argc == 3 && strcmp(argv[1], "--bulk") == 0) bulk_bytes = parse_size(argv[2]);
  count = bulk_bytes / sizeof(float);

  check(hcomm_comm_init(NULL, &comm), "hcomm_comm_init");
  check(hcomm_comm_rank(comm, &g_rank), "hcomm_comm_rank");
  check(hcomm_comm_size(comm, &size), "hcomm_comm_size");
  /* Collective: every rank makes its streams in the same order. */
  check(hcomm_stream_create(comm, 0, &bulk), "hcomm_stream_create(0)");
  check(hcomm_stream_create(comm, 10, &urgent), "hcomm_stream_create(10)");
  check(hcomm_event_create(&done), "hcomm_event_create");
  big = malloc(bulk_bytes);
  if (big == NULL) return 1;
  for (i = 0; i < count; ++i) big[i] = 1.0f;

  check(hcomm_barrier(comm), "hcomm_barrier");
  t0 = now_us();
  op.kind = HCOMM_OP_ALLREDUCE;
  op.sendbuf = big;
  op.recvbuf = big;
  op.count = count;
  op.dtype = HCOMM_FLOAT32;
  op.op = HCOMM_SUM;
  check(hcomm_stream_enqueue(bulk, &op), "enqueue the bulk");  /* returns at once */
  check(hcomm_stream_enqueue_host(bulk, bulk_done, NULL), "enqueue_host");

  for (k = 0; k < 10; ++k) {
    double a;
    signal[0] = (float)(g_rank + k);
    signal[1] = 1.0f;
    op.sendbuf = signal;
    op.recvbuf = signal;
    op.count = 2;
    a = now_us();
    check(hcomm_stream_enqueue(urgent, &op), "enqueue an urgent allreduce");
    check(hcomm_event_record(done, urgent), "hcomm_event_record");
    check(hcomm_event_synchronize(done), "hcomm_event_synchronize");
    a = now_us() - a;
    total += a;
    if (a > slowest) slowest = a;
    if (signal[0] != (float)(size * (size - 1) / 2 + size * k) || signal[1] != (float)size) {
      fprintf(stderr, "two_streams: rank %d: urgent allreduce %d gave %g, %g\n", g_rank, k,
              signal[0], signal[1]);
      return 1;
    }
  }
  check(hcomm_stream_synchronize(bulk), "synchronize the bulk");
  for (i = 0; i < count; ++i) {
    if (big[i] != (float)size) {
      fprintf(stderr, "two_streams: rank %d: bulk[%zu] = %g\n", g_rank, i, big[i]);
      return 1;
    }
  }
  if (g_rank == 0) {
    printf("bulk allreduce of %zu MiB on the priority-0 stream: %.1f ms\n", bulk_bytes >> 20,
           (g_bulk_done_at - t0) / 1e3);
    printf("10 urgent 8-byte allreduces on the priority-10 stream meanwhile: mean %.0f us, "
           "slowest %.0f us\n", total / 10, slowest);
    printf("ok: %d ranks\n", size);
  }
  check(hcomm_event_destroy(done), "hcomm_event_destroy");
  check(hcomm_stream_destroy(urgent), "hcomm_stream_destroy");
  check(hcomm_stream_destroy(bulk), "hcomm_stream_destroy");
  check(hcomm_comm_destroy(comm), "hcomm_comm_destroy");
  free(big);
  return 0;
}
