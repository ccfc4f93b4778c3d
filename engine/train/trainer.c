/* trainer.c: the training loop. One step: forward (records the tape),
 * loss, backward, optional clip, optimiser step, schedule; all temporaries
 * live in one scope released at the end of the step, so the steady state
 * does no malloc. */
#include "em-train.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-ops.h"
#include "em-pool.h"

struct em_trainer {
  em_model *model;
  em_train_config cfg;
  const em_dataset *train, *test;
  em_loader *loader;
  em_optimizer *opt;
  int n_params;
  em_tensor **params;
  em_rng rng; /* dropout and other training-time randomness */
  atomic_bool stop;
  em_train_summary summary;
  int64_t sample_shape[EM_MAX_DIMS + 1];
  int sample_ndim;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

em_trainer *em_trainer_new(em_model *m, const em_train_config *c, const em_dataset *train,
                           const em_dataset *test, em_error *err) {
  if (em_train_config_validate(c, err) != EM_OK) return NULL;
  if (em_train_check_fit(em_model_spec(m), train, "training", c->loss, err) != EM_OK ||
      (test && em_train_check_fit(em_model_spec(m), test, "test", c->loss, err) != EM_OK))
    return NULL;
  em_trainer *t = calloc(1, sizeof *t);
  if (!t) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory creating the trainer");
    return NULL;
  }
  t->model = m;
  t->cfg = *c;
  t->train = train;
  t->test = test;
  t->sample_ndim = em_dataset_sample_shape(train, t->sample_shape);
  em_loader_config lc;
  em_loader_config_defaults(&lc);
  lc.batch_size = c->batch_size;
  lc.shuffle = c->shuffle;
  lc.drop_last = c->drop_last;
  lc.workers = c->workers;
  lc.seed = c->seed;
  lc.limit = c->limit;
  t->loader = em_loader_new(train, &lc, err);
  if (!t->loader) goto fail;
  t->n_params = em_model_param_count(m);
  t->params = calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *t->params);
  const char **names = calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *names);
  if (!t->params || !names) {
    free(names);
    em_error_set(err, EM_ERR_NOMEM, "out of memory creating the trainer");
    goto fail;
  }
  for (int i = 0; i < t->n_params; i++) t->params[i] = em_model_param(m, i, &names[i]);
  t->opt = em_optimizer_new(&c->optim, t->n_params, t->params, names, err);
  free(names);
  if (!t->opt) goto fail;
  em_rng base;
  em_rng_seed(&base, c->seed ^ 0x5DEECE66Dull);
  t->rng = em_rng_split(&base);
  atomic_init(&t->stop, false);
  return t;
fail:
  em_trainer_free(t);
  return NULL;
}

void em_trainer_free(em_trainer *t) {
  if (!t) return;
  em_loader_free(t->loader);
  em_optimizer_free(t->opt);
  free(t->params);
  free(t);
}

void em_trainer_request_stop(em_trainer *t) { atomic_store(&t->stop, true); }

void em_trainer_summary(const em_trainer *t, em_train_summary *out) { *out = t->summary; }

em_tensor *em_train_loss(em_loss_kind kind, em_tensor *out, em_tensor *y, double label_smoothing) {
  if (kind == EM_LOSS_CROSS_ENTROPY) return em_cross_entropy(out, y, label_smoothing);
  /* MSE against one-hot targets of the labels. */
  em_tensor *target = em_zeros(out->dtype, out->ndim, out->shape);
  int64_t n = out->shape[0], k = out->shape[1];
  for (int64_t i = 0; i < n; i++) {
    int64_t c = em_i64(y)[i];
    if (c >= 0 && c < k) {
      if (out->dtype == EM_DTYPE_F32) em_f32(target)[i * k + c] = 1.0f;
      else em_f64(target)[i * k + c] = 1.0;
    }
  }
  return em_mse_loss(out, target);
}

static bool emit(em_train_callback cb, void *user, const em_train_event *ev) {
  return cb ? cb(ev, user) : true;
}

em_status em_trainer_run(em_trainer *t, em_train_callback cb, void *user, em_error *err) {
  const em_train_config *c = &t->cfg;
  em_set_num_threads(c->threads);
  int64_t bpe = em_loader_batches_per_epoch(t->loader);
  int acc = c->accumulate > 0 ? c->accumulate : 1;
  int64_t steps_per_epoch = (bpe + acc - 1) / acc;
  int64_t total_steps = steps_per_epoch * c->epochs;
  em_schedule sched = c->schedule;
  sched.lr = c->optim.lr;
  if (sched.total_steps == 0) sched.total_steps = total_steps > 0 ? total_steps : 1;
  bool cycle_momentum = sched.kind == EM_SCHED_ONECYCLE && sched.cycle_momentum;
  double base_momentum = em_optimizer_get_momentum(t->opt);
  memset(&t->summary, 0, sizeof t->summary);

  em_train_event ev = {0};
  ev.epochs = c->epochs;
  ev.batches_per_epoch = bpe;
  ev.total_steps = total_steps;
  ev.kind = EM_EVENT_START;
  ev.lr = em_schedule_lr(&sched, 0);
  em_optimizer_set_lr(t->opt, ev.lr);
  if (!emit(cb, user, &ev)) atomic_store(&t->stop, true);

  double train_time = 0, t_start = now_s();
  int64_t samples = 0, step = 0;
  em_status st = EM_OK;
  em_model_zero_grad(t->model);
  for (int64_t epoch = 0; epoch < c->epochs && !atomic_load(&t->stop); epoch++) {
    em_loader_start_epoch(t->loader, epoch);
    double epoch_loss = 0;
    int64_t epoch_batches = 0, micro = 0;
    double t0 = now_s();
    em_batch b;
    while (!atomic_load(&t->stop)) {
      em_error lerr = {0};
      if (!em_loader_next(t->loader, &b, &lerr)) {
        if (lerr.status != EM_OK) {
          st = lerr.status;
          if (err) *err = lerr;
        }
        break;
      }
      em_scope *s = em_scope_begin();
      int64_t xshape[EM_MAX_DIMS + 1];
      xshape[0] = b.n;
      memcpy(xshape + 1, t->sample_shape, sizeof(int64_t) * (size_t)t->sample_ndim);
      em_tensor *x = em_tensor_wrap(EM_DTYPE_F32, t->sample_ndim + 1, xshape, (void *)b.x);
      em_tensor *y = em_tensor_wrap(EM_DTYPE_I64, 1, &b.n, (void *)b.y);
      em_tensor *out = em_model_forward(t->model, x, true, &t->rng, err);
      if (!out) {
        em_scope_end(s);
        st = err ? err->status : EM_ERR_INVALID;
        if (st == EM_OK) st = EM_ERR_INVALID;
        break;
      }
      em_tensor *loss = em_train_loss(c->loss, out, y, c->label_smoothing);
      double lv = em_tensor_item(loss);
      if (!isfinite(lv)) {
        em_scope_end(s);
        st = em_error_set(err, EM_ERR_NUMERIC,
                          "the loss became %s at epoch %lld, batch %lld (step %lld); try a lower "
                          "learning rate or gradient clipping (--clip-grad-norm)",
                          isnan(lv) ? "NaN" : "infinite", (long long)epoch + 1,
                          (long long)epoch_batches + 1, (long long)step);
        break;
      }
      if (acc > 1) loss = em_mul_scalar(loss, 1.0 / acc);
      em_backward(loss);
      em_scope_end(s);
      micro++;
      epoch_loss += lv;
      epoch_batches++;
      samples += b.n;
      ev.grad_norm = 0;
      if (micro % acc == 0 || epoch_batches == bpe) {
        if (c->clip_grad_norm > 0) {
          ev.grad_norm = em_clip_grad_norm(t->n_params, t->params, c->clip_grad_norm);
          if (!isfinite(ev.grad_norm)) {
            st = em_error_set(err, EM_ERR_NUMERIC,
                              "the gradient norm became non-finite at step %lld; try a lower "
                              "learning rate",
                              (long long)step);
            break;
          }
        }
        double lr = em_schedule_lr(&sched, step);
        em_optimizer_set_lr(t->opt, lr);
        if (cycle_momentum)
          em_optimizer_set_momentum(t->opt, em_schedule_momentum(&sched, step, base_momentum));
        em_optimizer_step(t->opt);
        em_optimizer_zero_grad(t->opt);
        step++;
        ev.lr = lr;
      }
      double el = train_time + (now_s() - t0);
      ev.kind = EM_EVENT_STEP;
      ev.epoch = epoch;
      ev.step = step;
      ev.batch = epoch_batches;
      ev.loss = lv;
      ev.samples_per_sec = el > 0 ? (double)samples / el : 0;
      ev.elapsed_s = now_s() - t_start;
      int64_t left = bpe * c->epochs - (epoch * bpe + epoch_batches);
      ev.eta_s = ev.samples_per_sec > 0 ? (double)left * (double)c->batch_size / ev.samples_per_sec : 0;
      if (!emit(cb, user, &ev)) atomic_store(&t->stop, true);
    }
    train_time += now_s() - t0;
    /* A last, smaller batch and evaluation use other block sizes than the
     * steady state: hand the cached blocks back so they never pile up. */
    em_memory_release_cached();
    if (st != EM_OK) break;
    t->summary.epochs = (int)epoch + 1;
    t->summary.final_train_loss = epoch_batches ? epoch_loss / (double)epoch_batches : 0;
    ev.kind = EM_EVENT_EPOCH_END;
    ev.epoch = epoch;
    ev.loss = t->summary.final_train_loss;
    ev.samples_per_sec = train_time > 0 ? (double)samples / train_time : 0;
    if (!emit(cb, user, &ev)) atomic_store(&t->stop, true);
    bool last = epoch + 1 == c->epochs || atomic_load(&t->stop);
    bool due = c->eval_every > 0 && (epoch + 1) % c->eval_every == 0;
    if (t->test && (due || last)) {
      double tl, ta;
      if ((st = em_evaluate(t->model, t->test, c->batch_size, c->loss, 0.0, &tl, &ta, err)) !=
          EM_OK)
        break;
      t->summary.test_loss = tl;
      t->summary.test_accuracy = ta;
      t->summary.evaluated = true;
      ev.kind = EM_EVENT_EVAL;
      ev.test_loss = tl;
      ev.test_accuracy = ta;
      ev.test_samples = em_dataset_len(t->test);
      if (!emit(cb, user, &ev)) atomic_store(&t->stop, true);
    }
  }
  t->summary.steps = step;
  t->summary.train_seconds = train_time;
  t->summary.train_samples_per_sec = train_time > 0 ? (double)samples / train_time : 0;
  t->summary.stopped = atomic_load(&t->stop);
  if (st != EM_OK) return st;
  ev.kind = EM_EVENT_DONE;
  ev.elapsed_s = now_s() - t_start;
  emit(cb, user, &ev);
  return EM_OK;
}
