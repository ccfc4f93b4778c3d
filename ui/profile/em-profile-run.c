/* em-profile-run.c: see the header. The steps are the trainer's own
 * (em_profile_training), so that the profile is a training run's. */
#include "em-profile-run.h"

#include <stdio.h>

#include "em-profile.h"
#include "em-train.h"

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
  em_status st = em_train_config_from_spec(&cfg, spec, err);
  if (st != EM_OK) goto out;
  if (o->batch > 0) cfg.batch_size = o->batch;
  if (o->dataset) snprintf(cfg.dataset, sizeof cfg.dataset, "%s", o->dataset);
  if (o->data_dir) snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", o->data_dir);
  if ((st = em_train_config_validate(&cfg, err)) != EM_OK) goto out;
  ds = em_train_open_dataset(spec, &cfg, true, err);
  if (!ds) {
    st = err->status;
    goto out;
  }
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
  em_profile_training_options po = {.warmup = warmup, .steps = steps, .cancel = o->cancel};
  if ((st = em_profile_training(model, &cfg, ds, &po, err)) != EM_OK) goto out;
  if (po.steps_done == 0) {
    st = em_error_set(err, EM_ERR_CANCELLED, "profiling was stopped before a step ran");
    goto out;
  }
  o->step_ms = po.step_ms_median;
  st = em_profile_write_trace(o->trace_path, err);
out:
  em_model_free(model);
  em_dataset_free(ds);
  em_spec_free(spec);
  return st;
}
