/* serve-batcher.c: micro-batching. Requests' rows wait in one FIFO queue;
 * a compute worker takes the oldest request and, until max_batch rows are
 * queued or the oldest has waited max_wait, lets more arrive; it then
 * takes whole requests in order (same model, total <= max_batch), runs
 * their rows in one forward and copies each request's rows back.
 *
 * A request with more rows than max_batch runs alone, in forwards of at
 * most max_batch rows. Requests taken on different models (a reload
 * between them) never share a batch: each finishes on the model it was
 * validated against. */
#include "serve-private.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-tensor.h"

/* Runs rows [0, rows) of in through model into out, in forwards of at
 * most max_batch rows. */
static em_status run_rows(serve_batcher *b, serve_model *m, int64_t rows, void *in, float *out,
                          em_error *err) {
  size_t in_row = (size_t)m->in_numel * em_dtype_size(m->in_dtype);
  for (int64_t r0 = 0; r0 < rows; r0 += b->max_batch) {
    int64_t n = rows - r0 < b->max_batch ? rows - r0 : b->max_batch;
    int64_t xs[EM_MAX_DIMS], ys[EM_MAX_DIMS];
    xs[0] = ys[0] = n;
    memcpy(xs + 1, m->in_shape, sizeof(int64_t) * (size_t)m->in_ndim);
    memcpy(ys + 1, m->out_shape, sizeof(int64_t) * (size_t)m->out_ndim);
    em_scope *sc = em_scope_begin();
    bool prev = em_no_grad_begin();
    em_tensor *x = em_tensor_wrap(m->in_dtype, 1 + m->in_ndim, xs, /* (N, ...) */
                                  (char *)in + (size_t)r0 * in_row);
    em_tensor *y = em_model_forward(m->cm.model, x, false, NULL, err); /* (N, K) */
    if (y) {
      em_tensor *dst = em_tensor_wrap(EM_DTYPE_F32, 1 + m->out_ndim, ys,
                                      out + (size_t)(r0 * m->out_numel));
      em_tensor_copy_(dst, y);
    }
    em_grad_mode_restore(prev);
    em_scope_end(sc);
    serve_metrics_batch(b->metrics, n);
    if (!y) return err->status ? err->status : EM_ERR_INVALID;
  }
  return EM_OK;
}

static void finish(serve_job *j, em_status st, const em_error *err) {
  j->status = st;
  if (st != EM_OK) snprintf(j->error, sizeof j->error, "%s", err->msg);
  else serve_drift_observe(j->model->drift, j->model, j->in, j->out, j->rows);
  j->done(j);
}

/* Runs the jobs of one batch (a list linked by next, all on one model). */
static void run_batch(serve_batcher *b, serve_job *first, int64_t rows) {
  serve_model *m = first->model;
  em_error err = {0};
  if (!first->next) { /* one request: its own buffers, no copies */
    em_status st = run_rows(b, m, first->rows, first->in, first->out, &err);
    finish(first, st, &err);
    return;
  }
  size_t in_row = (size_t)m->in_numel * em_dtype_size(m->in_dtype);
  size_t out_row = (size_t)m->out_numel * sizeof(float);
  char *in = malloc(in_row * (size_t)rows);   /* (rows, ...) */
  float *out = malloc(out_row * (size_t)rows); /* (rows, K) */
  em_status st = EM_OK;
  if (!in || !out) st = em_error_set(&err, EM_ERR_NOMEM, "out of memory batching %lld rows",
                                     (long long)rows);
  if (st == EM_OK) {
    size_t off = 0;
    for (serve_job *j = first; j; j = j->next) {
      memcpy(in + off * in_row, j->in, in_row * (size_t)j->rows);
      off += (size_t)j->rows;
    }
    st = run_rows(b, m, rows, in, out, &err);
  }
  size_t off = 0;
  for (serve_job *j = first, *next; j; j = next) {
    next = j->next; /* j belongs to its request once done */
    if (st == EM_OK) memcpy(j->out, (char *)out + off * out_row, out_row * (size_t)j->rows);
    off += (size_t)j->rows;
    finish(j, st, &err);
  }
  free(in);
  free(out);
}

static void deadline_ts(double deadline_mono, struct timespec *ts) {
  /* the condition variable runs on CLOCK_MONOTONIC (see start) */
  double s = floor(deadline_mono);
  ts->tv_sec = (time_t)s;
  ts->tv_nsec = (long)((deadline_mono - s) * 1e9);
  if (ts->tv_nsec >= 1000000000L) ts->tv_nsec = 999999999L;
}

static void *worker_main(void *arg) {
  serve_batcher *b = arg;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->head && !b->stopping) pthread_cond_wait(&b->cv, &b->mu);
    if (!b->head) break; /* stopping, nothing left */
    /* Let the batch fill: until max_batch rows wait or the oldest request
     * has waited max_wait (stopping: go at once). */
    double deadline = b->head->enqueued + b->max_wait_s;
    if (!b->stopping && b->queued_rows < b->max_batch && cli_mono_now() < deadline) {
      struct timespec ts;
      deadline_ts(deadline, &ts);
      int rc = pthread_cond_timedwait(&b->cv, &b->mu, &ts);
      if (rc != ETIMEDOUT) continue; /* woken: look again (another worker may have taken it) */
      if (!b->head) continue;
    }
    /* Take whole requests in order: same model, rows up to max_batch (the
     * first is always taken, however many rows it has). */
    serve_job *first = b->head, *last = first;
    int64_t rows = first->rows;
    while (!first->custom && last->next && !last->next->custom &&
           last->next->model == first->model && rows + last->next->rows <= b->max_batch) {
      last = last->next;
      rows += last->rows;
    }
    b->head = last->next;
    if (!b->head) b->tail = NULL;
    last->next = NULL;
    b->queued_rows -= rows;
    int n = 0;
    for (serve_job *j = first; j; j = j->next) n++;
    atomic_fetch_sub(&b->metrics->queue_jobs, n);
    atomic_fetch_sub(&b->metrics->queue_rows, (int)rows);
    if (b->head) pthread_cond_signal(&b->cv); /* more for another worker */
    pthread_mutex_unlock(&b->mu);
    if (first->custom) first->custom(first); /* a generation: alone */
    else run_batch(b, first, rows);
    pthread_mutex_lock(&b->mu);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

em_status serve_batcher_start(serve_batcher *b, int n_workers, int max_batch,
                              double max_wait_ms, serve_metrics *metrics, em_error *err) {
  memset(b, 0, sizeof *b);
  b->max_batch = max_batch < 1 ? 1 : max_batch;
  b->max_wait_s = max_wait_ms / 1000.0;
  b->metrics = metrics;
  serve_mutex_cond_init(&b->mu, &b->cv);
  b->threads = calloc((size_t)n_workers, sizeof *b->threads);
  if (!b->threads) return em_error_set(err, EM_ERR_NOMEM, "out of memory starting workers");
  for (int i = 0; i < n_workers; i++) {
    if (pthread_create(&b->threads[i], NULL, worker_main, b) != 0) {
      serve_batcher_stop(b);
      return em_error_set(err, EM_ERR_IO, "could not start compute worker %d of %d", i + 1,
                          n_workers);
    }
    b->n_workers++;
  }
  return EM_OK;
}

void serve_batcher_submit(serve_batcher *b, serve_job *job) {
  job->next = NULL;
  job->enqueued = cli_mono_now();
  pthread_mutex_lock(&b->mu);
  if (b->tail) b->tail->next = job;
  else b->head = job;
  b->tail = job;
  b->queued_rows += job->rows;
  atomic_fetch_add(&b->metrics->queue_jobs, 1);
  atomic_fetch_add(&b->metrics->queue_rows, (int)job->rows);
  /* one worker suffices for a new request; a waiting one re-checks */
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

void serve_batcher_stop(serve_batcher *b) {
  if (!b->threads) return;
  pthread_mutex_lock(&b->mu);
  b->stopping = true;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  for (int i = 0; i < b->n_workers; i++) pthread_join(b->threads[i], NULL);
  free(b->threads);
  b->threads = NULL;
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
}
