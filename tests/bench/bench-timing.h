/* bench-timing.h: the clock and the median the C benchmarks share
 * (bench-conv, bench-gemm, bench-profile, bench-quant, bench-serve). */
#pragma once

#include <time.h>

/* The clock bench_now_s reads: CLOCK_MONOTONIC (wall time) unless a
 * benchmark sets CLOCK_THREAD_CPUTIME_ID (the calling thread's CPU time,
 * which on a machine shared with other jobs measures the work itself). */
extern clockid_t bench_clock_id;

/* Seconds on bench_clock_id, from an arbitrary start. */
double bench_now_s(void);

/* qsort's comparison for doubles, ascending. */
int bench_cmp_double(const void *a, const void *b);

/* The median of v (n > 0; sorts v): the mean of the middle two when n is
 * even. */
double bench_median(double *v /* (n) */, int n);
