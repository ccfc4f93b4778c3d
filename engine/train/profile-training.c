/* profile-training.c: a profiled window of real training steps (see
 * em_profile_training in em-train.h), run by the trainer itself so that a
 * profile shows exactly what training does. */
#include "em-train.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "em-profile.h"

typedef struct {
  em_profile_training_options *o;
  int seen;        /* STEP events so far */
  double *t_ms;    /* time of each STEP event from the end of warm-up on */
} window;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static bool on_event(const em_train_event *ev, void *user) {
  window *w = user;
  em_profile_training_options *o = w->o;
  if (o->cancel && atomic_load(o->cancel)) return false;
  /* no warm-up: the window starts with the run (its first step's start) */
  if (ev->kind == EM_EVENT_START && o->warmup == 0) {
    em_memory_reset_peak();
    em_leak_reset();
    w->t_ms[0] = now_ms();
  }
  /* optimiser steps: with accumulation, the micro-batches between do not
   * count (they did, and a stop asked for after the window's last step
   * came only at the end of the accumulation: each micro-batch after it
   * wrote past the step times) */
  if (ev->kind != EM_EVENT_STEP || !ev->step_end) return true;
  w->seen++;
  o->last_loss = ev->loss;
  int i = w->seen - o->warmup; /* 0: the end of warm-up, the window's start */
  if (i == 0) { /* (with warm-up: i starts at 0; without, at 1, START set t_ms[0]) */
    em_memory_reset_peak();
    em_leak_reset();
  }
  if (i > o->steps) return false;
  if (i >= 0) w->t_ms[i] = now_ms();
  if (i == o->steps) em_memory_stats_get(&o->memory);
  return i < o->steps;
}

em_status em_profile_training(em_model *m, const em_train_config *c, const em_dataset *train,
                              em_profile_training_options *o, em_error *err) {
  if (o->warmup < 0) o->warmup = 0;
  if (o->steps <= 0) o->steps = 10;
  o->steps_done = 0;
  em_train_config cfg = *c;
  cfg.drop_last = true; /* every profiled step the same size */
  cfg.checkpoint_every = 0;
  cfg.checkpoint_dir[0] = '\0';
  cfg.eval_every = 0;
  cfg.on_divergence = EM_DIVERGENCE_STOP;
  /* enough epochs for the warm-up and the window */
  int64_t n = em_dataset_len(train);
  if (cfg.limit > 0 && cfg.limit < n) n = cfg.limit;
  int64_t per_epoch = cfg.batch_size > 0 ? n / cfg.batch_size : 0;
  if (per_epoch < 1)
    return em_error_set(err, EM_ERR_INVALID,
                        "the dataset has fewer samples than one batch of %d: lower the batch",
                        cfg.batch_size);
  int acc = cfg.accumulate > 1 ? cfg.accumulate : 1; /* batches per optimiser step */
  per_epoch = (per_epoch + acc - 1) / acc; /* an epoch's last step may hold fewer */
  cfg.epochs = (int)((o->warmup + o->steps) / per_epoch + 1);
  em_trainer *t = em_trainer_new(m, &cfg, train, NULL, err);
  if (!t) return err && err->status != EM_OK ? err->status : EM_ERR_INVALID;
  em_train_diagnostics d;
  em_train_diagnostics_defaults(&d);
  d.profile = true;
  d.start_batch = (int64_t)o->warmup * acc; /* the profiler counts batches */
  d.batches = (int64_t)o->steps * acc;
  d.detect_anomaly = o->detect_anomaly;
  d.leak_every = 0;
  em_trainer_set_diagnostics(t, &d);
  window w = {.o = o, .t_ms = calloc((size_t)o->steps + 1, sizeof(double))};
  if (!w.t_ms) {
    em_trainer_free(t);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory profiling");
  }
  em_status st = em_trainer_run(t, on_event, &w, err);
  em_trainer_free(t);
  int done = w.seen - o->warmup;
  if (done > o->steps) done = o->steps;
  o->steps_done = done > 0 ? done : 0;
  if (st == EM_OK && o->steps_done > 0) {
    double *dt = malloc(sizeof(double) * (size_t)o->steps_done);
    if (dt) {
      for (int i = 0; i < o->steps_done; i++) dt[i] = w.t_ms[i + 1] - w.t_ms[i];
      o->step_ms_mean = (w.t_ms[o->steps_done] - w.t_ms[0]) / o->steps_done;
      qsort(dt, (size_t)o->steps_done, sizeof *dt, cmp_double);
      int h = o->steps_done / 2; /* an even count: the mean of the middle two */
      o->step_ms_median = o->steps_done % 2 ? dt[h] : 0.5 * (dt[h - 1] + dt[h]);
      free(dt);
    }
    if (o->steps_done < o->steps) em_memory_stats_get(&o->memory);
  }
  free(w.t_ms);
  return st;
}
