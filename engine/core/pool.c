/* pool.c: the CPU thread pool for element-wise, reduction and GEMM work.
 *
 * A job splits [0, n) into chunks that workers and the caller take from
 * an atomic counter; the caller returns once every worker has left it.
 *
 * Waking a sleeping thread costs 15-25 us on these machines (a futex
 * wake, and an interrupt to a halted virtual CPU), as much as a whole
 * Linear layer's GEMM at batch 128. So a worker that finishes a job
 * watches for the next one for a short while (SPIN_NS) before it sleeps
 * on the condition variable, and the caller watches for its workers to
 * finish before it sleeps; back-to-back jobs of a training step then
 * pass from thread to thread in well under a microsecond. The spin is
 * bounded, and em_pool_park() ends it at once before an OpenBLAS call,
 * whose own threads need the cores.
 *
 * A spinning thread yields its core every few microseconds (SPIN_CHECK
 * pauses): when more threads want the cores than there are (another
 * program, OpenBLAS's threads spinning after a call of their own, two
 * pool threads on one core), the thread it is waiting for runs in that
 * core instead of waiting for the spin to end. On a 2-core machine with
 * a third busy thread, a 128 x 128 x 256 GEMM on 2 threads took 430 us
 * without the yield and 68-105 us with it, and two fmnist-mlp trainings
 * at once got 0.52 of what one alone gets, against 1.20 with it
 * (tests/bench/bench_shared.py); with the cores free the yield is a
 * system call that returns at once (training steps the same, 0.98-1.02
 * over alternating blocks of steps). */
#include "em-pool.h"
#include "em-error.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sched.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define MAX_THREADS 64
#define SPIN_NS 200000 /* how long an idle worker watches for the next job */
#define SPIN_CHECK 63  /* pauses (mask) between looks at the clock and yields */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t submit_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t workers[MAX_THREADS];
static int n_workers;     /* threads besides the caller */
static int n_threads = 1; /* as set by em_set_num_threads */
/* Written under mu; read without it by spinning workers (acquire: the
 * job's fields were written before the release that bumps it). */
static atomic_uint_fast64_t generation;
static atomic_bool parked; /* em_pool_park: spinning workers sleep now */
static int sleepers;       /* workers waiting on wake (under mu) */
static bool caller_asleep; /* the caller waits on done_cv (under mu) */
static atomic_bool stopping;
static _Thread_local bool in_job; /* nested parallel_for runs inline */

static struct {
  em_range_fn fn;
  void *ctx;
  bool each; /* em_parallel_each: thread t runs fn(ctx, t, t + 1) */
  int64_t n, chunk, n_chunks;
  atomic_int_fast64_t next;
  atomic_int active; /* workers still inside the job */
} job;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void run_chunks(void) {
  for (;;) {
    int64_t c = atomic_fetch_add(&job.next, 1);
    if (c >= job.n_chunks) break;
    int64_t b = c * job.chunk, e = b + job.chunk;
    if (e > job.n) e = job.n;
    job.fn(job.ctx, b, e);
  }
}

/* One turn of a spin that started i turns ago: a pause, and every
 * SPIN_CHECK turns a look at the clock (false once until has passed) and
 * a yield of the core. */
static bool spin_turn(int i, int64_t until) {
  cpu_relax();
  if ((i & SPIN_CHECK) != 0) return true;
  if (now_ns() > until) return false;
  sched_yield();
  return true;
}

/* Spins until the generation moves past seen, SPIN_NS pass or the pool
 * is parked; true when a new job (or a stop) came. */
static bool spin_for_job(uint64_t seen) {
  int64_t until = now_ns() + SPIN_NS;
  for (int i = 1;; i++) {
    if (atomic_load_explicit(&generation, memory_order_acquire) != seen) return true;
    if (atomic_load_explicit(&parked, memory_order_relaxed) || !spin_turn(i, until)) return false;
  }
}

static void *worker_main(void *arg) {
  const int64_t index = (int64_t)(intptr_t)arg; /* the caller is thread 0 */
  in_job = true;
  uint64_t seen = 0;
  for (;;) {
    if (!spin_for_job(seen)) {
      pthread_mutex_lock(&mu);
      sleepers++;
      while (atomic_load(&generation) == seen && !stopping) pthread_cond_wait(&wake, &mu);
      sleepers--;
      pthread_mutex_unlock(&mu);
    }
    if (stopping) break;
    seen = atomic_load_explicit(&generation, memory_order_acquire);
    if (job.each) job.fn(job.ctx, index, index + 1);
    else run_chunks();
    if (atomic_fetch_sub_explicit(&job.active, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&mu);
      if (caller_asleep) pthread_cond_signal(&done_cv);
      pthread_mutex_unlock(&mu);
    }
  }
  return NULL;
}

void em_pool_shutdown(void) {
  pthread_mutex_lock(&mu);
  stopping = true;
  atomic_fetch_add(&generation, 1);
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < n_workers; i++) pthread_join(workers[i], NULL);
  n_workers = 0;
  stopping = false;
  atomic_store(&generation, 0);
}

void em_set_num_threads(int n) {
  if (n < 1) n = 1;
  if (n > MAX_THREADS) n = MAX_THREADS;
  pthread_mutex_lock(&submit_mu);
  em_pool_shutdown();
  n_threads = n;
  for (int i = 0; i < n - 1; i++) {
    if (pthread_create(&workers[i], NULL, worker_main, (void *)(intptr_t)(i + 1)) != 0) break;
    n_workers++;
  }
  pthread_mutex_unlock(&submit_mu);
  openblas_set_num_threads(n);
}

int em_get_num_threads(void) { return n_threads; }

void em_pool_park(void) { atomic_store_explicit(&parked, true, memory_order_relaxed); }

/* Hands the job in `job` to the workers, runs the caller's part, and
 * waits for the workers: first watching, then asleep. */
static void run_job(void) {
  atomic_store(&job.next, 0);
  atomic_store(&job.active, n_workers);
  atomic_store_explicit(&parked, false, memory_order_relaxed);
  pthread_mutex_lock(&mu);
  atomic_fetch_add_explicit(&generation, 1, memory_order_release);
  if (sleepers > 0) pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mu);
  in_job = true;
  if (job.each) job.fn(job.ctx, 0, 1);
  else run_chunks();
  in_job = false;
  int64_t until = now_ns() + SPIN_NS;
  for (int i = 1; atomic_load_explicit(&job.active, memory_order_acquire) > 0; i++) {
    if (spin_turn(i, until)) continue;
    pthread_mutex_lock(&mu);
    caller_asleep = true;
    while (atomic_load(&job.active) > 0) pthread_cond_wait(&done_cv, &mu);
    caller_asleep = false;
    pthread_mutex_unlock(&mu);
    break;
  }
}

void em_parallel_for(int64_t n, int64_t grain, em_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n_workers == 0 || n < 2 * grain || in_job) {
    fn(ctx, 0, n);
    return;
  }
  pthread_mutex_lock(&submit_mu); /* one job at a time; nested calls run inline */
  int parts = n_workers + 1;
  int64_t chunk = (n + parts - 1) / parts;
  if (chunk < grain) chunk = grain;
  job.fn = fn;
  job.ctx = ctx;
  job.each = false;
  job.n = n;
  job.chunk = chunk;
  job.n_chunks = (n + chunk - 1) / chunk;
  run_job();
  pthread_mutex_unlock(&submit_mu);
}

int em_parallel_threads(void) { return in_job ? 1 : n_workers + 1; }

void em_parallel_each(em_range_fn fn, void *ctx) {
  if (n_workers == 0 || in_job) {
    fn(ctx, 0, 1);
    return;
  }
  pthread_mutex_lock(&submit_mu);
  job.fn = fn;
  job.ctx = ctx;
  job.each = true;
  run_job();
  pthread_mutex_unlock(&submit_mu);
}

typedef struct {
  em_range_fn fn;
  void *ctx;
  int n;
  atomic_bool taken[MAX_THREADS];
} shares_job;

static void run_shares(void *ctx, int64_t t, int64_t end) {
  shares_job *j = ctx;
  (void)end;
  for (int d = 0; d < j->n; d++) {
    int s = (int)((t + d) % j->n);
    if (!atomic_exchange(&j->taken[s], true)) j->fn(j->ctx, s, s + 1);
  }
}

int em_parallel_shares(em_range_fn fn, void *ctx) {
  shares_job j = {.fn = fn, .ctx = ctx, .n = em_parallel_threads()};
  if (j.n == 1) {
    fn(ctx, 0, 1);
    return 1;
  }
  for (int s = 0; s < j.n; s++) atomic_init(&j.taken[s], false);
  em_parallel_each(run_shares, &j);
  return j.n;
}

const char *em_blas_core(void) { return openblas_get_corename(); }
