/* eval-metrics.c: plugin metrics at evaluation. The evaluation hands each
 * batch's logits and labels to a collector, which keeps them for the whole
 * test set and, at the end, runs every metric asked for (the spec's
 * "training": {"metrics": [...]} and the process's --metric selections)
 * and publishes the values for the event sinks (em_metrics_last). */
#include "plugin-host.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const em_metric_type *selected[EM_EVAL_MAX_METRICS];
static int n_selected;
static em_metric_value last[EM_EVAL_MAX_METRICS];
static int n_last;
static int64_t serial;

struct em_eval_metrics {
  const em_metric_type *m[EM_EVAL_MAX_METRICS];
  int n;
  int k;            /* classes (the output's width) */
  float *logits;    /* (N, K) */
  int64_t *labels;  /* (N) */
  int64_t rows, cap;
};

static em_status unknown_metric(const char *name, em_error *err) {
  char known[512] = "", search[1024];
  size_t len = 0;
  for (int i = 0; i < em_metric_count() && len < sizeof known; i++) {
    int w = snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", em_metric_at(i)->name);
    if (w > 0) len += (size_t)w;
  }
  em_plugin_search_summary(search, sizeof search);
  return em_error_set(err, EM_ERR_INVALID,
                      "unknown metric '%s' (metrics come from plugins; known: %s); %s", name,
                      known[0] ? known : "none", search);
}

em_status em_metrics_select(const char *name, em_error *err) {
  const em_metric_type *m = em_metric_find(name);
  if (!m) return unknown_metric(name, err);
  em_status st = EM_OK;
  pthread_mutex_lock(&lock);
  bool have = false;
  for (int i = 0; i < n_selected; i++) have |= selected[i] == m;
  if (!have && n_selected == EM_EVAL_MAX_METRICS)
    st = em_error_set(err, EM_ERR_INVALID, "at most %d metrics", EM_EVAL_MAX_METRICS);
  else if (!have) selected[n_selected++] = m;
  pthread_mutex_unlock(&lock);
  return st;
}

em_status em_metrics_check_json(const json_t *v, em_error *err) {
  if (!json_is_array(v))
    return em_error_set(err, EM_ERR_INVALID,
                        "\"training\".\"metrics\" must be a list of metric names, like "
                        "[\"macro_f1\"]");
  if (json_array_size(v) > EM_EVAL_MAX_METRICS)
    return em_error_set(err, EM_ERR_INVALID, "\"training\".\"metrics\": at most %d metrics",
                        EM_EVAL_MAX_METRICS);
  size_t i;
  json_t *x;
  json_array_foreach(v, i, x) {
    if (!json_is_string(x))
      return em_error_set(err, EM_ERR_INVALID, "\"training\".\"metrics\"[%zu] must be a string", i);
    if (!em_metric_find(json_string_value(x))) {
      em_status st = unknown_metric(json_string_value(x), err);
      em_error_prefix(err, "\"training\".\"metrics\"");
      return st;
    }
  }
  return EM_OK;
}

/* false when m would be one metric too many */
static bool add_unique(em_eval_metrics *em, const em_metric_type *m) {
  for (int i = 0; i < em->n; i++)
    if (em->m[i] == m) return true;
  if (em->n == EM_EVAL_MAX_METRICS) return false;
  em->m[em->n++] = m;
  return true;
}

/* The metrics one evaluation computes, into em's list: the spec's
 * "metrics" (names already checked, or skipped when unknown), then those
 * --metric selected. False when they are more than the list holds. */
static bool select_metrics(const em_spec *spec, em_eval_metrics *em) {
  json_t *tr = spec ? em_spec_training_json(spec) : NULL;
  json_t *names = json_is_object(tr) ? json_object_get(tr, "metrics") : NULL;
  bool fit = true;
  size_t i;
  json_t *x;
  json_array_foreach(names, i, x) {
    const em_metric_type *m = json_is_string(x) ? em_metric_find(json_string_value(x)) : NULL;
    if (m) fit &= add_unique(em, m);
  }
  pthread_mutex_lock(&lock);
  for (int k = 0; k < n_selected; k++) fit &= add_unique(em, selected[k]);
  pthread_mutex_unlock(&lock);
  return fit;
}

em_eval_metrics *em_eval_metrics_begin(const em_spec *spec, em_status *st, em_error *err) {
  *st = EM_OK;
  json_t *tr = spec ? em_spec_training_json(spec) : NULL;
  json_t *names = json_is_object(tr) ? json_object_get(tr, "metrics") : NULL;
  if (names && (*st = em_metrics_check_json(names, err)) != EM_OK) return NULL;
  em_eval_metrics *em = calloc(1, sizeof *em);
  if (!em) {
    *st = em_error_set(err, EM_ERR_NOMEM, "out of memory for the evaluation's metrics");
    return NULL;
  }
  if (!select_metrics(spec, em)) {
    *st = em_error_set(err, EM_ERR_INVALID, "the spec's \"metrics\" and --metric ask for more "
                       "than %d different metrics, the most one evaluation computes",
                       EM_EVAL_MAX_METRICS);
    em_eval_metrics_free(em);
    return NULL;
  }
  if (em->n == 0) { /* none asked: none reported for this one */
    em_eval_metrics_free(em);
    pthread_mutex_lock(&lock);
    n_last = 0;
    serial++;
    pthread_mutex_unlock(&lock);
    return NULL;
  }
  return em;
}

void em_eval_metrics_names(const em_spec *spec, char *out, size_t cap) {
  em_eval_metrics em = {.n = 0}; /* only its list */
  select_metrics(spec, &em);
  size_t len = 0;
  if (cap) out[0] = '\0';
  for (int k = 0; k < em.n && len < cap; k++) {
    int w = snprintf(out + len, cap - len, "%s%s", k ? "," : "", em.m[k]->name);
    if (w > 0) len += (size_t)w;
  }
}

em_status em_eval_metrics_add(em_eval_metrics *em, const em_tensor *out, const int64_t *y,
                              em_error *err) {
  if (out->ndim != 2)
    return em_error_set(err, EM_ERR_SHAPE, "metrics need the model's output as (N, K) logits");
  int64_t n = out->shape[0], k = out->shape[1];
  if (em->rows && k != em->k)
    return em_error_set(err, EM_ERR_SHAPE, "the output's width changed during the evaluation");
  em->k = (int)k;
  if (em->rows + n > em->cap) {
    int64_t cap = em->cap ? em->cap : 1024;
    while (cap < em->rows + n) cap *= 2;
    float *l = realloc(em->logits, (size_t)(cap * k) * sizeof *l);
    if (l) em->logits = l;
    int64_t *lb = l ? realloc(em->labels, (size_t)cap * sizeof *lb) : NULL;
    if (lb) em->labels = lb;
    if (!l || !lb) return em_error_set(err, EM_ERR_NOMEM, "out of memory keeping the outputs");
    em->cap = cap;
  }
  float *dst = em->logits + em->rows * k; /* (n, K) */
  int64_t esz = (int64_t)em_dtype_size(out->dtype);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) {
      const char *p = (const char *)em_tensor_ptr(out) +
                      (r * out->stride[0] + c * out->stride[1]) * esz;
      dst[r * k + c] = out->dtype == EM_DTYPE_F64 ? (float)*(const double *)p : *(const float *)p;
    }
  memcpy(em->labels + em->rows, y, (size_t)n * sizeof *y);
  em->rows += n;
  return EM_OK;
}

void em_eval_metrics_free(em_eval_metrics *em) {
  if (!em) return;
  free(em->logits);
  free(em->labels);
  free(em);
}

/* A metric that fails, or gives a value that is not finite, is left out
 * of this evaluation with a warning: a plugin's metric is not a reason to
 * lose the training that was evaluated (the loss and accuracy, and the
 * other metrics, are still published and recorded). */
em_status em_eval_metrics_end(em_eval_metrics *em, em_error *err) {
  (void)err;
  em_metric_value v[EM_EVAL_MAX_METRICS];
  int n = 0;
  for (int i = 0; i < em->n; i++) {
    em_metric_value *mv = &v[n];
    memset(mv, 0, sizeof *mv);
    snprintf(mv->name, sizeof mv->name, "%s", em->m[i]->name);
    em_error me = {0};
    em_status st = em->m[i]->compute(em->rows, em->k, em->logits, em->labels, &mv->value, &me);
    if (st == EM_OK && !isfinite(mv->value))
      st = em_error_set(&me, EM_ERR_NUMERIC, "gave %g, not a finite number", mv->value);
    if (st == EM_OK) n++;
    else
      em_log_msg(EM_LOG_WARNING, "metric '%s' is left out of this evaluation: %s",
                 em->m[i]->name, me.msg[0] ? me.msg : em_status_name(st));
  }
  pthread_mutex_lock(&lock);
  memcpy(last, v, (size_t)n * sizeof v[0]);
  n_last = n;
  serial++;
  pthread_mutex_unlock(&lock);
  em_eval_metrics_free(em);
  return EM_OK;
}

em_status em_eval_metrics_gather(em_eval_metrics *em, int k, em_eval_gather_fn fn, void *user,
                                 em_error *err) {
  if (em->rows && em->k != k)
    return em_error_set(err, EM_ERR_SHAPE, "the output has %d columns, the spec says %d", em->k,
                        k);
  em->k = k;
  em_status st = fn(user, k, &em->rows, &em->logits, &em->labels, err);
  em->cap = em->rows;
  return st;
}

int em_metrics_last(em_metric_value *out, int cap, int64_t *ser) {
  pthread_mutex_lock(&lock);
  int n = n_last < cap ? n_last : cap;
  if (n > 0) memcpy(out, last, (size_t)n * sizeof *out);
  if (ser) *ser = serial;
  pthread_mutex_unlock(&lock);
  return n;
}
