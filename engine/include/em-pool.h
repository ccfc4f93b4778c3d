/* em-pool.h: the CPU thread pool for non-GEMM work, and the thread count
 * shared with OpenBLAS.
 *
 * OpenBLAS and the pool never run at once: the calling thread either is
 * inside a BLAS call (OpenBLAS's threads work) or hands a parallel_for to
 * the pool. The pool's workers watch for the next job for a fraction of a
 * millisecond after each one, then sleep on a condition variable;
 * em_pool_park() sends them to sleep at once, and a BLAS call makes it
 * first so that they never spin against OpenBLAS's threads.
 * em_set_num_threads sets both. */
#pragma once

#include <stdint.h>

/* Sets the pool's and OpenBLAS's thread count (n >= 1). */
void em_set_num_threads(int n);
int em_get_num_threads(void);

/* fn(ctx, begin, end) over [0, n) split in chunks of at least grain;
 * runs inline when n < 2 * grain or there is one thread. */
typedef void (*em_range_fn)(void *ctx, int64_t begin, int64_t end);
void em_parallel_for(int64_t n, int64_t grain, em_range_fn fn, void *ctx);
/* fn(ctx, t, t + 1) once on each of the pool's threads t in
 * [0, em_parallel_threads()), the caller being thread 0 and each worker
 * always the same t, so that work split by t stays with one core (and its
 * cache) from call to call. A thread may start late: fn should let the
 * others take its share once they are done with theirs. Runs fn(ctx, 0, 1)
 * alone inside another job or with one thread. */
void em_parallel_each(em_range_fn fn, void *ctx);
/* How many threads em_parallel_each runs here: 1 inside a job. */
int em_parallel_threads(void);
/* fn(ctx, s, s + 1) once for each share s in [0, em_parallel_threads()),
 * returning that count: thread t does share t first (so the work split by
 * share stays with one core from call to call), then any share still
 * untaken (a thread that starts late has its share done by another).
 * With one thread, or inside a job, the caller does share 0 alone. */
int em_parallel_shares(em_range_fn fn, void *ctx);
void em_pool_shutdown(void);
/* Idle workers stop watching for jobs and sleep until the next one. */
void em_pool_park(void);

/* The OpenBLAS kernel family in use ("Haswell", "Cooperlake", ...). */
const char *em_blas_core(void);
