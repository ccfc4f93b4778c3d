/* em-profile-run.c: see the header. The step is the trainer's (forward,
 * loss and backward in one scope, then the optimiser step), as in
 * app/cmd-profile.c, so that the profile looks like a training run's. */
#include "em-profile-run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-pool.h"
#include "em-profile.h"
#include "em-train.h"

typedef struct {
  em_model *model;
  em_optimizer *opt;
  em_loader *loader;
  const em_train_config *cfg;
  int64_t shape[EM_MAX_DIMS];
  int ndim;
  em_rng rng;
  int64_t epoch;
} runner;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static bool step(runner *rn, em_error *err) {
  em_profile_step_begin();
  int r = em_profile_range_begin("dataloader.next");
  em_batch b;
  bool got = em_loader_next(rn->loader, &b, err);
  if (!got && err->status == EM_OK) {
    em_loader_start_epoch(rn->loader, ++rn->epoch);
    got = em_loader_next(rn->loader, &b, err);
  }
  em_profile_range_end(r);
  if (!got) {
    if (err->status == EM_OK) em_error_set(err, EM_ERR_INVALID, "the dataset gave no batch");
    em_profile_step_end();
    return false;
  }
  em_scope *s = em_scope_begin();
  int64_t xshape[EM_MAX_DIMS + 1];
  xshape[0] = b.n;
  memcpy(xshape + 1, rn->shape, sizeof(int64_t) * (size_t)rn->ndim);
  em_tensor *x = em_tensor_wrap(EM_DTYPE_F32, rn->ndim + 1, xshape, (void *)b.x);
  em_tensor *y = em_tensor_wrap(EM_DTYPE_I64, 1, &b.n, (void *)b.y);
  em_tensor *out = em_model_forward(rn->model, x, true, &rn->rng, err);
  bool ok = out != NULL;
  if (ok) {
    em_tensor *loss = em_train_loss(rn->cfg->loss, out, y, rn->cfg->label_smoothing);
    double v = em_tensor_item(loss);
    if (!isfinite(v)) {
      em_error_set(err, EM_ERR_NUMERIC,
                   "the loss became %s; lower the learning rate or check the data",
                   isnan(v) ? "NaN" : "infinite");
      ok = false;
    } else {
      em_backward(loss);
    }
  }
  em_scope_end(s);
  if (ok) {
    r = em_profile_range_begin("optimizer.step");
    em_optimizer_step(rn->opt);
    em_optimizer_zero_grad(rn->opt);
    em_profile_range_end(r);
  }
  em_profile_step_end();
  return ok;
}

em_status em_profile_run(em_profile_run_options *o, em_error *err) {
  if (!o->spec_json || !o->trace_path)
    return em_error_set(err, EM_ERR_INVALID, "profile run: a spec and a trace path are needed");
  int steps = o->steps > 0 ? o->steps : 10, warmup = o->warmup >= 0 ? o->warmup : 2;
  em_spec *spec = em_spec_parse(o->spec_json, "<builder>", err);
  if (!spec) return err->status;
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  em_model *model = NULL;
  em_dataset *ds = NULL;
  em_loader *loader = NULL;
  em_optimizer *opt = NULL;
  em_tensor **params = NULL;
  const char **names = NULL;
  double *times = NULL;
  em_status st = em_train_config_from_spec(&cfg, spec, err);
  if (st != EM_OK) goto out;
  if (o->batch > 0) cfg.batch_size = o->batch;
  if (o->dataset) snprintf(cfg.dataset, sizeof cfg.dataset, "%s", o->dataset);
  if (o->data_dir) snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", o->data_dir);
  if ((st = em_train_config_validate(&cfg, err)) != EM_OK) goto out;
  int64_t shape[EM_MAX_DIMS], classes[EM_MAX_DIMS];
  int nd = em_spec_input_shape(spec, shape);
  em_spec_output_shape(spec, classes);
  ds = em_dataset_open_named(cfg.dataset, cfg.data_dir[0] ? cfg.data_dir : NULL, true, shape, nd,
                             (int)classes[0], err);
  if (!ds) {
    st = err->status;
    goto out;
  }
  if ((st = em_train_check_fit(spec, ds, cfg.dataset, cfg.loss, err)) != EM_OK) goto out;
  if (em_dataset_len(ds) < cfg.batch_size) {
    st = em_error_set(err, EM_ERR_INVALID,
                      "the dataset has %lld samples, fewer than one batch of %d: lower the batch",
                      (long long)em_dataset_len(ds), cfg.batch_size);
    goto out;
  }
  model = em_model_new(spec, cfg.seed, err);
  if (!model) {
    st = err->status;
    goto out;
  }
  em_loader_config lc;
  em_loader_config_defaults(&lc);
  lc.batch_size = cfg.batch_size;
  lc.drop_last = true;
  lc.workers = cfg.workers;
  lc.seed = cfg.seed;
  loader = em_loader_new(ds, &lc, err);
  if (!loader) {
    st = err->status;
    goto out;
  }
  int np = em_model_param_count(model);
  params = calloc((size_t)np + 1, sizeof *params);
  names = calloc((size_t)np + 1, sizeof *names);
  times = calloc((size_t)steps, sizeof *times);
  if (!params || !names || !times) {
    st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
    goto out;
  }
  for (int i = 0; i < np; i++) params[i] = em_model_param(model, i, &names[i]);
  opt = em_optimizer_new(&cfg.optim, np, params, names, err);
  if (!opt) {
    st = err->status;
    goto out;
  }
  runner rn = {.model = model, .opt = opt, .loader = loader, .cfg = &cfg};
  em_rng_seed(&rn.rng, cfg.seed ^ 0x5DEECE66Dull);
  rn.ndim = em_dataset_sample_shape(ds, rn.shape);
  em_loader_start_epoch(loader, 0);
  for (int i = 0; i < warmup; i++)
    if (!step(&rn, err)) {
      st = err->status;
      goto out;
    }
  em_memory_reset_peak();
  if ((st = em_profile_start(NULL, err)) != EM_OK) goto out;
  int done = 0;
  for (; done < steps; done++) {
    if (o->cancel && atomic_load(o->cancel)) break;
    double t0 = now_ms();
    if (!step(&rn, err)) break;
    times[done] = now_ms() - t0;
  }
  em_profile_stop();
  if (err->status != EM_OK) {
    st = err->status;
    goto out;
  }
  if (done == 0) {
    st = em_error_set(err, EM_ERR_CANCELLED, "profiling was stopped before a step ran");
    goto out;
  }
  qsort(times, (size_t)done, sizeof *times, cmp_double);
  o->step_ms = times[done / 2];
  st = em_profile_write_trace(o->trace_path, err);
out:
  free(times);
  free(params);
  free(names);
  em_optimizer_free(opt);
  em_loader_free(loader);
  em_model_free(model);
  em_dataset_free(ds);
  em_spec_free(spec);
  return st;
}
