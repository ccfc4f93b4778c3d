/* config.c: the training configuration: defaults, the spec's "training"
 * and "loss" sections (unknown keys are errors), and range checks. */
#include "train-private.h"
#include "em-device.h"
#include "em-plugin.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void em_train_config_defaults(em_train_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->dataset, sizeof c->dataset, "fashion-mnist");
  c->batch_size = 64;
  c->epochs = 1;
  c->shuffle = true;
  c->workers = 1;
  em_optim_config_defaults(&c->optim, EM_OPTIM_SGD);
  c->optim.lr = 0.01;
  em_schedule_init(&c->schedule, EM_SCHED_CONSTANT, c->optim.lr);
  c->accumulate = 1;
  c->loss = EM_LOSS_CROSS_ENTROPY;
  c->seed = 0;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  c->threads = n > 0 ? (int)n : 1;
  c->eval_every = 1;
  c->checkpoint_every = 0;
  c->checkpoint_dir[0] = '\0';
  c->on_divergence = EM_DIVERGENCE_AUTO;
  c->divergence_lr_factor = 0.5;
  c->amp_init_scale = 65536.0;
  c->divergence_spike_factor = 10;
  c->max_rollbacks = 5;
}

#define TRY EM_TRY
/* The typed fields of json-fields.c, by shorter names. */
#define want_num em_json_want_num
#define want_int em_json_want_int
#define want_bool em_json_want_bool
#define want_str em_json_want_str

static em_status parse_schedule(em_schedule *s, const json_t *v, em_error *err) {
  if (json_is_string(v)) return em_schedule_parse_name(json_string_value(v), &s->kind, err);
  if (!json_is_object(v))
    return em_error_set(err, EM_ERR_INVALID,
                        "\"training\".\"schedule\" must be a name or an object, not %s",
                        em_json_kind(v));
  const char *key;
  json_t *x;
  bool typed = false;
  json_object_foreach((json_t *)v, key, x) {
    const char *sec = "schedule";
    int64_t i;
    if (strcmp(key, "type") == 0) {
      if (!json_is_string(x))
        return em_error_set(err, EM_ERR_INVALID, "\"schedule\".\"type\" must be a string");
      TRY(em_schedule_parse_name(json_string_value(x), &s->kind, err));
      typed = true;
    } else if (strcmp(key, "step_size") == 0) {
      TRY(want_int(sec, key, x, 1, INT64_MAX / 2, &i, err));
      s->step_size = i;
    } else if (strcmp(key, "gamma") == 0) TRY(want_num(sec, key, x, &s->gamma, err));
    else if (strcmp(key, "total_steps") == 0) {
      TRY(want_int(sec, key, x, 1, INT64_MAX / 2, &i, err));
      s->total_steps = i;
    } else if (strcmp(key, "eta_min") == 0) TRY(want_num(sec, key, x, &s->eta_min, err));
    else if (strcmp(key, "warmup_steps") == 0) {
      TRY(want_int(sec, key, x, 0, INT64_MAX / 2, &i, err));
      s->warmup_steps = i;
    } else if (strcmp(key, "warmup_start_factor") == 0)
      TRY(want_num(sec, key, x, &s->warmup_start_factor, err));
    else if (strcmp(key, "pct_start") == 0) TRY(want_num(sec, key, x, &s->pct_start, err));
    else if (strcmp(key, "div_factor") == 0) TRY(want_num(sec, key, x, &s->div_factor, err));
    else if (strcmp(key, "final_div_factor") == 0)
      TRY(want_num(sec, key, x, &s->final_div_factor, err));
    else if (strcmp(key, "cycle_momentum") == 0)
      TRY(want_bool(sec, key, x, &s->cycle_momentum, err));
    else if (strcmp(key, "base_momentum") == 0) TRY(want_num(sec, key, x, &s->base_momentum, err));
    else if (strcmp(key, "max_momentum") == 0) TRY(want_num(sec, key, x, &s->max_momentum, err));
    else
      return em_error_set(err, EM_ERR_INVALID,
                          "\"schedule\": unknown key \"%s\"; known: type, step_size, gamma, "
                          "total_steps, eta_min, warmup_steps, warmup_start_factor, pct_start, "
                          "div_factor, final_div_factor, cycle_momentum, base_momentum, "
                          "max_momentum",
                          key);
  }
  if (!typed) return em_error_set(err, EM_ERR_INVALID, "\"schedule\" needs a \"type\"");
  return EM_OK;
}

static em_status parse_training(em_train_config *c, const json_t *tr, em_error *err) {
  const char *sec = "training";
  if (!json_is_object(tr))
    return em_error_set(err, EM_ERR_INVALID, "\"training\" must be an object, not %s",
                        em_json_kind(tr));
  /* The optimiser first: its kind decides the defaults the other keys
   * override. */
  json_t *opt = json_object_get(tr, "optimizer");
  if (opt) {
    if (!json_is_string(opt))
      return em_error_set(err, EM_ERR_INVALID, "\"training\".\"optimizer\" must be a string");
    em_optim_kind k;
    TRY(em_optim_parse_kind(json_string_value(opt), &k, err));
    em_optim_config_defaults(&c->optim, k);
  }
  json_t *sched = NULL;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)tr, key, v) {
    int64_t i;
    if (strcmp(key, "optimizer") == 0) continue;
    if (strcmp(key, "dataset") == 0) TRY(want_str(sec, key, v, c->dataset, sizeof c->dataset, err));
    else if (strcmp(key, "data_dir") == 0)
      TRY(want_str(sec, key, v, c->data_dir, sizeof c->data_dir, err));
    else if (strcmp(key, "lr") == 0) TRY(want_num(sec, key, v, &c->optim.lr, err));
    else if (strcmp(key, "momentum") == 0) TRY(want_num(sec, key, v, &c->optim.momentum, err));
    else if (strcmp(key, "dampening") == 0) TRY(want_num(sec, key, v, &c->optim.dampening, err));
    else if (strcmp(key, "nesterov") == 0) TRY(want_bool(sec, key, v, &c->optim.nesterov, err));
    else if (strcmp(key, "weight_decay") == 0)
      TRY(want_num(sec, key, v, &c->optim.weight_decay, err));
    else if (strcmp(key, "betas") == 0) {
      if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
          !json_is_number(json_array_get(v, 1)))
        return em_error_set(err, EM_ERR_INVALID,
                            "\"training\".\"betas\" must be two numbers, like [0.9, 0.999]");
      c->optim.beta1 = json_number_value(json_array_get(v, 0));
      c->optim.beta2 = json_number_value(json_array_get(v, 1));
    } else if (strcmp(key, "eps") == 0) TRY(want_num(sec, key, v, &c->optim.eps, err));
    else if (strcmp(key, "amsgrad") == 0) TRY(want_bool(sec, key, v, &c->optim.amsgrad, err));
    else if (strcmp(key, "batch_size") == 0) {
      TRY(want_int(sec, key, v, 1, 1 << 20, &i, err));
      c->batch_size = (int)i;
    } else if (strcmp(key, "epochs") == 0) {
      TRY(want_int(sec, key, v, 0, 1000000, &i, err));
      c->epochs = (int)i;
    } else if (strcmp(key, "schedule") == 0) sched = v;
    else if (strcmp(key, "clip_grad_norm") == 0)
      TRY(want_num(sec, key, v, &c->clip_grad_norm, err));
    else if (strcmp(key, "divergence_spike_factor") == 0)
      TRY(want_num(sec, key, v, &c->divergence_spike_factor, err));
    else if (strcmp(key, "accumulate") == 0) {
      TRY(want_int(sec, key, v, 1, 1 << 16, &i, err));
      c->accumulate = (int)i;
    } else if (strcmp(key, "seed") == 0) {
      TRY(want_int(sec, key, v, 0, INT64_MAX, &i, err));
      c->seed = (uint64_t)i;
    } else if (strcmp(key, "shuffle") == 0) TRY(want_bool(sec, key, v, &c->shuffle, err));
    else if (strcmp(key, "drop_last") == 0) TRY(want_bool(sec, key, v, &c->drop_last, err));
    else if (strcmp(key, "workers") == 0) {
      TRY(want_int(sec, key, v, 0, 64, &i, err));
      c->workers = (int)i;
    } else if (strcmp(key, "limit") == 0) {
      TRY(want_int(sec, key, v, 0, INT64_MAX / 2, &i, err));
      c->limit = i;
    } else if (strcmp(key, "metrics") == 0) { /* plugins' metrics, computed at evaluation */
      TRY(em_metrics_check_json(v, err));
    } else if (strcmp(key, "eval_every") == 0) {
      TRY(want_int(sec, key, v, 0, 1000000, &i, err));
      c->eval_every = (int)i;
    } else if (strcmp(key, "amp_scaler") == 0) TRY(want_bool(sec, key, v, &c->amp_scaler, err));
    else if (strcmp(key, "amp_init_scale") == 0) TRY(want_num(sec, key, v, &c->amp_init_scale, err));
    else if (strcmp(key, "amp") == 0) {
      char name[16];
      TRY(want_str(sec, key, v, name, sizeof name, err));
      TRY(em_amp_mode_parse(name, &c->amp, err));
    } else if (strcmp(key, "device") == 0) {
      char name[32];
      TRY(want_str(sec, key, v, name, sizeof name, err));
      TRY(em_device_parse(name, &c->device, err));
    } else if (strcmp(key, "auto_batch") == 0) TRY(want_bool(sec, key, v, &c->auto_batch, err));
    else if (strcmp(key, "checkpoint_every") == 0) { /* the flags' spec twins */
      TRY(want_int(sec, key, v, 0, 1LL << 40, &i, err));
      c->checkpoint_every = i;
    } else if (strcmp(key, "max_rollbacks") == 0) {
      TRY(want_int(sec, key, v, 0, 1000000, &i, err));
      c->max_rollbacks = (int)i;
    } else if (strcmp(key, "divergence_lr_factor") == 0)
      TRY(want_num(sec, key, v, &c->divergence_lr_factor, err));
    else
      return em_error_set(err, EM_ERR_INVALID,
                          "\"training\": unknown key \"%s\"; known: dataset, data_dir, optimizer, "
                          "lr, momentum, dampening, nesterov, weight_decay, betas, eps, amsgrad, "
                          "batch_size, epochs, schedule, clip_grad_norm, "
                          "divergence_spike_factor, accumulate, seed, "
                          "shuffle, drop_last, workers, limit, eval_every, metrics, amp, "
                          "amp_scaler, amp_init_scale, device, auto_batch, checkpoint_every, "
                          "max_rollbacks, divergence_lr_factor",
                          key);
  }
  em_schedule_init(&c->schedule, EM_SCHED_CONSTANT, c->optim.lr);
  if (sched) TRY(parse_schedule(&c->schedule, sched, err));
  return EM_OK;
}

static em_status parse_loss(em_train_config *c, const json_t *lo, em_error *err) {
  if (!json_is_object(lo))
    return em_error_set(err, EM_ERR_INVALID, "\"loss\" must be an object, not %s",
                        em_json_kind(lo));
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)lo, key, v) {
    if (strcmp(key, "type") == 0) {
      const char *t = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(t, "cross_entropy") == 0) c->loss = EM_LOSS_CROSS_ENTROPY;
      else if (strcmp(t, "mse") == 0) c->loss = EM_LOSS_MSE;
      else
        return em_error_set(err, EM_ERR_INVALID,
                            "\"loss\".\"type\" must be \"cross_entropy\" or \"mse\"");
    } else if (strcmp(key, "label_smoothing") == 0)
      TRY(want_num("loss", key, v, &c->label_smoothing, err));
    else
      return em_error_set(err, EM_ERR_INVALID,
                          "\"loss\": unknown key \"%s\"; known: type, label_smoothing", key);
  }
  if (c->loss == EM_LOSS_MSE && c->label_smoothing > 0) /* it was ignored without a word */
    return em_error_set(err, EM_ERR_INVALID,
                        "\"loss\": label_smoothing applies to cross_entropy; an mse loss "
                        "takes none (remove it, or use \"type\": \"cross_entropy\")");
  return EM_OK;
}

em_status em_train_config_from_spec(em_train_config *c, const em_spec *spec, em_error *err) {
  json_t *tr = em_spec_training_json(spec), *lo = em_spec_loss_json(spec);
  if (tr) TRY(parse_training(c, tr, err));
  if (lo) TRY(parse_loss(c, lo, err));
  return EM_OK;
}

em_status em_train_config_validate(const em_train_config *c, em_error *err) {
  if (c->batch_size < 1)
    return em_error_set(err, EM_ERR_INVALID, "the batch size must be at least 1");
  if (c->epochs < 0) return em_error_set(err, EM_ERR_INVALID, "epochs must not be negative");
  if (!(c->label_smoothing >= 0 && c->label_smoothing <= 1))
    return em_error_set(err, EM_ERR_INVALID, "label smoothing must be from 0 to 1");
  if (!(c->clip_grad_norm >= 0) || !isfinite(c->clip_grad_norm))
    return em_error_set(err, EM_ERR_INVALID, "clip_grad_norm must be a positive number or 0 (off)");
  if (c->accumulate < 1)
    return em_error_set(err, EM_ERR_INVALID, "accumulate must be at least 1");
  if (c->threads < 1) return em_error_set(err, EM_ERR_INVALID, "threads must be at least 1");
  if (c->amp == EM_AMP_F16 && em_device_is_cpu(c->device))
    return em_error_set(err, EM_ERR_INVALID,
                        "amp f16 is a GPU mode (f16 compute with the gradient scaler) and this "
                        "run is on the CPU: use --amp bf16 (autocast on AMX or AVX512-BF16) or "
                        "off");
  if (c->amp_scaler && c->amp == EM_AMP_OFF)
    return em_error_set(err, EM_ERR_INVALID,
                        "the loss scaler (amp_scaler) works with mixed precision: give --amp "
                        "bf16 as well, or leave the scaler off");
  if (!(c->amp_init_scale >= 1 && c->amp_init_scale <= 3.4e38))
    return em_error_set(err, EM_ERR_INVALID,
                        "amp_init_scale must be from 1 to 3.4e38 (a float's range; 65536 by "
                        "default), got %g", c->amp_init_scale);
  if ((unsigned)c->amp > EM_AMP_F16)
    return em_error_set(err, EM_ERR_INVALID, "unknown amp mode %d (off, bf16 or f16)",
                        (int)c->amp);
  if (c->checkpoint_every < 0)
    return em_error_set(err, EM_ERR_INVALID,
                        "checkpoint_every must be 0 (no periodic checkpoints) or a number of "
                        "optimiser steps, got %lld", (long long)c->checkpoint_every);
  if (c->checkpoint_every > 0 && !c->checkpoint_dir[0])
    return em_error_set(err, EM_ERR_INVALID,
                        "checkpoint_every is %lld but no checkpoint folder is set: give one "
                        "(--checkpoint-dir) or set checkpoint_every to 0",
                        (long long)c->checkpoint_every);
  if ((unsigned)c->on_divergence > EM_DIVERGENCE_STOP)
    return em_error_set(err, EM_ERR_INVALID, "unknown divergence policy %d (auto, rollback or "
                        "stop)", (int)c->on_divergence);
  if (!(c->divergence_lr_factor > 0 && c->divergence_lr_factor <= 1))
    return em_error_set(err, EM_ERR_INVALID,
                        "divergence_lr_factor must be above 0 and at most 1 (0.5 halves the "
                        "learning rate on each rollback), got %g", c->divergence_lr_factor);
  if (!(c->divergence_spike_factor == 0 ||
        (c->divergence_spike_factor > 1 && isfinite(c->divergence_spike_factor))))
    return em_error_set(err, EM_ERR_INVALID,
                        "divergence_spike_factor must be above 1 (10: a gradient norm 10x the "
                        "recent largest is a divergence) or 0 (off), got %g",
                        c->divergence_spike_factor);
  if (c->max_rollbacks < 0)
    return em_error_set(err, EM_ERR_INVALID, "max_rollbacks must be 0 or more, got %d",
                        c->max_rollbacks);
  TRY(em_optim_config_check(&c->optim, err));
  em_schedule s = c->schedule;
  s.lr = c->optim.lr;
  /* total_steps 0: the run's own length, known at run time (em_trainer_run
   * checks it then against warmup_steps) */
  if (s.total_steps == 0) s.total_steps = (s.warmup_steps > 0 ? s.warmup_steps : 0) + 1;
  return em_schedule_check(&s, err);
}
