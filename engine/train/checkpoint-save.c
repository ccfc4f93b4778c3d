/* checkpoint-save.c: em_trainer_save_checkpoint, the trainer's state
 * into one safetensors file (the format: checkpoint-format.c).
 *
 * A checkpoint whose metadata (position, RNG, watchdog, spec, config and
 * the checksum over every tensor) is the one this trainer wrote last is
 * the same state: the file is then a hard link to that one instead of a
 * second copy (a finished run's "final" checkpoint and its last "eval"
 * one). Where links cannot be made, it is written out as usual. */
#include "train-private.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"

enum {
  M_FORMAT, M_VERSION, M_EPOCH, M_BATCH, M_STEP, M_RNG, M_LR_SCALE, M_ROLLBACKS, M_LOSS_SUM,
  M_NORMS, M_NORMS_SEEN, M_SPEC, M_CONFIG, M_CHECKSUM,
  M_AMP_SCALE, M_AMP_TRACKER, M_AMP_SKIPPED, /* only with the loss scaler */
  M_ES_BEST, M_ES_SINCE,                     /* only with early_stop, once it evaluated */
  M_COUNT
};
static const char *const meta_keys[M_COUNT] = {
  "format", "version", "epoch", "batch", "step", "rng", "lr_scale", "rollbacks", "loss_sum",
  "grad_norms", "grad_norms_seen", "spec", "config", "checksum",
  "amp_scale", "amp_growth_tracker", "amp_skipped",
  "early_stop_best", "early_stop_since",
};

/* The watchdog's remembered norms, oldest first, comma-separated. */
static char *norms_text(const em_watchdog *w) {
  size_t cap = (size_t)EM_WATCHDOG_WINDOW * 32 + 1, len = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  s[0] = '\0';
  int first = w->n < EM_WATCHDOG_WINDOW ? 0 : w->head;
  for (int i = 0; i < w->n && len < cap; i++)
    len += (size_t)snprintf(s + len, cap - len, "%s%.17g", i ? "," : "",
                            w->norms[(first + i) % EM_WATCHDOG_WINDOW]);
  return s;
}

/* The metadata as one string, entries in order ("key=value\x1e"). */
static char *meta_text(const em_ckpt_meta *meta, int n, const char *checksum) {
  size_t len = strlen(checksum) + 2;
  for (int k = 0; k < n; k++) len += strlen(meta[k].key) + strlen(meta[k].value) + 2;
  char *s = malloc(len), *p = s;
  if (!s) return NULL;
  for (int k = 0; k < n; k++) p += sprintf(p, "%s=%s\x1e", meta[k].key, meta[k].value);
  sprintf(p, "%s\x1e", checksum);
  return s;
}

em_status em_trainer_save_checkpoint(em_trainer *t, const char *path, em_error *err) {
  if (!path || !path[0]) return em_error_set(err, EM_ERR_INVALID, "checkpoint: no file name given");
  if (t->micro != 0)
    return em_error_set(err, EM_ERR_INVALID,
                        "cannot write checkpoint '%s' now: the trainer is in the middle of "
                        "accumulating gradients (%d of %d micro-batches); write it after an "
                        "optimiser step", path, t->micro, t->cfg.accumulate);
  int n_model = em_model_tensor_count(t->model), n_opt = em_optimizer_state_count(t->opt);
  int n = n_model + n_opt;
  em_named_tensor *ts = calloc((size_t)n, sizeof *ts);
  em_ckpt_tensor *ck = calloc((size_t)n, sizeof *ck);
  char **opt_names = calloc((size_t)(n_opt ? n_opt : 1), sizeof *opt_names);
  bool *owned = calloc((size_t)n, sizeof *owned); /* ts[i].t is a host copy to free */
  char *vals[M_COUNT] = {0};
  em_error e = {0};
  em_status st = EM_OK;
  if (!ts || !ck || !opt_names || !owned) {
    st = em_error_set(&e, EM_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
    goto out;
  }
  /* tensors on the training device are written from host copies */
  for (int i = 0; i < n; i++) {
    const em_tensor *live = i < n_model ? em_model_tensor(t->model, i, &ts[i].name)
                                        : em_optimizer_state(t->opt, i - n_model, NULL);
    if (!(ts[i].t = em_train_host_copy(live, &owned[i], &e))) {
      st = em_error_prefix(&e, "writing checkpoint '%s'", path);
      goto out;
    }
  }
  for (int i = 0; i < n_opt; i++) {
    const char *name;
    em_optimizer_state(t->opt, i, &name);
    size_t len = strlen(name) + 7;
    if (!(opt_names[i] = malloc(len))) {
      st = em_error_set(&e, EM_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
      goto out;
    }
    snprintf(opt_names[i], len, "optim/%s", name);
    ts[n_model + i].name = opt_names[i];
  }

  char buf[128];
  const em_spec *spec = em_model_spec(t->model);
  vals[M_FORMAT] = strdup(EM_CKPT_FORMAT);
  vals[M_VERSION] = strdup(EM_CKPT_VERSION);
  snprintf(buf, sizeof buf, "%" PRId64, t->pos.epoch);
  vals[M_EPOCH] = strdup(buf);
  snprintf(buf, sizeof buf, "%" PRId64, t->pos.batch);
  vals[M_BATCH] = strdup(buf);
  snprintf(buf, sizeof buf, "%" PRId64, em_optimizer_steps(t->opt));
  vals[M_STEP] = strdup(buf);
  snprintf(buf, sizeof buf, "%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64,
           t->rng.s[0], t->rng.s[1], t->rng.s[2], t->rng.s[3]);
  vals[M_RNG] = strdup(buf);
  snprintf(buf, sizeof buf, "%.17g", t->lr_scale);
  vals[M_LR_SCALE] = strdup(buf);
  snprintf(buf, sizeof buf, "%d", t->rollbacks);
  vals[M_ROLLBACKS] = strdup(buf);
  snprintf(buf, sizeof buf, "%.17g", t->pos.loss_sum);
  vals[M_LOSS_SUM] = strdup(buf);
  vals[M_NORMS] = norms_text(&t->watch);
  snprintf(buf, sizeof buf, "%" PRId64, t->watch.seen);
  vals[M_NORMS_SEEN] = strdup(buf);
  vals[M_SPEC] = em_checkpoint_spec_text(spec);
  vals[M_CONFIG] = em_train_config_to_json(&t->cfg);
  /* the loss scaler's state, written only when it is on */
  bool with_es = t->cfg.early_stop[0] && t->es_seen;
  if (t->scaler.enabled) {
    snprintf(buf, sizeof buf, "%.9g", (double)t->scaler.scale);
    vals[M_AMP_SCALE] = strdup(buf);
    snprintf(buf, sizeof buf, "%d", t->scaler.growth_tracker);
    vals[M_AMP_TRACKER] = strdup(buf);
    snprintf(buf, sizeof buf, "%" PRId64, t->scaler.skipped);
    vals[M_AMP_SKIPPED] = strdup(buf);
    for (int k = M_AMP_SCALE; k <= M_AMP_SKIPPED; k++)
      if (!vals[k]) {
        st = em_error_set(&e, EM_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto out;
      }
  }
  if (with_es) {
    snprintf(buf, sizeof buf, "%.17g", t->es_best);
    vals[M_ES_BEST] = strdup(buf);
    snprintf(buf, sizeof buf, "%" PRId64, t->es_since);
    vals[M_ES_SINCE] = strdup(buf);
    if (!vals[M_ES_BEST] || !vals[M_ES_SINCE]) {
      st = em_error_set(&e, EM_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
      goto out;
    }
  }
  /* the entries written: every one up to the checksum, then the optional
   * groups that are on (keys[] and out[] point into meta_keys and vals) */
  const char *keys[M_COUNT];
  int idx[M_COUNT], n_meta = 0;
  for (int k = 0; k < M_COUNT; k++)
    if (k <= M_CHECKSUM || (k <= M_AMP_SKIPPED && t->scaler.enabled) ||
        (k > M_AMP_SKIPPED && with_es)) {
      keys[n_meta] = meta_keys[k];
      idx[n_meta++] = k;
    }
  for (int k = 0; k < M_CHECKSUM; k++)
    if (!vals[k]) {
      st = em_error_set(&e, k == M_CONFIG ? EM_ERR_INVALID : EM_ERR_NOMEM,
                        k == M_CONFIG ? "checkpoint '%s': the config holds a number that is not "
                                        "finite" : "out of memory writing checkpoint '%s'",
                        path);
      goto out;
    }

  em_ckpt_meta meta[M_COUNT - 1];
  int n_sum = 0; /* every entry but the checksum */
  for (int j = 0; j < n_meta; j++)
    if (idx[j] != M_CHECKSUM) meta[n_sum++] = (em_ckpt_meta){keys[j], vals[idx[j]]};
  for (int i = 0; i < n; i++) ck[i] = (em_ckpt_tensor){ts[i].name, ts[i].t};
  snprintf(buf, sizeof buf, "crc32:%08" PRIx32, em_checkpoint_checksum(ck, n, meta, n_sum));
  if (!(vals[M_CHECKSUM] = strdup(buf))) {
    st = em_error_set(&e, EM_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
    goto out;
  }
  char *text = meta_text(meta, n_sum, vals[M_CHECKSUM]);
  if (text && t->last_ckpt_meta && t->last_ckpt[0] && strcmp(text, t->last_ckpt_meta) == 0 &&
      strcmp(t->last_ckpt, path) != 0 && em_link_over(t->last_ckpt, path, NULL) == EM_OK)
    st = EM_OK; /* the same state as the last one written: one file, two names */
  else {
    const char *out_vals[M_COUNT];
    for (int j = 0; j < n_meta; j++) out_vals[j] = vals[idx[j]];
    st = em_safetensors_save(path, n, ts, n_meta, keys, out_vals, &e);
  }
  free(t->last_ckpt_meta);
  t->last_ckpt_meta = st == EM_OK ? text : NULL;
  if (st != EM_OK) free(text);
  if (st == EM_OK) {
    /* Absolute, so that a later chdir does not lose it for rollbacks. */
    char *abs = realpath(path, NULL);
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", abs ? abs : path);
    t->last_ckpt_step = t->pos.step;
    free(abs);
  }
out:
  for (int k = 0; k < M_COUNT; k++) free(vals[k]);
  for (int i = 0; i < n && owned; i++)
    if (owned[i]) em_tensor_free((em_tensor *)ts[i].t);
  free(owned);
  for (int i = 0; i < n_opt && opt_names; i++) free(opt_names[i]);
  free(opt_names);
  free(ck);
  free(ts);
  if (st != EM_OK && err) *err = e;
  return st;
}

