/* The physical limit beside bench/allreduce_compare.sh's figures: one core's memcpy bandwidth between two
 * buffers of each size (warm, so a buffer that fits the cache is copied from the cache, as an all-reduce of
 * that size repeated in a loop is). Copies about 256 MiB per size, as the all-reduce peers reduce.
 * Prints one line per size: "BYTES GBPS" (GB/s = 1e9 B/s of bytes copied).
 * Usage: memcpy_bw BYTES... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  for (int s = 1; s < argc; ++s) {
    size_t bytes = strtoull(argv[s], NULL, 10);
    char* src = malloc(bytes);
    char* dst = malloc(bytes);
    if (bytes == 0 || src == NULL || dst == NULL) {
      fprintf(stderr, "memcpy_bw: cannot allocate two buffers of %s bytes\n", argv[s]);
      return 2;
    }
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    long iters = (long)((256ul << 20) / bytes);
    if (iters < 5) iters = 5;
    for (long i = 0; i < iters / 10 + 1; ++i) memcpy(dst, src, bytes);
    double start = now_s();
    for (long i = 0; i < iters; ++i) {
      memcpy(dst, src, bytes);
      __asm__ volatile("" : : "r"(dst) : "memory"); /* every copy happens */
    }
    double seconds = now_s() - start;
    printf("%zu %.3f\n", bytes, (double)bytes * (double)iters / seconds / 1e9);
    free(src);
    free(dst);
  }
  return 0;
}
