/* MPI_Allreduce (float32 sum) timing for bench/allreduce_compare.sh, measured like `chaosbed bench allreduce`:
 * per size, warm-up iterations, then timed iterations; time = the largest per-iteration mean over the ranks.
 * Prints one line per size on rank 0: "BYTES TIME_US".
 * Usage: mpirun -np N mpi_allreduce [BYTES...]   (default: 1 MiB and 16 MiB) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t default_sizes[] = {1u << 20, 16u << 20};
  int nsizes = argc > 1 ? argc - 1 : 2;
  for (int s = 0; s < nsizes; ++s) {
    size_t bytes = argc > 1 ? strtoull(argv[s + 1], NULL, 10) : default_sizes[s];
    int count = (int)(bytes / sizeof(float));
    float* buf = calloc((size_t)count, sizeof(float));
    if (buf == NULL) {
      fprintf(stderr, "mpi_allreduce: cannot allocate %zu bytes\n", bytes);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* About 256 MiB reduced per size, 5..1000 iterations, as chaosbed does. */
    long iters = (long)((256ul << 20) / bytes);
    if (iters < 5) iters = 5;
    if (iters > 1000) iters = 1000;
    long warmup = iters / 10 < 2 ? 2 : iters / 10;
    for (long i = 0; i < warmup; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (long i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mean_us = (MPI_Wtime() - start) / (double)iters * 1e6, max_us = 0;
    MPI_Reduce(&mean_us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%zu %.3f\n", bytes, max_us);
    fflush(stdout);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
