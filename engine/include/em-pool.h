/* em-pool.h: the CPU thread pool for non-GEMM work, and the thread count
 * shared with OpenBLAS.
 *
 * OpenBLAS and the pool never run at once: the calling thread either is
 * inside a BLAS call (OpenBLAS's threads work) or hands a parallel_for to
 * the pool (whose workers sleep on a condition variable between jobs, so
 * they never spin against OpenBLAS). em_set_num_threads sets both. */
#pragma once

#include <stdint.h>

/* Sets the pool's and OpenBLAS's thread count (n >= 1). */
void em_set_num_threads(int n);
int em_get_num_threads(void);

/* fn(ctx, begin, end) over [0, n) split in chunks of at least grain;
 * runs inline when n < 2 * grain or there is one thread. */
typedef void (*em_range_fn)(void *ctx, int64_t begin, int64_t end);
void em_parallel_for(int64_t n, int64_t grain, em_range_fn fn, void *ctx);
void em_pool_shutdown(void);

/* The OpenBLAS kernel family in use ("Haswell", "Cooperlake", ...). */
const char *em_blas_core(void);
