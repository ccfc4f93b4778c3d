/* trainer.c: the training loop. One micro-batch: forward (records the
 * tape), loss, backward; every `accumulate` micro-batches an optimiser
 * step: global gradient norm (and clip), the divergence watchdog, lr from
 * the schedule, step. All temporaries live in one scope released at the
 * end of the micro-batch, so the steady state does no malloc.
 *
 * The loop runs from the trainer's position (t->pos: epoch, batches done
 * in it, optimiser steps), which a checkpoint restores; a load while the
 * loop runs (a divergence rollback, or the callback) sets t->jumped and
 * the loop starts again from the new position. Checkpoints are written
 * only between optimiser steps; a stop request is honoured at the next
 * one.
 *
 * On a device (cfg.device): the trainer moves the model there, each batch
 * is copied there, and only the loss (and, at evaluation, the
 * predictions) come back. Out of device
 * memory: after each micro-batch and optimiser step the trainer collects
 * the device error (em_device_error_take); the step is dropped and the
 * run stops with the allocator's message, or, with auto_batch, the batch
 * size halves (the loader restarts at the same sample) and the run goes
 * on. */
#include "train-private.h"

#include "em-device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-ops.h"
#include "em-pool.h"
#include "em-profile.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

em_loader *em_trainer_loader_new(const em_trainer *t, const em_comm *comm, int batch_size,
                                 em_error *err) {
  const em_train_config *c = &t->cfg;
  em_loader_config lc;
  em_loader_config_defaults(&lc);
  lc.batch_size = batch_size;
  lc.shuffle = c->shuffle;
  lc.drop_last = c->drop_last;
  lc.workers = c->workers;
  lc.seed = c->seed;
  lc.limit = c->limit;
  lc.pinned = c->device.kind == EM_DEVICE_CUDA; /* asynchronous copies to the GPU */
  if (comm) {
    lc.rank = em_comm_rank(comm);
    lc.world = em_comm_world(comm);
  }
  return em_loader_new(t->train, &lc, err);
}

em_trainer *em_trainer_new(em_model *m, const em_train_config *c, const em_dataset *train,
                           const em_dataset *test, em_error *err) {
  if (em_train_config_validate(c, err) != EM_OK) return NULL;
  if (test && em_dataset_len(test) == 0) { /* found before a whole epoch is trained, not after */
    em_error_set(err, EM_ERR_INVALID, "the test split of the %s dataset is empty: evaluation "
                 "needs samples", em_dataset_kind(test));
    return NULL;
  }
  if (em_train_check_fit(em_model_spec(m), train, "training", c->loss, err) != EM_OK ||
      (test && em_train_check_fit(em_model_spec(m), test, "test", c->loss, err) != EM_OK))
    return NULL;
  /* a device run: the model moves there (the caller ran the pre-flight
   * estimate, em_train_preflight, if it wanted one) */
  if (em_model_to_device(m, c->device, err) != EM_OK) return NULL;
  em_trainer *t = calloc(1, sizeof *t);
  if (!t) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory creating the trainer");
    return NULL;
  }
  t->model = m;
  t->cfg = *c;
  c = &t->cfg;
  t->train = train;
  t->test = test;
  t->sample_ndim = em_dataset_sample_shape(train, t->sample_shape);
  t->loader = em_trainer_loader_new(t, NULL, c->batch_size, err);
  if (!t->loader) goto fail;
  t->n_params = em_model_param_count(m);
  t->params = calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *t->params);
  t->grads = calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *t->grads);
  const char **names = calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *names);
  if (!t->params || !t->grads || !names) {
    free(names);
    em_error_set(err, EM_ERR_NOMEM, "out of memory creating the trainer");
    goto fail;
  }
  for (int i = 0; i < t->n_params; i++) t->params[i] = em_model_param(m, i, &names[i]);
  t->opt = em_optimizer_new(&c->optim, t->n_params, t->params, names, err);
  free(names);
  if (!t->opt) goto fail;
  /* One-cycle momentum switches SGD's momentum buffers on at the first
   * step; switch them on now, so that the optimiser's state (what a
   * checkpoint holds) is the same before and after that step. */
  if (c->schedule.kind == EM_SCHED_ONECYCLE && c->schedule.cycle_momentum)
    em_optimizer_set_momentum(t->opt, em_schedule_momentum(&c->schedule, 0,
                                                           em_optimizer_get_momentum(t->opt)));
  em_rng base;
  em_rng_seed(&base, c->seed ^ 0x5DEECE66Dull);
  t->rng = em_rng_split(&base);
  atomic_init(&t->stop, false);
  atomic_init(&t->stop_requests, 0);
  t->lr_scale = 1.0;
  em_train_diagnostics_defaults(&t->diag);
  em_watchdog_init(&t->watch, c->divergence_spike_factor);
  em_grad_scaler_init(&t->scaler, c->amp_scaler);
  if (c->amp_scaler) t->scaler.scale = (float)c->amp_init_scale;
  return t;
fail:
  em_trainer_free(t);
  return NULL;
}

void em_trainer_free(em_trainer *t) {
  if (!t) return;
  if (t->comm) em_comm_set_cancel(t->comm, NULL);
  em_ddp_free(t->ddp);
  em_loader_free(t->loader);
  em_optimizer_free(t->opt);
  free(t->params);
  free(t->grads);
  free(t->last_ckpt_meta);
  free(t);
}

void em_trainer_request_stop(em_trainer *t) {
  atomic_store(&t->stop, true);
  atomic_fetch_add(&t->stop_requests, 1);
}

void em_trainer_set_lr_scale(em_trainer *t, double scale) {
  if (scale > 0 && isfinite(scale)) t->lr_scale = scale;
}

double em_trainer_lr_scale(const em_trainer *t) { return t->lr_scale; }

void em_trainer_set_clip_grad_norm(em_trainer *t, double max_norm) {
  if (max_norm >= 0 && isfinite(max_norm)) t->cfg.clip_grad_norm = max_norm;
}

void em_trainer_summary(const em_trainer *t, em_train_summary *out) { *out = t->summary; }

int em_trainer_batch_size(const em_trainer *t) { return t->cfg.batch_size; }

em_tensor *em_train_loss(em_loss_kind kind, em_tensor *out, em_tensor *y, double label_smoothing) {
  if (out->ndim == 3 && y->ndim == 2) {
    /* a label per position: the mean over every position of every
     * sample, PyTorch's F.cross_entropy(out.view(-1, V), y.view(-1)) */
    EM_ASSERT(kind == EM_LOSS_CROSS_ENTROPY); /* em_train_check_fit refuses MSE */
    int64_t rows[2] = {out->shape[0] * out->shape[1], out->shape[2]}, n = rows[0];
    return em_cross_entropy(em_reshape(out, 2, rows), em_reshape(y, 1, &n), label_smoothing);
  }
  if (kind == EM_LOSS_CROSS_ENTROPY)
    return em_cross_entropy(out, y, label_smoothing); /* host labels: checked there */
  /* MSE against one-hot targets of the (host) labels, made on the host
   * and copied to out's device. */
  em_tensor *target = em_zeros(out->dtype, out->ndim, out->shape);
  int64_t n = out->shape[0], k = out->shape[1];
  for (int64_t i = 0; i < n; i++) {
    int64_t c = em_i64(y)[i];
    if (c >= 0 && c < k) {
      if (out->dtype == EM_DTYPE_F32) em_f32(target)[i * k + c] = 1.0f;
      else em_f64(target)[i * k + c] = 1.0;
    }
  }
  return em_mse_loss(out, em_to_device(target, out->device));
}

/* ---- one run ------------------------------------------------------------- */

/* What stays fixed during a run, and the event being filled. */
typedef struct {
  em_trainer *t;
  em_train_callback cb;
  void *user;
  int64_t bpe;   /* batches per epoch */
  int acc;       /* micro-batches per optimiser step */
  em_schedule sched;
  bool cycle_momentum;
  double t_start, train_time;
  double held_s;   /* time the event callback held the loop: a GUI's pause
                      blocks in it; not training time (samples/s, ETA) */
  int64_t samples;
  bool fresh_eval; /* the last evaluation is of the current weights */
  em_train_event ev;
  em_diag_state diag;
  bool sched_total_auto;  /* the schedule's total steps come from the batches */
  double acc_loss;        /* losses of the accumulation in progress */
  int64_t acc_samples;    /* and its samples */
} run_ctx;

/* Sends ev; a callback that returns false asks for a stop. */
static void emit(run_ctx *r, em_event_kind kind) {
  r->ev.kind = kind;
  r->ev.lr_scale = r->t->lr_scale;
  double t0 = now_s();
  if (r->cb && !r->cb(&r->ev, r->user)) em_trainer_request_stop(r->t);
  r->held_s += now_s() - t0;
  r->ev.path = r->ev.checkpoint_kind = r->ev.message = NULL;
}

/* The profiled window ended: its trace is written; table is consumed. */
static void emit_profile(run_ctx *r, char *table) {
  r->ev.path = r->t->diag.trace_path;
  r->ev.message = table;
  emit(r, EM_EVENT_PROFILE);
  free(table);
}

/* Writes a checkpoint of `kind` into the folder and reports it. */
static em_status write_checkpoint(run_ctx *r, const char *kind, em_error *err) {
  em_trainer *t = r->t;
  EM_TRY(em_checkpoint_path(t->ckpt_path, sizeof t->ckpt_path, t->ckpt_dir, kind, t->pos.epoch,
                            t->pos.step, err));
  /* data-parallel: rank 0 writes while the others wait in the next
   * collective; told it is busy, they wait for it without the timeout */
  if (t->comm) em_comm_say_busy(t->comm, true);
  em_status st = em_trainer_save_checkpoint(t, t->ckpt_path, err);
  if (t->comm) em_comm_say_busy(t->comm, false);
  EM_TRY(st);
  /* the epoch of the last batch trained (pos moves on after an epoch) */
  r->ev.epoch = t->pos.batch == 0 && t->pos.epoch > 0 ? t->pos.epoch - 1 : t->pos.epoch;
  r->ev.step = t->pos.step;
  r->ev.path = t->ckpt_path;
  r->ev.checkpoint_kind = kind;
  /* The checkpoint's metrics: those of an evaluation of these weights, or
   * NAN. Other events keep showing the last evaluation. */
  double tl = r->ev.test_loss, ta = r->ev.test_accuracy;
  bool metrics = strcmp(kind, "step") != 0 && r->fresh_eval;
  r->ev.test_loss = metrics ? t->summary.test_loss : NAN;
  r->ev.test_accuracy = metrics ? t->summary.test_accuracy : NAN;
  emit(r, EM_EVENT_CHECKPOINT);
  r->ev.test_loss = tl;
  r->ev.test_accuracy = ta;
  return EM_OK;
}

/* The watchdog fired: the policy (watchdog.c) rolls back or stops; the
 * DIVERGENCE event says which. */
static em_status diverged(run_ctx *r, em_watch_verdict v, double value, em_error *err) {
  char msg[1024];
  int64_t at = r->t->pos.step + 1; /* the step being made */
  em_status st = em_trainer_diverged(r->t, v, value, msg, sizeof msg, err);
  if (st == EM_OK) r->fresh_eval = false;
  r->ev.step = at;
  r->ev.message = msg;
  emit(r, EM_EVENT_DIVERGENCE);
  return st;
}

/* Forward, loss and backward of one micro-batch. A non-finite loss comes
 * back in *loss without a backward. Out of device memory: EM_ERR_NOMEM
 * with the allocator's message in *oom (the step's scope is released). */
static em_status micro_batch(run_ctx *r, const em_batch *b, double *loss, em_error *oom,
                             em_error *err) {
  em_trainer *t = r->t;
  em_scope *s = em_scope_begin();
  em_tensor *x = em_train_batch_x(t->train, b); /* f32 samples, or i64 tokens */
  em_tensor *y = em_train_batch_y(t->train, b); /* (N) or (N, T): stays on the host */
  x = em_to_device(x, t->cfg.device); /* x itself on the CPU */
  /* autocast covers forward and loss; backward accumulates f32 grads */
  em_amp_mode amp_prev = em_autocast_begin(t->cfg.amp);
  em_tensor *out = em_model_forward(t->model, x, true, &t->rng, err);
  if (!out) {
    em_autocast_restore(amp_prev);
    em_scope_end(s);
    if (em_device_error_pending()) return em_device_error_take(oom);
    em_status st = err ? err->status : EM_ERR_INVALID;
    return st == EM_OK ? EM_ERR_INVALID : st;
  }
  em_tensor *l = em_train_loss(t->cfg.loss, out, y, t->cfg.label_smoothing);
  em_autocast_restore(amp_prev);
  if (em_device_error_pending()) { /* out of device memory: drop the micro-batch */
    em_scope_end(s);
    return em_device_error_take(oom);
  }
  *loss = em_tensor_item(l);
  em_status st = t->diag.detect_anomaly ? em_anomaly_check(err) : EM_OK;
  if (st == EM_OK) st = em_trainer_ddp_mean_loss(t, loss, err); /* data-parallel */
  if (st == EM_OK && isfinite(*loss)) {
    if (r->acc > 1) l = em_mul_scalar(l, 1.0 / r->acc);
    if (t->scaler.enabled) l = em_mul_scalar(l, em_grad_scaler_loss_scale(&t->scaler));
    /* data-parallel: the step's last micro-batch reduces the gradients */
    bool reduce = t->ddp && (t->micro + 1 == r->acc || t->pos.batch + 1 == r->bpe);
    if (reduce) em_ddp_backward_begin(t->ddp);
    em_backward(l);
    if (reduce) em_ddp_backward_end(t->ddp);
    if (t->diag.detect_anomaly) st = em_anomaly_check(err);
  }
  em_scope_end(s);
  if (em_device_error_pending()) return em_device_error_take(oom);
  return st;
}

/* The current gradients of t's parameters (NULL for a stale or absent
 * one), in a list the trainer keeps. */
static em_tensor **current_grads(em_trainer *t) {
  for (int i = 0; i < t->n_params; i++) t->grads[i] = em_tensor_current_grad(t->params[i]);
  return t->grads;
}

/* With the loss scaler: unscales the gradients; on an Inf/NaN among them
 * drops them, backs the scale off and returns true (the step is skipped,
 * as GradScaler.step does). */
static bool scaler_skips(em_trainer *t) {
  if (!t->scaler.enabled) return false;
  em_tensor **grads = current_grads(t); /* the grads this step wrote, or NULL */
  bool found_inf = em_grad_scaler_unscale(&t->scaler, t->n_params, grads);
  if (!found_inf) return false;
  em_grad_scaler_update(&t->scaler, true);
  em_optimizer_zero_grad(t->opt);
  t->micro = 0;
  return true;
}

/* The optimiser step closing an accumulation: the global gradient norm
 * (clipping when asked), the watchdog, then lr and step. *v reports a
 * divergence, in which case nothing was updated; so does *skipped, for a
 * step the loss scaler dropped. */
static void optimizer_step(run_ctx *r, em_watch_verdict *v, double *norm, bool *skipped) {
  em_trainer *t = r->t;
  *v = EM_WATCH_OK;
  *norm = 0;
  if ((*skipped = scaler_skips(t))) return;
  double clip = t->cfg.clip_grad_norm;
  *norm = em_clip_grad_norm(t->n_params, t->params, clip > 0 ? clip : INFINITY);
  if (em_device_error_pending()) { /* the norm is not known: the caller takes the error */
    *skipped = true;
    return;
  }
  *v = em_watchdog_check_norm(&t->watch, *norm);
  if (*v != EM_WATCH_OK) return;
  int64_t step = em_optimizer_steps(t->opt);
  double lr = em_schedule_lr(&r->sched, step) * t->lr_scale;
  em_optimizer_set_lr(t->opt, lr);
  if (r->cycle_momentum)
    em_optimizer_set_momentum(t->opt, em_schedule_momentum(&r->sched, step, 0));
  em_optimizer_step(t->opt);
  em_grad_scaler_update(&t->scaler, false);
  em_optimizer_zero_grad(t->opt);
  t->pos.step = em_optimizer_steps(t->opt);
  t->micro = 0;
  r->fresh_eval = false;
  r->ev.lr = lr;
}

/* The schedule's total steps and the events' figures for the batches per
 * epoch r->bpe (after the batch size changed). */
static void set_batches_per_epoch(run_ctx *r, int64_t bpe) {
  const em_trainer *t = r->t;
  r->bpe = bpe;
  int64_t steps_per_epoch = (bpe + r->acc - 1) / r->acc;
  int64_t total = t->pos.step + steps_per_epoch * (t->cfg.epochs - t->pos.epoch) -
                  t->pos.batch / r->acc;
  if (total < t->pos.step + 1) total = t->pos.step + 1;
  if (r->sched_total_auto) r->sched.total_steps = total;
  r->ev.batches_per_epoch = bpe;
  r->ev.total_steps = total;
}

/* Out of device memory (oom: the allocator's message) in the step being
 * made at pos, or in the evaluation (`where`). Without auto_batch, or at
 * batch 1: the run's error. With it: the batch size halves, the loader
 * restarts at the same sample (the epoch's batches done so far count in
 * the new size), a WARNING says so and the loop jumps there. The caller
 * has undone the accumulation in progress. */
static em_status out_of_memory(run_ctx *r, const char *where, const em_error *oom,
                               em_error *err) {
  em_trainer *t = r->t;
  int b = t->cfg.batch_size;
  /* data-parallel: the ranks' batches must stay equal, so no halving */
  if (!t->cfg.auto_batch || b <= 1 || t->comm)
    return em_error_set(err, EM_ERR_NOMEM, "%s (batch size %d): %s; %s", where, b, oom->msg,
                        t->comm ? "data-parallel runs keep their batch size: lower --batch"
                        : t->cfg.auto_batch ? "the batch size is already 1"
                                            : "lower --batch, or pass --auto-batch to halve it "
                                              "and go on");
  int nb = b / 2;
  em_loader *ld = em_trainer_loader_new(t, NULL, nb, err);
  if (!ld) return err && err->status != EM_OK ? err->status : EM_ERR_NOMEM;
  em_loader_free(t->loader);
  t->loader = ld;
  int64_t bpe = em_loader_batches_per_epoch(ld);
  int64_t done = t->pos.batch * b / nb; /* the epoch's batches so far, in the new size */
  if (done > bpe) done = bpe;
  if (t->pos.batch > 0) t->pos.loss_sum *= (double)done / (double)t->pos.batch; /* same mean */
  t->pos.batch = done;
  t->cfg.batch_size = nb;
  set_batches_per_epoch(r, bpe);
  em_device_release_cached(t->cfg.device);
  char msg[1400];
  snprintf(msg, sizeof msg, "out of device memory in %s at batch size %d: going on at batch "
           "size %d (--auto-batch): %s", where, b, nb, oom->msg);
  r->ev.message = msg;
  r->ev.batch_size = nb;
  emit(r, EM_EVENT_WARNING);
  t->jumped = true;
  return EM_OK;
}

/* Out of device memory (oom) in the step being made (what: "step", "the
 * optimizer step"), its accumulation n_micro micro-batches in: the
 * accumulation is undone (its batches are redone) and out_of_memory
 * decides. */
static em_status step_out_of_memory(run_ctx *r, const char *what, int n_micro,
                                    const em_error *oom, em_error *err) {
  em_trainer *t = r->t;
  t->pos.batch -= n_micro;
  t->pos.loss_sum -= r->acc_loss;
  r->samples -= r->acc_samples;
  t->micro = 0;
  r->acc_loss = 0;
  r->acc_samples = 0;
  em_optimizer_zero_grad(t->opt);
  char where[64];
  snprintf(where, sizeof where, "%s %lld", what, (long long)t->pos.step + 1);
  return out_of_memory(r, where, oom, err);
}

/* The epoch's batches from t->pos on, until its end, a stop request
 * (between optimiser steps), an error or a jump. */
static em_status run_batches(run_ctx *r, em_error *err) {
  em_trainer *t = r->t;
  const em_train_config *c = &t->cfg;
  em_status st = EM_OK;
  double t0 = now_s(), held0 = r->held_s; /* the callback's time since t0 is not training */
  em_batch b;
  int world = em_trainer_world(t);
  r->acc_loss = 0; /* the loop (re)starts between optimiser steps */
  r->acc_samples = 0;
  while (!t->jumped) {
    if (t->micro == 0) { /* data-parallel: the ranks agree on a stop */
      if ((st = em_trainer_ddp_agree_stop(t, err)) != EM_OK) break;
      if (t->stop_agreed) break;
    }
    em_error lerr = {0};
    em_diag_batch_begin(t, &r->diag, err); /* the batch's step span holds its loading */
    int span = em_profile_range_begin("dataloader.next");
    bool got = em_loader_next(t->loader, &b, &lerr);
    em_profile_range_end(span);
    if (!got) {
      em_profile_step_cancel(); /* the epoch's end: no batch in this span, not a step */
      if (lerr.status != EM_OK) {
        st = lerr.status;
        if (err) *err = lerr;
      }
      break;
    }
    double lv;
    em_error oom = {0};
    if ((st = micro_batch(r, &b, &lv, &oom, err)) != EM_OK) {
      if (oom.status == EM_OK) break;
      if ((st = step_out_of_memory(r, "step", t->micro, &oom, err)) != EM_OK) break;
      continue; /* jumped */
    }
    em_watch_verdict v = em_watchdog_check_loss(&t->watch, lv);
    if (v != EM_WATCH_OK) {
      if ((st = diverged(r, v, lv, err)) != EM_OK) break;
      continue; /* rolled back: jumped */
    }
    t->micro++;
    t->pos.batch++;
    t->pos.loss_sum += lv;
    r->samples += b.n * world;
    r->acc_loss += lv;
    r->acc_samples += b.n * world;
    r->ev.grad_norm = 0;
    bool stepped = false;
    double step_loss = lv; /* mid-accumulation: the micro-batch's */
    bool ended_step = false;
    if (t->micro == r->acc || t->pos.batch == r->bpe) {
      double norm;
      if (t->ddp && (st = em_ddp_finish(t->ddp, err)) != EM_OK) break;
      span = em_profile_range_begin("optimizer.step");
      bool skipped;
      int n_micro = t->micro; /* optimizer_step may reset t->micro */
      optimizer_step(r, &v, &norm, &skipped);
      em_profile_range_end(span);
      if (em_device_error_pending()) { /* clipping's partial sums: no step was made */
        em_device_error_take(&oom);
        if ((st = step_out_of_memory(r, "the optimizer step", n_micro, &oom, err)) != EM_OK)
          break;
        continue; /* jumped */
      }
      step_loss = r->acc_loss / n_micro; /* the step's loss: its micro-batches' mean */
      ended_step = true;
      r->acc_loss = 0;
      r->acc_samples = 0;
      if (v != EM_WATCH_OK) {
        if ((st = diverged(r, v, norm, err)) != EM_OK) break;
        continue;
      }
      r->ev.grad_norm = norm;
      stepped = !skipped;
    }
    double el = r->train_time + (now_s() - t0) - (r->held_s - held0);
    r->ev.epoch = t->pos.epoch;
    r->ev.step = t->pos.step;
    r->ev.batch = t->pos.batch;
    r->ev.loss = step_loss;
    r->ev.step_end = ended_step;
    r->ev.samples_per_sec = el > 0 ? (double)r->samples / el : 0;
    r->ev.elapsed_s = now_s() - r->t_start;
    int64_t left = r->bpe * c->epochs - (t->pos.epoch * r->bpe + t->pos.batch);
    r->ev.eta_s = r->ev.samples_per_sec > 0
                      ? (double)left * (double)c->batch_size * world / r->ev.samples_per_sec
                      : 0;
    char *table = NULL, warning[1024];
    if ((st = em_diag_batch_end(t, &r->diag, &r->ev, &table, warning, sizeof warning, err)) !=
        EM_OK)
      break;
    emit(r, EM_EVENT_STEP);
    if (table) emit_profile(r, table);
    if (warning[0]) {
      r->ev.message = warning;
      emit(r, EM_EVENT_WARNING);
    }
    if (stepped && !t->jumped && t->ckpt_dir[0] && c->checkpoint_every > 0 &&
        t->pos.step % c->checkpoint_every == 0 && (st = write_checkpoint(r, "step", err)) != EM_OK)
      break;
  }
  r->train_time += now_s() - t0 - (r->held_s - held0);
  return st;
}

/* The end of the epoch's batches: EPOCH_END, an evaluation when due or
 * last, and, when the epoch is complete, the move to the next one (and
 * an "eval" checkpoint). */
/* early_stop after an evaluation: a better value resets the count, else
 * it grows; at the patience the run ends here, completed. */
static void early_stop_check(run_ctx *r, double test_loss, double test_accuracy) {
  em_trainer *t = r->t;
  char metric[32];
  bool maximize;
  int patience;
  if (!em_train_early_stop(&t->cfg, metric, sizeof metric, &maximize, &patience)) return;
  double v = maximize ? test_accuracy : test_loss;
  if (!t->es_seen || (maximize ? v > t->es_best : v < t->es_best)) {
    t->es_best = v;
    t->es_since = 0;
    t->es_seen = true;
    return;
  }
  if (++t->es_since < patience || t->early_stopped) return;
  t->early_stopped = true;
  char msg[200];
  snprintf(msg, sizeof msg, "early stop: %s has not improved for %lld evaluation%s (best %.6g)",
           metric, (long long)t->es_since, t->es_since == 1 ? "" : "s", t->es_best);
  r->ev.message = msg;
  emit(r, EM_EVENT_WARNING);
  r->ev.message = NULL;
}

static em_status end_epoch(run_ctx *r, bool complete, em_error *err) {
  em_trainer *t = r->t;
  const em_train_config *c = &t->cfg;
  int64_t epoch = t->pos.epoch;
  t->summary.epochs = (int)epoch + 1;
  t->summary.final_train_loss = t->pos.batch ? t->pos.loss_sum / (double)t->pos.batch : 0;
  r->ev.epoch = epoch;
  r->ev.step = t->pos.step;
  r->ev.batch = t->pos.batch;
  r->ev.loss = t->summary.final_train_loss;
  r->ev.samples_per_sec = r->train_time > 0 ? (double)r->samples / r->train_time : 0;
  emit(r, EM_EVENT_EPOCH_END);
  if (t->jumped) return EM_OK;
  /* data-parallel: a stop asked since the last step must be agreed on
   * here too, or one rank would evaluate (a collective) and the other not */
  EM_TRY(em_trainer_ddp_agree_stop(t, err));
  bool last = epoch + 1 == c->epochs || t->stop_agreed;
  bool due = c->eval_every > 0 && (epoch + 1) % c->eval_every == 0;
  bool evaluated = false;
  /* A stop in the middle of an epoch ends after its step, as asked: no
   * evaluation of the whole test set first (seconds, with nothing said,
   * while a second Ctrl-C ended the process without a checkpoint). */
  if (t->test && (due || last) && !(t->stop_agreed && !complete)) {
    char *table = NULL;
    EM_TRY(em_diag_window_end(t, &r->diag, &table, err));
    if (table) emit_profile(r, table);
    double tl, ta;
    em_status est;
    em_error eerr = {0};
    bool dev = !em_device_is_cpu(c->device), cut = false;
    while ((est = em_trainer_evaluate(t, &tl, &ta, &cut, &eerr)) == EM_ERR_NOMEM && dev) {
      /* out of device memory: stop, or halve the batch and evaluate again */
      EM_TRY(out_of_memory(r, "the evaluation", &eerr, err));
      t->jumped = false;
      eerr = (em_error){0};
    }
    if (est != EM_OK) {
      if (err) *err = eerr;
      return est;
    }
    /* A stop asked during the evaluation: no EVAL, and the epoch stays
     * where its batches ended, so the run is "stopped" and its final
     * checkpoint resumes into this evaluation (nothing is trained twice). */
    if (cut) return EM_OK;
    t->summary.test_loss = tl;
    t->summary.test_accuracy = ta;
    t->summary.evaluated = true;
    r->fresh_eval = evaluated = true;
    r->ev.test_loss = tl;
    r->ev.test_accuracy = ta;
    r->ev.test_samples = em_dataset_len(t->test);
    emit(r, EM_EVENT_EVAL);
    if (t->jumped) return EM_OK;
    early_stop_check(r, tl, ta);
  }
  if (!complete) return EM_OK;
  t->pos.epoch++;
  t->pos.batch = 0;
  t->pos.loss_sum = 0;
  if (evaluated && t->ckpt_dir[0]) return write_checkpoint(r, "eval", err);
  return EM_OK;
}

em_status em_trainer_run(em_trainer *t, em_train_callback cb, void *user, em_error *err) {
  const em_train_config *c = &t->cfg;
  em_set_num_threads(c->threads);
  run_ctx r = {.t = t, .cb = cb, .user = user};
  r.bpe = em_loader_batches_per_epoch(t->loader);
  if (r.bpe == 0 && c->epochs > t->pos.epoch) /* it would "complete" without a step */
    return em_error_set(err, EM_ERR_INVALID,
                        "the training set gives no batch: it holds fewer samples than one batch "
                        "of %d (after --limit and any data-parallel split) and drop_last drops a "
                        "partial batch; lower the batch size, or set drop_last to false",
                        c->batch_size);
  r.acc = c->accumulate > 0 ? c->accumulate : 1;
  int64_t steps_per_epoch = (r.bpe + r.acc - 1) / r.acc;
  int64_t total_steps = steps_per_epoch * c->epochs;
  r.sched = em_train_config_schedule(c);
  r.sched_total_auto = r.sched.total_steps == 0;
  if (r.sched.total_steps == 0) r.sched.total_steps = total_steps > 0 ? total_steps : 1;
  /* the config was checked before the run's length was known */
  if (r.sched_total_auto && em_schedule_check(&r.sched, err) != EM_OK)
    return em_error_prefix(err, "this run makes %lld optimiser steps, its schedule's "
                           "total_steps (train for more epochs, or give total_steps)",
                           (long long)r.sched.total_steps);
  r.cycle_momentum = r.sched.kind == EM_SCHED_ONECYCLE && r.sched.cycle_momentum;
  memset(&t->summary, 0, sizeof t->summary);
  t->ckpt_dir[0] = '\0';
  if (c->checkpoint_dir[0])
    EM_TRY(em_checkpoint_dir_prepare(c->checkpoint_dir, t->ckpt_dir, sizeof t->ckpt_dir, err));

  r.ev.epochs = c->epochs;
  r.ev.batches_per_epoch = r.bpe;
  r.ev.total_steps = total_steps;
  r.ev.epoch = t->pos.epoch;
  r.ev.step = t->pos.step;
  r.ev.lr = em_schedule_lr(&r.sched, t->pos.step) * t->lr_scale;
  em_optimizer_set_lr(t->opt, r.ev.lr);
  emit(&r, EM_EVENT_START);

  r.t_start = now_s();
  em_status st = EM_OK;
  t->running = true;
  em_diag_begin(t, &r.diag);
  em_model_zero_grad(t->model);
  st = em_trainer_ddp_begin_run(t, err);
  while (st == EM_OK && t->pos.epoch < c->epochs && !t->early_stopped &&
         (st = em_trainer_ddp_agree_stop(t, err)) == EM_OK && !t->stop_agreed) {
    t->jumped = false;
    t->micro = 0;
    em_loader_start_epoch_at(t->loader, t->pos.epoch, t->pos.batch);
    st = run_batches(&r, err);
    /* A last, smaller batch and evaluation use other block sizes than the
     * steady state: hand the cached blocks back so they never pile up. */
    em_memory_release_cached();
    if (!em_device_is_cpu(c->device)) em_device_release_cached(c->device);
    if (st != EM_OK || t->jumped) continue;
    st = end_epoch(&r, t->pos.batch >= r.bpe, err);
  }
  t->running = false;
  char *table = NULL;
  em_error derr = {0};
  em_status dst = em_diag_end(t, &r.diag, &table, &derr);
  if (table) emit_profile(&r, table);
  if (st == EM_OK && dst != EM_OK) {
    st = dst;
    if (err) *err = derr;
  }
  t->summary.steps = t->pos.step;
  t->summary.target_len = em_dataset_target_len(t->train);
  t->summary.train_seconds = r.train_time;
  t->summary.train_samples_per_sec = r.train_time > 0 ? (double)r.samples / r.train_time : 0;
  /* a stop asked for after the last step stopped nothing: the run is complete */
  t->summary.stopped = t->stop_agreed && t->pos.epoch < c->epochs;
  t->summary.early_stopped = t->early_stopped;
  /* a stopped run's test figures are those of its weights, or none */
  if (t->summary.stopped && !r.fresh_eval) t->summary.evaluated = false;
  if (st != EM_OK) return st;
  if (t->ckpt_dir[0]) EM_TRY(write_checkpoint(&r, "final", err));
  r.ev.elapsed_s = now_s() - r.t_start;
  emit(&r, EM_EVENT_DONE);
  return EM_OK;
}
