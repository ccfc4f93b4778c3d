/* bench-timing.c: the clock and the median the C benchmarks share
 * (bench-timing.h). */
#include "bench-timing.h"

#include <stdlib.h>

clockid_t bench_clock_id = CLOCK_MONOTONIC;

double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(bench_clock_id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v /* (n) */, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
