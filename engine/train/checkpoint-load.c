/* checkpoint-load.c: a checkpoint back into a trainer. Everything is read
 * into temporaries and checked (format, version, checksum, tensors'
 * names, shapes and dtypes, the position, the spec) before the trainer
 * changes, so a bad file leaves it as it was. */
#include "train-private.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"

/* Every tensor of the file, read into its own persistent tensor. */
typedef struct {
  int n;
  em_ckpt_tensor *e;  /* sorted by name after the checksum */
  bool *used;
} ckpt_tensors;

static void ckpt_tensors_free(ckpt_tensors *c) {
  for (int i = 0; i < c->n; i++) {
    em_tensor_free((em_tensor *)c->e[i].t);
    free((char *)c->e[i].name);
  }
  free(c->e);
  free(c->used);
}

static em_status read_all(em_safetensors *f, const char *path, ckpt_tensors *c, em_error *err) {
  int n = em_safetensors_count(f);
  c->e = calloc((size_t)(n ? n : 1), sizeof *c->e);
  c->used = calloc((size_t)(n ? n : 1), sizeof *c->used);
  if (!c->e || !c->used)
    return em_error_set(err, EM_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
  for (int i = 0; i < n; i++) {
    const char *name = em_safetensors_name(f, i);
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    EM_TRY(em_safetensors_info(f, name, &dt, &nd, shape, err));
    em_tensor *t = em_tensor_new(dt, nd, shape, err);
    if (!t) return err ? err->status : EM_ERR_NOMEM;
    c->e[i].t = t;
    c->e[i].name = strdup(name);
    c->n++;
    if (!c->e[i].name)
      return em_error_set(err, EM_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
    EM_TRY(em_safetensors_read(f, name, t, err));
  }
  return EM_OK;
}

static em_tensor *find_tensor(ckpt_tensors *c, const char *name) {
  em_ckpt_tensor key = {name, NULL};
  em_ckpt_tensor *hit = bsearch(&key, c->e, (size_t)c->n, sizeof *c->e, em_ckpt_tensor_cmp);
  if (!hit) return NULL;
  c->used[hit - c->e] = true;
  return (em_tensor *)hit->t;
}

/* The saved tensor for name, with the dtype and shape of live. */
static em_status match_tensor(ckpt_tensors *c, const char *path, const char *name,
                              const em_tensor *live, const char *whose, em_tensor **out,
                              em_error *err) {
  em_tensor *s = find_tensor(c, name);
  if (!s)
    return em_error_set(err, EM_ERR_INVALID,
                        "checkpoint '%s' has no tensor '%s', which %s has; was it written from "
                        "another spec or optimiser setting?", path, name, whose);
  if (s->dtype != live->dtype)
    return em_error_set(err, EM_ERR_INVALID, "checkpoint '%s': tensor '%s' is %s, %s expects %s",
                        path, name, em_dtype_name(s->dtype), whose, em_dtype_name(live->dtype));
  if (!em_tensor_same_shape(s, live)) {
    char a[160], b[160];
    return em_error_set(err, EM_ERR_INVALID,
                        "checkpoint '%s': tensor '%s' has shape %s, %s expects %s", path, name,
                        em_shape_str(s->ndim, s->shape, a, sizeof a), whose,
                        em_shape_str(live->ndim, live->shape, b, sizeof b));
  }
  *out = s;
  return EM_OK;
}

/* Typed metadata. */
static em_status meta_get(em_safetensors *f, const char *path, const char *key, const char **out,
                          em_error *err) {
  *out = em_safetensors_meta(f, key);
  if (!*out)
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s' has no \"%s\" in its metadata",
                        path, key);
  return EM_OK;
}

static em_status meta_i64(em_safetensors *f, const char *path, const char *key, int64_t *out,
                          em_error *err) {
  const char *s;
  EM_TRY(meta_get(f, path, key, &s, err));
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!s[0] || *end || errno || v < 0)
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': \"%s\" is '%.40s', not a whole "
                        "number >= 0", path, key, s);
  *out = v;
  return EM_OK;
}

static em_status parse_double(const char *path, const char *key, const char *s, double *out,
                              const char **end_out, em_error *err) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !isfinite(v) || (!end_out && *end))
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': \"%s\" holds '%.40s', not a "
                        "finite number", path, key, s);
  *out = v;
  if (end_out) *end_out = end;
  return EM_OK;
}

static em_status meta_double(em_safetensors *f, const char *path, const char *key, double *out,
                             em_error *err) {
  const char *s;
  EM_TRY(meta_get(f, path, key, &s, err));
  return parse_double(path, key, s, out, NULL, err);
}

/* What a checkpoint's metadata says about the run. */
typedef struct {
  em_train_position pos;
  em_rng rng;
  double lr_scale;
  int64_t rollbacks;
  em_watchdog watch;
  bool has_es; /* early_stop's state is there */
  double es_best;
  int64_t es_since;
  bool has_scaler; /* the loss scaler's state (amp_*) is there */
  double amp_scale;
  int64_t amp_tracker, amp_skipped;
} ckpt_state;

static em_status parse_state(em_safetensors *f, const char *path, ckpt_state *s,
                             double spike_factor, em_error *err) {
  EM_TRY(meta_i64(f, path, "epoch", &s->pos.epoch, err));
  EM_TRY(meta_i64(f, path, "batch", &s->pos.batch, err));
  EM_TRY(meta_i64(f, path, "step", &s->pos.step, err));
  EM_TRY(meta_double(f, path, "loss_sum", &s->pos.loss_sum, err));
  EM_TRY(meta_double(f, path, "lr_scale", &s->lr_scale, err));
  if (!(s->lr_scale > 0))
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': \"lr_scale\" must be above 0",
                        path);
  EM_TRY(meta_i64(f, path, "rollbacks", &s->rollbacks, err));
  if (s->rollbacks > INT_MAX)
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': \"rollbacks\" is absurd", path);
  const char *r;
  EM_TRY(meta_get(f, path, "rng", &r, err));
  int used = 0;
  if (sscanf(r, "%16" SCNx64 ",%16" SCNx64 ",%16" SCNx64 ",%16" SCNx64 "%n", &s->rng.s[0],
             &s->rng.s[1], &s->rng.s[2], &s->rng.s[3], &used) != 4 ||
      r[used] != '\0' || (s->rng.s[0] | s->rng.s[1] | s->rng.s[2] | s->rng.s[3]) == 0)
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': \"rng\" is not 4 hex numbers "
                        "(the dropout generator's state)", path);
  /* The watchdog's norms, oldest first, pushed back in the same order. */
  em_watchdog_init(&s->watch, 0);
  const char *norms;
  EM_TRY(meta_get(f, path, "grad_norms", &norms, err));
  while (*norms) {
    double v = 0;
    const char *end = norms;
    EM_TRY(parse_double(path, "grad_norms", norms, &v, &end, err));
    if ((*end != ',' && *end != '\0') || s->watch.n >= EM_WATCHDOG_WINDOW)
      return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': \"grad_norms\" is not a list "
                          "of at most %d numbers", path, EM_WATCHDOG_WINDOW);
    em_watchdog_check_norm(&s->watch, v);
    norms = *end ? end + 1 : end;
  }
  int64_t seen;
  EM_TRY(meta_i64(f, path, "grad_norms_seen", &seen, err));
  /* The watchdog checks one norm per optimiser step and keeps the last
   * EM_WATCHDOG_WINDOW (a rollback starts it afresh): so it has seen at
   * most "step" norms, and lists all of them up to the window. */
  int64_t listed = seen < EM_WATCHDOG_WINDOW ? seen : EM_WATCHDOG_WINDOW;
  if (seen > s->pos.step || s->watch.n != listed)
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s' is inconsistent: \"grad_norms_seen\" "
                        "is %lld with %d norms listed at step %lld (it counts one norm per "
                        "optimiser step, and lists the last %d)", path, (long long)seen,
                        s->watch.n, (long long)s->pos.step, EM_WATCHDOG_WINDOW);
  s->watch.seen = seen;
  s->watch.spike_factor = spike_factor;
  s->has_es = em_safetensors_meta(f, "early_stop_best") != NULL;
  if (s->has_es) {
    EM_TRY(meta_double(f, path, "early_stop_best", &s->es_best, err));
    EM_TRY(meta_i64(f, path, "early_stop_since", &s->es_since, err));
    if (s->es_since < 0)
      return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': \"early_stop_since\" is "
                          "negative", path);
  }
  s->has_scaler = em_safetensors_meta(f, "amp_scale") != NULL;
  if (s->has_scaler) {
    EM_TRY(meta_double(f, path, "amp_scale", &s->amp_scale, err));
    EM_TRY(meta_i64(f, path, "amp_growth_tracker", &s->amp_tracker, err));
    EM_TRY(meta_i64(f, path, "amp_skipped", &s->amp_skipped, err));
    if (!(s->amp_scale >= 0 && s->amp_scale <= 3.5e38) || s->amp_tracker < 0 ||
        s->amp_tracker > INT_MAX || s->amp_skipped < 0)
      return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s': the loss scaler's state "
                          "(amp_scale, amp_growth_tracker, amp_skipped) is out of range", path);
  }
  return EM_OK;
}

/* A step count among the optimiser's state against the position's: the
 * optimiser's own is the position's, and a parameter's (Adam's bias
 * correction) counts the steps that updated it, at most the run's. */
static em_status check_step_count(const char *name, const em_tensor *v, const char *path,
                                  int64_t step, em_error *err) {
  size_t len = strlen(name);
  if (v->dtype != EM_DTYPE_I64 || em_tensor_numel(v) != 1 || len <= 5 ||
      strcmp(name + len - 5, ".step") != 0)
    return EM_OK;
  int64_t got = *em_i64(v);
  if (strcmp(name, "optim/optimizer.step") == 0 && got != step)
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s' is inconsistent: \"step\" is %lld "
                        "but the optimiser state says %lld", path, (long long)step,
                        (long long)got);
  if (got < 0 || got > step)
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s' is inconsistent: '%s' is %lld "
                        "but \"step\" is %lld", path, name, (long long)got, (long long)step);
  return EM_OK;
}

static em_status check_step_counts(ckpt_tensors *c, const char *path, int64_t step,
                                   em_error *err) {
  for (int i = 0; i < c->n; i++)
    EM_TRY(check_step_count(c->e[i].name, c->e[i].t, path, step, err));
  return EM_OK;
}

/* The name of the spec in a checkpoint's "spec" metadata, for messages. */
static void saved_spec_name(em_safetensors *f, char *out, size_t cap) {
  snprintf(out, cap, "?");
  const char *text = em_safetensors_meta(f, "spec");
  json_t *doc = text ? json_loads(text, 0, NULL) : NULL;
  json_t *name = doc ? json_object_get(doc, "name") : NULL;
  if (json_is_string(name)) snprintf(out, cap, "%s", json_string_value(name));
  json_decref(doc);
}

static em_status check_format(em_safetensors *f, const char *path, em_error *err) {
  const char *fmt = em_safetensors_meta(f, "format"), *ver = em_safetensors_meta(f, "version");
  if (!fmt || strcmp(fmt, EM_CKPT_FORMAT) != 0)
    return em_error_set(err, EM_ERR_FORMAT,
                        "'%s' is not an Ember training checkpoint (its metadata has no format "
                        "\"" EM_CKPT_FORMAT "\"): a weights-only file holds no optimiser state "
                        "or position to resume from", path);
  if (!ver || strcmp(ver, EM_CKPT_VERSION) != 0)
    return em_error_set(err, EM_ERR_FORMAT,
                        "checkpoint '%s' has version \"%.20s\"; this Ember reads version "
                        EM_CKPT_VERSION ": use the Ember that wrote it", path,
                        ver ? ver : "(none)");
  return EM_OK;
}

/* The checksum the file's metadata carries. */
static em_status wanted_checksum(em_safetensors *f, const char *path, uint32_t *want,
                                 em_error *err) {
  const char *text = em_safetensors_meta(f, "checksum");
  unsigned int w;
  int used = 0;
  if (!text || sscanf(text, "crc32:%8x%n", &w, &used) != 1 || text[used] != '\0')
    return em_error_set(err, EM_ERR_FORMAT, "checkpoint '%s' has no valid \"checksum\" in its "
                        "metadata", path);
  *want = (uint32_t)w;
  return EM_OK;
}

/* crc, the tensors' part of the checksum, finished with the file's
 * metadata and held against want, what the file carries. */
static em_status finish_checksum(em_safetensors *f, const char *path, uint32_t want,
                                 uint32_t crc, em_error *err) {
  int nm = em_safetensors_meta_count(f);
  em_ckpt_meta *meta = calloc((size_t)(nm ? nm : 1), sizeof *meta);
  if (!meta) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  for (int i = 0; i < nm; i++) {
    meta[i].key = em_safetensors_meta_key(f, i);
    meta[i].value = em_safetensors_meta(f, meta[i].key);
  }
  uint32_t got = em_checkpoint_crc_meta(crc, meta, nm);
  free(meta);
  if (got != want)
    return em_error_set(err, EM_ERR_FORMAT,
                        "checkpoint '%s' is corrupt: its contents do not match the checksum "
                        "written with it (crc32 %08" PRIx32 ", expected %08" PRIx32 "); use "
                        "another checkpoint", path, got, want);
  return EM_OK;
}

/* The checksum the file carries against its contents (all in c). */
static em_status check_checksum(em_safetensors *f, const char *path, ckpt_tensors *c,
                                em_error *err) {
  uint32_t want = 0;
  EM_TRY(wanted_checksum(f, path, &want, err)); /* before reading through the tensors */
  qsort(c->e, (size_t)c->n, sizeof *c->e, em_ckpt_tensor_cmp);
  uint32_t crc = em_checkpoint_crc_start();
  for (int i = 0; i < c->n; i++) crc = em_checkpoint_crc_tensor(crc, c->e[i].name, c->e[i].t);
  return finish_checksum(f, path, want, crc, err);
}

/* Reads, checks and applies path to t. Nothing of t changes unless every
 * check passes. */
static em_status restore(em_trainer *t, const char *path, bool keep_scale, em_error *err) {
  em_safetensors *f = em_safetensors_open(path, err);
  if (!f) return err->status;
  ckpt_tensors c = {0};
  int n_model = em_model_tensor_count(t->model), n_opt = em_optimizer_state_count(t->opt);
  em_tensor **src = calloc((size_t)(n_model + n_opt), sizeof *src);
  em_status st = src ? EM_OK : em_error_set(err, EM_ERR_NOMEM, "out of memory");
  if (st == EM_OK) st = check_format(f, path, err);
  if (st == EM_OK) st = read_all(f, path, &c, err);
  if (st == EM_OK) st = check_checksum(f, path, &c, err);
  const char *whose = "the model";
  for (int i = 0; i < n_model && st == EM_OK; i++) {
    const char *name;
    em_tensor *live = em_model_tensor(t->model, i, &name);
    st = match_tensor(&c, path, name, live, whose, &src[i], err);
  }
  char oname[512], owhose[64];
  snprintf(owhose, sizeof owhose, "this optimiser (%s)",
           em_optim_kind_name(em_optimizer_config(t->opt)->kind));
  for (int i = 0; i < n_opt && st == EM_OK; i++) {
    const char *name;
    em_tensor *live = em_optimizer_state(t->opt, i, &name);
    snprintf(oname, sizeof oname, "optim/%s", name);
    st = match_tensor(&c, path, oname, live, owhose, &src[n_model + i], err);
  }
  for (int i = 0; i < c.n && st == EM_OK; i++)
    if (!c.used[i])
      st = em_error_set(err, EM_ERR_INVALID,
                        "checkpoint '%s' holds a tensor '%s' that this model and optimiser do "
                        "not have; was it written from another spec or optimiser setting?",
                        path, c.e[i].name);
  ckpt_state s;
  if (st == EM_OK) st = parse_state(f, path, &s, t->cfg.divergence_spike_factor, err);
  if (st == EM_OK) st = check_step_counts(&c, path, s.pos.step, err);
  if (st == EM_OK && (s.pos.epoch > t->cfg.epochs ||
                      (s.pos.epoch == t->cfg.epochs && s.pos.batch > 0)))
    st = em_error_set(err, EM_ERR_INVALID,
                      "checkpoint '%s' is at epoch %lld, batch %lld: past the %d epochs its run "
                      "trains, so it was not written by this run's settings", path,
                      (long long)s.pos.epoch + 1, (long long)s.pos.batch, t->cfg.epochs);
  /* The position must be a place between optimiser steps of this run. */
  int64_t bpe = em_loader_batches_per_epoch(t->loader);
  int acc = t->cfg.accumulate > 0 ? t->cfg.accumulate : 1;
  if (st == EM_OK && s.pos.batch > bpe)
    st = em_error_set(err, EM_ERR_INVALID,
                      "checkpoint '%s' stopped after batch %lld of epoch %lld, but an epoch here "
                      "has only %lld batches; was it written with another batch size, limit or "
                      "dataset?", path, (long long)s.pos.batch, (long long)s.pos.epoch + 1,
                      (long long)bpe);
  if (st == EM_OK && s.pos.batch % acc != 0 && s.pos.batch != bpe)
    st = em_error_set(err, EM_ERR_INVALID,
                      "checkpoint '%s' stopped after batch %lld of an epoch, which is not "
                      "between optimiser steps when accumulating %d batches; was it written with "
                      "another accumulate setting?", path, (long long)s.pos.batch, acc);
  if (st == EM_OK) {
    char *mine_full = em_checkpoint_spec_text(em_model_spec(t->model));
    char *mine = em_checkpoint_model_text(mine_full);
    char *saved = em_checkpoint_model_text(em_safetensors_meta(f, "spec"));
    if (!mine)
      st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
    else if (!saved || strcmp(saved, mine) != 0) {
      char sname[128];
      saved_spec_name(f, sname, sizeof sname);
      st = em_error_set(err, EM_ERR_INVALID,
                        "checkpoint '%s' was made for a different model (spec '%s'); this "
                        "model's spec is '%s' and its layers differ: resume with the spec it was "
                        "written for", path, sname, em_spec_name(em_model_spec(t->model)));
    }
    free(mine_full);
    free(mine);
    free(saved);
  }
  if (st == EM_OK) {
    /* Everything checked: apply. */
    for (int i = 0; i < n_model; i++) em_tensor_copy_(em_model_tensor(t->model, i, NULL), src[i]);
    for (int i = 0; i < n_opt; i++) /* onto the training device where they live there */
      em_tensor_copy_(em_optimizer_state(t->opt, i, NULL), src[n_model + i]);
    em_optimizer_set_steps(t->opt, s.pos.step);
    em_model_zero_grad(t->model);
    t->pos = s.pos;
    t->micro = 0;
    t->rng = s.rng;
    t->watch = s.watch;
    if (s.has_scaler && t->scaler.enabled) {
      t->scaler.scale = (float)s.amp_scale;
      t->scaler.growth_tracker = (int)s.amp_tracker;
      t->scaler.skipped = s.amp_skipped;
    }
    if (!keep_scale) {
      t->lr_scale = s.lr_scale;
      t->rollbacks = (int)s.rollbacks;
      t->es_seen = s.has_es; /* none: no evaluation before it (or early_stop was off) */
      t->es_best = s.has_es ? s.es_best : 0;
      t->es_since = s.has_es ? s.es_since : 0;
    }
    t->jumped = true;
    char *abs = realpath(path, NULL);
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", abs ? abs : path);
    t->last_ckpt_step = t->pos.step;
    free(abs);
    free(t->last_ckpt_meta);
    t->last_ckpt_meta = NULL;
  }
  ckpt_tensors_free(&c);
  free(src);
  em_safetensors_close(f);
  return st;
}

em_status em_trainer_restore(em_trainer *t, const char *path, bool keep_scale, em_error *err) {
  em_error e = {0};
  em_status st = restore(t, path, keep_scale, &e);
  if (st != EM_OK && err) *err = e;
  return st;
}

em_status em_trainer_load_checkpoint(em_trainer *t, const char *path, em_error *err) {
  if (!path || !path[0]) return em_error_set(err, EM_ERR_INVALID, "checkpoint: no file name given");
  return em_trainer_restore(t, path, false, err);
}

void em_trainer_set_rollback_point(em_trainer *t, const char *path, int64_t step) {
  snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", path ? path : "");
  t->last_ckpt_step = path ? step : -1;
  free(t->last_ckpt_meta);
  t->last_ckpt_meta = NULL;
}

em_status em_checkpoint_read_meta(const char *path, const char *key, char *out, size_t cap,
                                  em_error *err) {
  em_error e = {0};
  em_safetensors *f = em_safetensors_open(path, &e);
  em_status st = f ? check_format(f, path, &e) : e.status;
  if (st == EM_OK) {
    const char *v = em_safetensors_meta(f, key);
    if (!v)
      st = em_error_set(&e, EM_ERR_INVALID, "checkpoint '%s' has no metadata \"%s\"", path, key);
    else if (strlen(v) >= cap)
      st = em_error_set(&e, EM_ERR_INVALID, "checkpoint '%s': metadata \"%s\" needs %zu bytes, "
                        "got room for %zu", path, key, strlen(v) + 1, cap);
    else memcpy(out, v, strlen(v) + 1);
  }
  em_safetensors_close(f);
  if (st != EM_OK && err) *err = e;
  return st;
}

static int cmp_name_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The file's tensors one at a time, in the checksum's order (a checkpoint
 * is never held whole), against its checksum want and, when step >= 0,
 * the position's step counts; each is handed to take (when given) as it
 * is read. */
static em_status verify_tensors(em_safetensors *f, const char *path, uint32_t want, int64_t step,
                                em_ckpt_take_fn take, void *ctx, em_error *err) {
  int n = em_safetensors_count(f);
  const char **names = calloc((size_t)(n ? n : 1), sizeof *names);
  if (!names) return em_error_set(err, EM_ERR_NOMEM, "out of memory checking '%s'", path);
  for (int i = 0; i < n; i++) names[i] = em_safetensors_name(f, i);
  qsort(names, (size_t)n, sizeof *names, cmp_name_ptr);
  uint32_t crc = em_checkpoint_crc_start();
  em_status st = EM_OK;
  for (int i = 0; i < n && st == EM_OK; i++) {
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    st = em_safetensors_info(f, names[i], &dt, &nd, shape, err);
    em_tensor *t = st == EM_OK ? em_tensor_new(dt, nd, shape, err) : NULL;
    if (st == EM_OK && !t) st = err ? err->status : EM_ERR_NOMEM;
    if (st == EM_OK) st = em_safetensors_read(f, names[i], t, err);
    if (st == EM_OK) crc = em_checkpoint_crc_tensor(crc, names[i], t);
    if (st == EM_OK && step >= 0) st = check_step_count(names[i], t, path, step, err);
    if (st == EM_OK && take) st = take(names[i], t, ctx, err);
    em_tensor_free(t);
  }
  free(names);
  return st == EM_OK ? finish_checksum(f, path, want, crc, err) : st;
}

em_status em_checkpoint_verify_each(const char *path, em_ckpt_take_fn take, void *ctx,
                                    int64_t *step, int64_t *epoch, em_error *err) {
  em_error e = {0}, es = {0};
  ckpt_state state;
  uint32_t want = 0;
  em_safetensors *f = em_safetensors_open(path, &e);
  em_status st = f ? check_format(f, path, &e) : e.status;
  if (st == EM_OK) st = wanted_checksum(f, path, &want, &e);
  /* the position first (metadata only); a damaged file is reported as
   * corrupt before its position as inconsistent */
  em_status st_state = st == EM_OK ? parse_state(f, path, &state, 0, &es) : st;
  if (st == EM_OK)
    st = verify_tensors(f, path, want, st_state == EM_OK ? state.pos.step : -1, take, ctx, &e);
  if (st == EM_OK && st_state != EM_OK) {
    st = st_state;
    e = es;
  }
  em_safetensors_close(f);
  if (st != EM_OK) {
    if (err) *err = e;
    return st;
  }
  *step = state.pos.step;
  /* after an epoch's last batch the position is the next epoch's start */
  *epoch = state.pos.batch == 0 && state.pos.epoch > 0 ? state.pos.epoch - 1 : state.pos.epoch;
  return EM_OK;
}

em_status em_checkpoint_verify(const char *path, int64_t *step, int64_t *epoch, em_error *err) {
  return em_checkpoint_verify_each(path, NULL, NULL, step, epoch, err);
}
