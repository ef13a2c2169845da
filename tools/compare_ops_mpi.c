/* Open MPI's side of tools/compare_ops.sh: times one MPI collective per size,
 * as hcomm_bench times hcomm's (nccl-tests sizes: broadcast/reduce the
 * buffer, allgather and gather the gathered output, reduce_scatter the
 * input, alltoall the whole buffer, scatter the root's; float32 sum for the
 * reductions; root 0).
 *
 *   mpirun -np N compare_ops_mpi OP BYTES...   (OP: broadcast reduce
 *                                               allgather reduce_scatter
 *                                               alltoall gather scatter)
 *
 * Per size: 3 warm-up calls, iterations doubled until a run lasts 25 ms,
 * then 5 runs; prints "OP BYTES MEDIAN_US" on rank 0, where a run's time is
 * the slowest rank's mean time per call. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nranks;

static int call(const char* op, char* s, char* r, size_t bytes) {
  const int per = (int)(bytes / (size_t)nranks);
  if (!strcmp(op, "broadcast")) return MPI_Bcast(r, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (!strcmp(op, "reduce"))
    return MPI_Reduce(s, r, (int)(bytes / 4), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (!strcmp(op, "allgather"))
    return MPI_Allgather(s, per, MPI_BYTE, r, per, MPI_BYTE, MPI_COMM_WORLD);
  if (!strcmp(op, "reduce_scatter"))
    return MPI_Reduce_scatter_block(s, r, per / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (!strcmp(op, "alltoall"))
    return MPI_Alltoall(s, per, MPI_BYTE, r, per, MPI_BYTE, MPI_COMM_WORLD);
  if (!strcmp(op, "gather"))
    return MPI_Gather(s, per, MPI_BYTE, r, per, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (!strcmp(op, "scatter"))
    return MPI_Scatter(s, per, MPI_BYTE, r, per, MPI_BYTE, 0, MPI_COMM_WORLD);
  return -1;
}

static double run(const char* op, char* s, char* r, size_t bytes, long iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  for (long i = 0; i < iters; i++) call(op, s, r, bytes);
  t = (MPI_Wtime() - t) / (double)iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argc < 3) {
    if (rank == 0) fprintf(stderr, "usage: compare_ops_mpi OP BYTES...\n");
    MPI_Finalize();
    return 2;
  }
  const char* op = argv[1];
  for (int a = 2; a < argc; a++) {
    const size_t bytes = strtoull(argv[a], NULL, 0);
    char* s = malloc(bytes + 64);
    char* r = malloc(bytes + 64);
    memset(s, 1, bytes);
    memset(r, 0, bytes);
    if (call(op, s, r, bytes) != MPI_SUCCESS) {
      if (rank == 0) fprintf(stderr, "compare_ops_mpi: unknown op %s\n", op);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int i = 0; i < 2; i++) call(op, s, r, bytes);
    long iters = 1;
    while (run(op, s, r, bytes, iters) * (double)iters < 0.025 && iters < 100000) iters *= 2;
    double t[5];
    for (int k = 0; k < 5; k++) t[k] = run(op, s, r, bytes, iters);
    qsort(t, 5, sizeof t[0], by_value);
    if (rank == 0) printf("%s %zu %.3f\n", op, bytes, t[2] * 1e6);
    free(s);
    free(r);
  }
  MPI_Finalize();
  return 0;
}
