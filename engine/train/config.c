/* config.c: the training configuration: defaults, the spec's "training"
 * and "loss" sections (unknown keys are errors), and range checks, all
 * read off the settings table (settings.c). */
#include "train-private.h"
#include "em-device.h"
#include "em-plugin.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void em_train_config_defaults(em_train_config *c) {
  memset(c, 0, sizeof *c);
  em_settings_apply_defaults(c);
  /* the rows whose defaults are their owners': the optimiser's, the
   * schedule's and the machine's */
  em_optim_config_defaults(&c->optim, EM_OPTIM_SGD);
  em_schedule_init(&c->schedule, EM_SCHED_CONSTANT, c->optim.lr);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  const em_setting *threads = em_setting_by_key(NULL, "threads");
  c->threads = n < 1 ? 1 : n > threads->max ? (int)threads->max : (int)n;
}

#define TRY EM_TRY

static em_status unknown_key(const char *section, const char *key, em_error *err) {
  char known[1024];
  em_settings_spec_keys(section, known, sizeof known);
  return em_error_set(err, EM_ERR_INVALID, "\"%s\": unknown key \"%s\"; known: %s", section,
                      key, known);
}

/* The spec's "schedule": a name, or an object of the schedule's keys with
 * the name as "type". */
static em_status parse_schedule(em_train_config *c, const json_t *v, em_error *err) {
  const em_setting *kind = em_setting_by_spec("training", "schedule");
  if (json_is_string(v)) return em_setting_from_json(kind, "training", "schedule", v, true, c, err);
  if (!json_is_object(v))
    return em_error_set(err, EM_ERR_INVALID,
                        "\"training\".\"schedule\" must be a name or an object, not %s",
                        em_json_kind(v));
  const char *key;
  json_t *x;
  bool typed = false;
  json_object_foreach((json_t *)v, key, x) {
    const em_setting *s = strcmp(key, "type") == 0 ? kind : em_setting_by_spec("schedule", key);
    if (!s) return unknown_key("schedule", key, err);
    TRY(em_setting_from_json(s, "schedule", key, x, true, c, err));
    typed = typed || s == kind;
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
  int n;
  const em_setting *rows = em_settings(&n);
  for (int i = 0; i < n; i++) {
    const json_t *v = (rows[i].flags & EM_SETTING_FIRST) ? json_object_get(tr, rows[i].spec_key)
                                                         : NULL;
    if (v) TRY(em_setting_from_json(&rows[i], sec, rows[i].spec_key, v, true, c, err));
  }
  const json_t *sched = NULL;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)tr, key, v) {
    const em_setting *s = em_setting_by_spec(sec, key);
    if (!s) return unknown_key(sec, key, err);
    if (s->flags & EM_SETTING_FIRST) continue;
    if (strcmp(key, "schedule") == 0) sched = v; /* after the lr, which it starts from */
    else TRY(em_setting_from_json(s, sec, key, v, true, c, err));
  }
  em_schedule_init(&c->schedule, EM_SCHED_CONSTANT, c->optim.lr);
  if (sched) TRY(parse_schedule(c, sched, err));
  return EM_OK;
}

static em_status parse_loss(em_train_config *c, const json_t *lo, em_error *err) {
  if (!json_is_object(lo))
    return em_error_set(err, EM_ERR_INVALID, "\"loss\" must be an object, not %s",
                        em_json_kind(lo));
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)lo, key, v) {
    const em_setting *s = em_setting_by_spec("loss", key);
    if (!s) return unknown_key("loss", key, err);
    TRY(em_setting_from_json(s, "loss", key, v, true, c, err));
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

bool em_train_early_stop(const em_train_config *c, char *metric, size_t cap, bool *maximize,
                         int *patience) {
  const char *colon = strchr(c->early_stop, ':');
  if (!c->early_stop[0] || !colon) return false;
  size_t n = (size_t)(colon - c->early_stop);
  char name[32];
  if (n >= sizeof name) return false;
  memcpy(name, c->early_stop, n);
  name[n] = '\0';
  char *end;
  long k = strtol(colon + 1, &end, 10);
  bool loss = !strcmp(name, "test_loss"), acc = !strcmp(name, "test_accuracy");
  if ((!loss && !acc) || end == colon + 1 || *end || k < 1 || k > 1000000) return false;
  if (metric) snprintf(metric, cap, "%s", name);
  if (maximize) *maximize = acc;
  if (patience) *patience = (int)k;
  return true;
}

em_status em_train_config_validate(const em_train_config *c, em_error *err) {
  TRY(em_settings_check_ranges(c, err)); /* each setting alone; then the rules between them */
  if (c->early_stop[0] && !em_train_early_stop(c, NULL, 0, NULL, NULL))
    return em_error_set(err, EM_ERR_INVALID,
                        "early_stop is '%s': it takes METRIC:N, METRIC test_loss or "
                        "test_accuracy and N the evaluations without improvement to wait (e.g. "
                        "test_loss:3)", c->early_stop);
  if (c->amp == EM_AMP_F16 && em_device_is_cpu(c->device))
    return em_error_set(err, EM_ERR_INVALID,
                        "amp f16 is a GPU mode (f16 compute with the gradient scaler) and this "
                        "run is on the CPU: use --amp bf16 (autocast on AMX or AVX512-BF16) or "
                        "off");
  if (c->amp_scaler && c->amp == EM_AMP_OFF)
    return em_error_set(err, EM_ERR_INVALID,
                        "the loss scaler (amp_scaler) works with mixed precision: give --amp "
                        "bf16 as well, or leave the scaler off");
  if (c->checkpoint_every > 0 && !c->checkpoint_dir[0])
    return em_error_set(err, EM_ERR_INVALID,
                        "checkpoint_every is %lld but no checkpoint folder is set: give one "
                        "(--checkpoint-dir) or set checkpoint_every to 0",
                        (long long)c->checkpoint_every);
  if (!(c->divergence_spike_factor == 0 ||
        (c->divergence_spike_factor > 1 && isfinite(c->divergence_spike_factor))))
    return em_error_set(err, EM_ERR_INVALID,
                        "divergence_spike_factor must be above 1 (10: a gradient norm 10x the "
                        "recent largest is a divergence) or 0 (off), got %g",
                        c->divergence_spike_factor);
  TRY(em_optim_config_check(&c->optim, err));
  em_schedule s = em_train_config_schedule(c);
  /* total_steps 0: the run's own length, known at run time (em_trainer_run
   * checks it then against warmup_steps) */
  if (s.total_steps == 0) s.total_steps = (s.warmup_steps > 0 ? s.warmup_steps : 0) + 1;
  return em_schedule_check(&s, err);
}

em_schedule em_train_config_schedule(const em_train_config *c) {
  em_schedule s = c->schedule;
  s.lr = c->optim.lr;
  return s;
}
