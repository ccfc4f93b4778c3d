/* pool.c: the CPU thread pool for element-wise and reduction work.
 *
 * Workers sleep on a condition variable between jobs, so they never spin
 * while OpenBLAS's own threads run a GEMM. A job splits [0, n) into
 * chunks that workers and the caller take from an atomic counter; the
 * caller returns once every chunk is done. */
#include "em-pool.h"
#include "em-error.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define MAX_THREADS 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t submit_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t workers[MAX_THREADS];
static int n_workers;      /* threads besides the caller */
static int n_threads = 1;  /* as set by em_set_num_threads */
static uint64_t generation;
static bool stopping;
static _Thread_local bool in_job; /* nested parallel_for runs inline */

static struct {
  em_range_fn fn;
  void *ctx;
  int64_t n, chunk, n_chunks;
  atomic_int_fast64_t next;
  atomic_int active; /* workers still inside the job */
} job;

static void run_chunks(void) {
  for (;;) {
    int64_t c = atomic_fetch_add(&job.next, 1);
    if (c >= job.n_chunks) break;
    int64_t b = c * job.chunk, e = b + job.chunk;
    if (e > job.n) e = job.n;
    job.fn(job.ctx, b, e);
  }
}

static void *worker_main(void *arg) {
  (void)arg;
  in_job = true;
  uint64_t seen = 0;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (generation == seen && !stopping) pthread_cond_wait(&wake, &mu);
    if (stopping) break;
    seen = generation;
    pthread_mutex_unlock(&mu);
    run_chunks();
    pthread_mutex_lock(&mu);
    if (atomic_fetch_sub(&job.active, 1) == 1) pthread_cond_signal(&done_cv);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

void em_pool_shutdown(void) {
  pthread_mutex_lock(&mu);
  stopping = true;
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < n_workers; i++) pthread_join(workers[i], NULL);
  n_workers = 0;
  stopping = false;
}

void em_set_num_threads(int n) {
  if (n < 1) n = 1;
  if (n > MAX_THREADS) n = MAX_THREADS;
  pthread_mutex_lock(&submit_mu);
  em_pool_shutdown();
  n_threads = n;
  for (int i = 0; i < n - 1; i++) {
    if (pthread_create(&workers[i], NULL, worker_main, NULL) != 0) break;
    n_workers++;
  }
  pthread_mutex_unlock(&submit_mu);
  openblas_set_num_threads(n);
}

int em_get_num_threads(void) { return n_threads; }

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
  pthread_mutex_lock(&mu);
  job.fn = fn;
  job.ctx = ctx;
  job.n = n;
  job.chunk = chunk;
  job.n_chunks = (n + chunk - 1) / chunk;
  atomic_store(&job.next, 0);
  atomic_store(&job.active, n_workers);
  generation++;
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mu);
  in_job = true;
  run_chunks();
  in_job = false;
  pthread_mutex_lock(&mu);
  while (atomic_load(&job.active) > 0) pthread_cond_wait(&done_cv, &mu);
  pthread_mutex_unlock(&mu);
  pthread_mutex_unlock(&submit_mu);
}

const char *em_blas_core(void) { return openblas_get_corename(); }
