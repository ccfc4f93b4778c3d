/* config-json.c: the whole training config as one JSON object and back,
 * for the registry and for resuming a run:
 *
 *   {"dataset": "fashion-mnist", "data_dir": "", "batch_size": 64, ...,
 *    "optim": {"kind": "sgd", "lr": 0.01, ...},
 *    "schedule": {"type": "constant", "lr": 0.01, ...},
 *    "loss": "cross_entropy", ..., "on_divergence": "auto", ...}
 *
 * Every field is written; reading starts from the defaults, so a config
 * written before a field existed still loads. Unknown keys and wrong
 * types are errors naming the key. Numbers are written with the fewest
 * digits that read back to the same double, so from_json(to_json(c))
 * equals c field for field. Ranges are em_train_config_validate's job:
 * any config, valid or not, survives the round trip. */
#include "train-private.h"
#include "em-device.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const loss_names[] = {"cross_entropy", "mse"};
static const char *const divergence_names[] = {"auto", "rollback", "stop"};

/* ---- writing ------------------------------------------------------------ */

/* Sets key to a number; false when it is not finite (JSON has no NaN). */
static bool put_real(json_t *o, const char *key, double v) {
  return isfinite(v) && json_object_set_new(o, key, json_real(v)) == 0;
}

static bool put_int(json_t *o, const char *key, int64_t v) {
  return json_object_set_new(o, key, json_integer((json_int_t)v)) == 0;
}

static bool put_bool(json_t *o, const char *key, bool v) {
  return json_object_set_new(o, key, json_boolean(v)) == 0;
}

static bool put_str(json_t *o, const char *key, const char *v) {
  json_t *s = json_string(v);
  return s && json_object_set_new(o, key, s) == 0;
}

static json_t *optim_to_json(const em_optim_config *o) {
  json_t *j = json_object();
  bool ok = j && put_str(j, "kind", em_optim_kind_name(o->kind)) && put_real(j, "lr", o->lr) &&
            put_real(j, "momentum", o->momentum) && put_real(j, "dampening", o->dampening) &&
            put_real(j, "weight_decay", o->weight_decay) && put_bool(j, "nesterov", o->nesterov) &&
            put_real(j, "beta1", o->beta1) && put_real(j, "beta2", o->beta2) &&
            put_real(j, "eps", o->eps) && put_bool(j, "amsgrad", o->amsgrad);
  if (!ok) json_decref(j);
  return ok ? j : NULL;
}

/* The schedule's base lr is the optimiser's (the trainer sets it so at run
 * time): base_lr is written in its place, so that two configs with the
 * same lr never differ in a stale copy of it. */
static json_t *schedule_to_json(const em_schedule *s, double base_lr) {
  json_t *j = json_object();
  bool ok = j && put_str(j, "type", em_schedule_kind_name(s->kind)) && put_real(j, "lr", base_lr) &&
            put_int(j, "step_size", s->step_size) && put_real(j, "gamma", s->gamma) &&
            put_int(j, "total_steps", s->total_steps) && put_real(j, "eta_min", s->eta_min) &&
            put_int(j, "warmup_steps", s->warmup_steps) &&
            put_real(j, "warmup_start_factor", s->warmup_start_factor) &&
            put_real(j, "pct_start", s->pct_start) && put_real(j, "div_factor", s->div_factor) &&
            put_real(j, "final_div_factor", s->final_div_factor) &&
            put_bool(j, "cycle_momentum", s->cycle_momentum) &&
            put_real(j, "base_momentum", s->base_momentum) &&
            put_real(j, "max_momentum", s->max_momentum);
  if (!ok) json_decref(j);
  return ok ? j : NULL;
}

/* The seed as an integer, or as a decimal string above JSON's (and
 * jansson's) signed 64-bit range. */
static bool put_seed(json_t *o, uint64_t seed) {
  if (seed <= (uint64_t)INT64_MAX) return put_int(o, "seed", (int64_t)seed);
  char buf[32];
  snprintf(buf, sizeof buf, "%" PRIu64, seed);
  return put_str(o, "seed", buf);
}

char *em_train_config_to_json(const em_train_config *c) {
  json_t *j = json_object();
  if (!j) return NULL;
  json_t *optim = optim_to_json(&c->optim), *sched = schedule_to_json(&c->schedule, c->optim.lr);
  bool loss_ok = (unsigned)c->loss < sizeof loss_names / sizeof *loss_names;
  bool div_ok = (unsigned)c->on_divergence < sizeof divergence_names / sizeof *divergence_names;
  char dev[32];
  bool ok = optim && sched && loss_ok && div_ok && put_str(j, "dataset", c->dataset) &&
            put_str(j, "data_dir", c->data_dir) && put_int(j, "batch_size", c->batch_size) &&
            put_int(j, "epochs", c->epochs) && put_int(j, "limit", c->limit) &&
            put_bool(j, "shuffle", c->shuffle) && put_bool(j, "drop_last", c->drop_last) &&
            put_int(j, "workers", c->workers) && json_object_set(j, "optim", optim) == 0 &&
            json_object_set(j, "schedule", sched) == 0 &&
            put_real(j, "clip_grad_norm", c->clip_grad_norm) &&
            put_int(j, "accumulate", c->accumulate) && put_str(j, "loss", loss_names[c->loss]) &&
            put_real(j, "label_smoothing", c->label_smoothing) && put_seed(j, c->seed) &&
            put_int(j, "threads", c->threads) && put_int(j, "eval_every", c->eval_every) &&
            put_int(j, "checkpoint_every", c->checkpoint_every) &&
            put_str(j, "checkpoint_dir", c->checkpoint_dir) &&
            put_str(j, "on_divergence", divergence_names[c->on_divergence]) &&
            put_real(j, "divergence_lr_factor", c->divergence_lr_factor) &&
            put_real(j, "divergence_spike_factor", c->divergence_spike_factor) &&
            put_int(j, "max_rollbacks", c->max_rollbacks) &&
            /* written only when on, so that a run without amp is stored as before */
            (c->amp == EM_AMP_OFF || put_str(j, "amp", em_amp_mode_name(c->amp))) &&
            (!c->amp_scaler || put_bool(j, "amp_scaler", true)) &&
            (!c->amp_scaler || c->amp_init_scale == 65536.0 ||
             put_real(j, "amp_init_scale", c->amp_init_scale)) &&
            /* the same for the device and auto_batch */
            (em_device_is_cpu(c->device) ||
             put_str(j, "device", em_device_str(c->device, dev, sizeof dev))) &&
            (!c->auto_batch || put_bool(j, "auto_batch", true));
  json_decref(optim);
  json_decref(sched);
  char *text = ok ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  return text;
}

/* ---- reading ------------------------------------------------------------ */

static em_status want_c_int(const char *sec, const char *key, const json_t *v, int *out,
                            em_error *err) {
  int64_t x;
  EM_TRY(em_json_want_int(sec, key, v, INT_MIN, INT_MAX, &x, err));
  *out = (int)x;
  return EM_OK;
}

static em_status want_i64(const char *sec, const char *key, const json_t *v, int64_t *out,
                          em_error *err) {
  return em_json_want_int(sec, key, v, INT64_MIN, INT64_MAX, out, err);
}

/* One of names (n of them); the index into *out. */
static em_status want_name(const char *sec, const char *key, const json_t *v,
                           const char *const *names, int n, int *out, em_error *err) {
  if (!json_is_string(v))
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be a string, not %s", sec, key,
                        em_json_kind(v));
  for (int i = 0; i < n; i++)
    if (strcmp(json_string_value(v), names[i]) == 0) {
      *out = i;
      return EM_OK;
    }
  char known[256] = "";
  for (int i = 0; i < n; i++)
    snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
             names[i]);
  return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" is \"%s\"; expected one of %s", sec,
                      key, json_string_value(v), known);
}

static em_status want_seed(const json_t *v, uint64_t *out, em_error *err) {
  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    *out = (uint64_t)json_integer_value(v);
    return EM_OK;
  }
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (s[0] >= '0' && s[0] <= '9' && *end == '\0' && errno == 0) {
      *out = (uint64_t)x;
      return EM_OK;
    }
  }
  return em_error_set(err, EM_ERR_INVALID,
                      "\"config\".\"seed\" must be a whole number from 0 to 2^64 - 1 (larger "
                      "than 2^63 - 1 as a decimal string), not %s", em_json_kind(v));
}

static em_status unknown_key(const char *sec, const char *key, const char *known,
                             em_error *err) {
  return em_error_set(err, EM_ERR_INVALID, "\"%s\": unknown key \"%s\"; known: %s", sec, key,
                      known);
}

static em_status optim_from_json(em_optim_config *o, const json_t *j, em_error *err) {
  const char *sec = "config.optim";
  if (!json_is_object(j))
    return em_error_set(err, EM_ERR_INVALID, "\"config\".\"optim\" must be an object, not %s",
                        em_json_kind(j));
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)j, key, v) {
    if (strcmp(key, "kind") == 0) {
      if (!json_is_string(v))
        return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"kind\" must be a string, not %s",
                            sec, em_json_kind(v));
      EM_TRY(em_optim_parse_kind(json_string_value(v), &o->kind, err));
    } else if (strcmp(key, "lr") == 0) EM_TRY(em_json_want_num(sec, key, v, &o->lr, err));
    else if (strcmp(key, "momentum") == 0) EM_TRY(em_json_want_num(sec, key, v, &o->momentum, err));
    else if (strcmp(key, "dampening") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &o->dampening, err));
    else if (strcmp(key, "weight_decay") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &o->weight_decay, err));
    else if (strcmp(key, "nesterov") == 0)
      EM_TRY(em_json_want_bool(sec, key, v, &o->nesterov, err));
    else if (strcmp(key, "beta1") == 0) EM_TRY(em_json_want_num(sec, key, v, &o->beta1, err));
    else if (strcmp(key, "beta2") == 0) EM_TRY(em_json_want_num(sec, key, v, &o->beta2, err));
    else if (strcmp(key, "eps") == 0) EM_TRY(em_json_want_num(sec, key, v, &o->eps, err));
    else if (strcmp(key, "amsgrad") == 0) EM_TRY(em_json_want_bool(sec, key, v, &o->amsgrad, err));
    else
      return unknown_key(sec, key, "kind, lr, momentum, dampening, weight_decay, nesterov, "
                         "beta1, beta2, eps, amsgrad", err);
  }
  return EM_OK;
}

static em_status schedule_from_json(em_schedule *s, const json_t *j, em_error *err) {
  const char *sec = "config.schedule";
  if (!json_is_object(j))
    return em_error_set(err, EM_ERR_INVALID, "\"config\".\"schedule\" must be an object, not %s",
                        em_json_kind(j));
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)j, key, v) {
    if (strcmp(key, "type") == 0) {
      if (!json_is_string(v))
        return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"type\" must be a string, not %s",
                            sec, em_json_kind(v));
      EM_TRY(em_schedule_parse_name(json_string_value(v), &s->kind, err));
    } else if (strcmp(key, "lr") == 0) EM_TRY(em_json_want_num(sec, key, v, &s->lr, err));
    else if (strcmp(key, "step_size") == 0) EM_TRY(want_i64(sec, key, v, &s->step_size, err));
    else if (strcmp(key, "gamma") == 0) EM_TRY(em_json_want_num(sec, key, v, &s->gamma, err));
    else if (strcmp(key, "total_steps") == 0) EM_TRY(want_i64(sec, key, v, &s->total_steps, err));
    else if (strcmp(key, "eta_min") == 0) EM_TRY(em_json_want_num(sec, key, v, &s->eta_min, err));
    else if (strcmp(key, "warmup_steps") == 0)
      EM_TRY(want_i64(sec, key, v, &s->warmup_steps, err));
    else if (strcmp(key, "warmup_start_factor") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &s->warmup_start_factor, err));
    else if (strcmp(key, "pct_start") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &s->pct_start, err));
    else if (strcmp(key, "div_factor") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &s->div_factor, err));
    else if (strcmp(key, "final_div_factor") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &s->final_div_factor, err));
    else if (strcmp(key, "cycle_momentum") == 0)
      EM_TRY(em_json_want_bool(sec, key, v, &s->cycle_momentum, err));
    else if (strcmp(key, "base_momentum") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &s->base_momentum, err));
    else if (strcmp(key, "max_momentum") == 0)
      EM_TRY(em_json_want_num(sec, key, v, &s->max_momentum, err));
    else
      return unknown_key(sec, key, "type, lr, step_size, gamma, total_steps, eta_min, "
                         "warmup_steps, warmup_start_factor, pct_start, div_factor, "
                         "final_div_factor, cycle_momentum, base_momentum, max_momentum", err);
  }
  return EM_OK;
}

/* One top-level key into c. */
static em_status config_field(em_train_config *c, const char *key, const json_t *v,
                              em_error *err) {
  const char *sec = "config";
  int k;
  if (strcmp(key, "dataset") == 0)
    return em_json_want_str(sec, key, v, c->dataset, sizeof c->dataset, err);
  if (strcmp(key, "data_dir") == 0)
    return em_json_want_str(sec, key, v, c->data_dir, sizeof c->data_dir, err);
  if (strcmp(key, "batch_size") == 0) return want_c_int(sec, key, v, &c->batch_size, err);
  if (strcmp(key, "epochs") == 0) return want_c_int(sec, key, v, &c->epochs, err);
  if (strcmp(key, "limit") == 0) return want_i64(sec, key, v, &c->limit, err);
  if (strcmp(key, "shuffle") == 0) return em_json_want_bool(sec, key, v, &c->shuffle, err);
  if (strcmp(key, "drop_last") == 0) return em_json_want_bool(sec, key, v, &c->drop_last, err);
  if (strcmp(key, "workers") == 0) return want_c_int(sec, key, v, &c->workers, err);
  if (strcmp(key, "optim") == 0) return optim_from_json(&c->optim, v, err);
  if (strcmp(key, "schedule") == 0) return schedule_from_json(&c->schedule, v, err);
  if (strcmp(key, "clip_grad_norm") == 0)
    return em_json_want_num(sec, key, v, &c->clip_grad_norm, err);
  if (strcmp(key, "accumulate") == 0) return want_c_int(sec, key, v, &c->accumulate, err);
  if (strcmp(key, "loss") == 0) {
    EM_TRY(want_name(sec, key, v, loss_names, 2, &k, err));
    c->loss = (em_loss_kind)k;
    return EM_OK;
  }
  if (strcmp(key, "label_smoothing") == 0)
    return em_json_want_num(sec, key, v, &c->label_smoothing, err);
  if (strcmp(key, "seed") == 0) return want_seed(v, &c->seed, err);
  if (strcmp(key, "threads") == 0) return want_c_int(sec, key, v, &c->threads, err);
  if (strcmp(key, "eval_every") == 0) return want_c_int(sec, key, v, &c->eval_every, err);
  if (strcmp(key, "checkpoint_every") == 0)
    return want_i64(sec, key, v, &c->checkpoint_every, err);
  if (strcmp(key, "checkpoint_dir") == 0)
    return em_json_want_str(sec, key, v, c->checkpoint_dir, sizeof c->checkpoint_dir, err);
  if (strcmp(key, "on_divergence") == 0) {
    EM_TRY(want_name(sec, key, v, divergence_names, 3, &k, err));
    c->on_divergence = (em_divergence_policy)k;
    return EM_OK;
  }
  if (strcmp(key, "divergence_lr_factor") == 0)
    return em_json_want_num(sec, key, v, &c->divergence_lr_factor, err);
  if (strcmp(key, "divergence_spike_factor") == 0)
    return em_json_want_num(sec, key, v, &c->divergence_spike_factor, err);
  if (strcmp(key, "max_rollbacks") == 0) return want_c_int(sec, key, v, &c->max_rollbacks, err);
  if (strcmp(key, "amp_scaler") == 0) return em_json_want_bool(sec, key, v, &c->amp_scaler, err);
  if (strcmp(key, "amp_init_scale") == 0)
    return em_json_want_num(sec, key, v, &c->amp_init_scale, err);
  if (strcmp(key, "amp") == 0) {
    char name[16];
    EM_TRY(em_json_want_str(sec, key, v, name, sizeof name, err));
    return em_amp_mode_parse(name, &c->amp, err);
  }
  if (strcmp(key, "device") == 0) {
    char name[32];
    EM_TRY(em_json_want_str(sec, key, v, name, sizeof name, err));
    return em_device_parse(name, &c->device, err);
  }
  if (strcmp(key, "auto_batch") == 0) return em_json_want_bool(sec, key, v, &c->auto_batch, err);
  return unknown_key(sec, key, "dataset, data_dir, batch_size, epochs, limit, shuffle, "
                     "drop_last, workers, optim, schedule, clip_grad_norm, accumulate, loss, "
                     "label_smoothing, seed, threads, eval_every, checkpoint_every, "
                     "checkpoint_dir, on_divergence, divergence_lr_factor, "
                     "divergence_spike_factor, max_rollbacks, amp, amp_scaler, amp_init_scale, device, "
                     "auto_batch",
                     err);
}

em_status em_train_config_from_json(em_train_config *c, const char *json, em_error *err) {
  if (!json) return em_error_set(err, EM_ERR_INVALID, "config JSON: no text given");
  json_error_t jerr;
  json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return em_error_set(err, EM_ERR_INVALID, "config JSON is not valid JSON: %s (line %d, "
                        "column %d)", jerr.text, jerr.line, jerr.column);
  em_status st = EM_OK;
  if (!json_is_object(root))
    st = em_error_set(err, EM_ERR_INVALID, "config JSON must be an object, not %s",
                      em_json_kind(root));
  /* Into a copy, so that c is untouched on an error. */
  em_train_config tmp;
  em_train_config_defaults(&tmp);
  const char *key;
  json_t *v;
  if (st == EM_OK) json_object_foreach(root, key, v) {
      if ((st = config_field(&tmp, key, v, err)) != EM_OK) break;
    }
  json_decref(root);
  tmp.schedule.lr = tmp.optim.lr; /* see schedule_to_json */
  if (st == EM_OK) *c = tmp;
  return st;
}
