/* tune-sample.c: the samplers (grid, random, TPE) and a trial's spec
 * (em-tune.h).
 *
 * TPE (Bergstra et al. 2011, Optuna's default): after max(3, trials / 5)
 * random trials, each parameter is drawn on its own: the finished trials
 * are split into the best quarter (at least one) and the rest; a Parzen
 * estimator of each group (a Gaussian per observation, in log space for a
 * log range, its width the distance to its neighbours, at least a
 * hundredth of the range, plus a uniform prior of one observation's
 * weight; a categorical's counts plus one) gives l(x) and g(x), and of 24
 * candidates drawn from l the one with the largest l(x) / g(x) is taken. */
#include "tune-private.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CANDIDATES 24

typedef struct {
  uint64_t s;
} rng;

static uint64_t next(rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
static double uniform(rng *r) { return (double)(next(r) >> 11) / 9007199254740992.0; }
static double gauss(rng *r) {
  double u = fmax(uniform(r), 1e-300), v = uniform(r);
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* ---- numbers of a range, in the space the sampler works in ---------------------- */

static double to_space(const em_tune_param *p, double x) { return p->log ? log(x) : x; }
static double from_space(const em_tune_param *p, double t) {
  double x = p->log ? exp(t) : t;
  if (p->integer) x = round(x);
  return fmin(fmax(x, p->low), p->high);
}

static json_t *range_value(const em_tune_param *p, double x) {
  return p->integer ? json_integer((json_int_t)x) : json_real(x);
}

static json_t *list_value(const em_tune_param *p, int k) {
  return json_loads(p->values[k], JSON_DECODE_ANY, NULL);
}

/* ---- TPE --------------------------------------------------------------------------- */

typedef struct {
  double *x; /* observations (sampler space) */
  int n;
} group;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* log density of a Parzen estimator over [lo, hi] at t */
static double parzen(const group *g, double lo, double hi, double t) {
  double w = 1.0 / (g->n + 1), dens = w / (hi - lo); /* the prior */
  for (int i = 0; i < g->n; i++) {
    double left = i > 0 ? g->x[i] - g->x[i - 1] : g->x[i] - lo;
    double right = i + 1 < g->n ? g->x[i + 1] - g->x[i] : hi - g->x[i];
    double sd = fmax(fmax(left, right), (hi - lo) / 100);
    double z = (t - g->x[i]) / sd;
    dens += w * exp(-0.5 * z * z) / (sd * 2.5066282746310002);
  }
  return log(dens);
}

static double parzen_draw(const group *g, double lo, double hi, rng *r) {
  int k = (int)(uniform(r) * (g->n + 1));
  if (k >= g->n) return lo + uniform(r) * (hi - lo);
  double left = k > 0 ? g->x[k] - g->x[k - 1] : g->x[k] - lo;
  double right = k + 1 < g->n ? g->x[k + 1] - g->x[k] : hi - g->x[k];
  double sd = fmax(fmax(left, right), (hi - lo) / 100);
  return fmin(fmax(g->x[k] + sd * gauss(r), lo), hi);
}

typedef struct {
  json_t *params;
  double value;
} obs;

static int by_value(const void *a, const void *b, bool maximize) {
  double x = ((const obs *)a)->value, y = ((const obs *)b)->value;
  return maximize ? (x < y) - (x > y) : (x > y) - (x < y);
}
static int by_max(const void *a, const void *b) { return by_value(a, b, true); }
static int by_min(const void *a, const void *b) { return by_value(a, b, false); }

static json_t *tpe_param(const em_tune_param *p, const obs *o, int n, int n_good, rng *r) {
  if (p->kind == EM_TUNE_RANGE) {
    double lo = to_space(p, p->low), hi = to_space(p, p->high);
    group good = {malloc(sizeof(double) * (size_t)n), 0}, badg = {malloc(sizeof(double) * (size_t)n), 0};
    for (int i = 0; i < n; i++) {
      json_t *v = json_object_get(o[i].params, p->path);
      if (!json_is_number(v)) continue;
      double t = to_space(p, json_number_value(v));
      if (i < n_good) good.x[good.n++] = t;
      else badg.x[badg.n++] = t;
    }
    qsort(good.x, (size_t)good.n, sizeof(double), cmp_double);
    qsort(badg.x, (size_t)badg.n, sizeof(double), cmp_double);
    double best = 0, best_score = -INFINITY;
    for (int c = 0; c < CANDIDATES; c++) {
      double t = parzen_draw(&good, lo, hi, r);
      double score = parzen(&good, lo, hi, t) - parzen(&badg, lo, hi, t);
      if (score > best_score) best_score = score, best = t;
    }
    free(good.x);
    free(badg.x);
    return range_value(p, from_space(p, best));
  }
  double lw[EM_TUNE_MAX_VALUES], gw[EM_TUNE_MAX_VALUES], lsum = 0;
  for (int k = 0; k < p->n_values; k++) lw[k] = gw[k] = 1;
  for (int i = 0; i < n; i++) {
    char *txt = json_dumps(json_object_get(o[i].params, p->path), JSON_ENCODE_ANY | JSON_COMPACT);
    for (int k = 0; txt && k < p->n_values; k++)
      if (!strcmp(txt, p->values[k])) (i < n_good ? lw : gw)[k] += 1;
    free(txt);
  }
  for (int k = 0; k < p->n_values; k++) lsum += lw[k];
  int best = 0;
  double best_score = -INFINITY;
  for (int c = 0; c < CANDIDATES; c++) {
    double u = uniform(r) * lsum;
    int k = 0;
    while (k + 1 < p->n_values && u >= lw[k]) u -= lw[k++];
    double score = log(lw[k]) - log(gw[k]);
    if (score > best_score) best_score = score, best = k;
  }
  return list_value(p, best);
}

/* ---- the samplers ------------------------------------------------------------------ */

static int tpe_startup(const em_tune_desc *d) { return d->trials / 5 > 3 ? d->trials / 5 : 3; }

char *em_tune_sample(const em_tune_desc *d, int number, const em_tune_history *hist, int n_hist,
                     em_error *err) {
  json_t *out = json_object();
  rng r = {d->seed * 0x100000001B3ULL + (uint64_t)number * 0x9E3779B97F4A7C15ULL + 1};
  if (d->sampler == EM_TUNE_QUEUE) {
    if (number >= d->n_queue) {
      json_decref(out);
      return NULL;
    }
    json_object_set_new(out, "queue", json_integer(number));
  } else if (d->sampler == EM_TUNE_GRID) {
    if (number >= em_tune_grid_size(d)) {
      json_decref(out);
      return NULL;
    }
    /* in a seeded random order (as Optuna's grid sampler): a pruner then
     * meets good and bad settings from the start, not one end of each
     * axis first; the order is the same for every runner of the sweep */
    int64_t size = em_tune_grid_size(d), rest = number;
    if (size <= (1 << 20)) {
      int64_t *perm = malloc(sizeof(int64_t) * (size_t)size);
      if (perm) {
        rng pr = {d->seed ^ 0x5DEECE66DULL};
        for (int64_t i = 0; i < size; i++) perm[i] = i;
        for (int64_t i = size - 1; i > 0; i--) {
          int64_t j = (int64_t)(next(&pr) % (uint64_t)(i + 1)), tmp = perm[i];
          perm[i] = perm[j];
          perm[j] = tmp;
        }
        rest = perm[number];
        free(perm);
      }
    }
    /* the last parameter varies fastest */
    for (int i = d->n_params - 1; i >= 0; i--) {
      const em_tune_param *p = &d->p[i];
      json_object_set_new(out, p->path, list_value(p, (int)(rest % p->n_values)));
      rest /= p->n_values;
    }
  } else {
    obs *o = NULL;
    int n = 0;
    if (d->sampler == EM_TUNE_TPE && number >= tpe_startup(d) && n_hist > 0) {
      o = calloc((size_t)n_hist, sizeof *o);
      for (int i = 0; o && i < n_hist; i++)
        if (isfinite(hist[i].value) && (o[n].params = json_loads(hist[i].params_json, 0, NULL)))
          o[n++].value = hist[i].value;
      qsort(o, (size_t)n, sizeof *o, d->maximize ? by_max : by_min);
    }
    int n_good = (n + 3) / 4;
    for (int i = 0; i < d->n_params; i++) {
      const em_tune_param *p = &d->p[i];
      json_t *v;
      if (n >= 2) v = tpe_param(p, o, n, n_good, &r);
      else if (p->kind == EM_TUNE_RANGE)
        v = range_value(p, from_space(p, to_space(p, p->low) + uniform(&r) *
                                             (to_space(p, p->high) - to_space(p, p->low))));
      else v = list_value(p, (int)(uniform(&r) * p->n_values) % p->n_values);
      json_object_set_new(out, p->path, v);
    }
    for (int i = 0; i < n; i++) json_decref(o[i].params);
    free(o);
  }
  char *txt = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
  json_decref(out);
  if (!txt) em_error_set(err, EM_ERR_NOMEM, "out of memory sampling trial %d", number);
  return txt;
}

/* ---- a trial's spec ------------------------------------------------------------------ */

static json_t *section(json_t *o, const char *key) {
  json_t *s = json_object_get(o, key);
  if (json_is_string(s)) { /* "schedule": "cosine" */
    json_t *obj = json_pack("{s:O}", "type", s);
    json_object_set_new(o, key, obj);
    return obj;
  }
  if (!json_is_object(s)) {
    s = json_object();
    json_object_set_new(o, key, s);
  }
  return s;
}

static em_status set_path(json_t *spec, const char *path, json_t *v, em_error *err) {
  if (!strncmp(path, "training.", 9)) return json_object_set(section(spec, "training"), path + 9, v) ? EM_ERR_NOMEM : EM_OK;
  if (!strncmp(path, "schedule.", 9))
    return json_object_set(section(section(spec, "training"), "schedule"), path + 9, v) ? EM_ERR_NOMEM : EM_OK;
  if (!strncmp(path, "loss.", 5)) return json_object_set(section(spec, "loss"), path + 5, v) ? EM_ERR_NOMEM : EM_OK;
  const char *name = path + 6, *dot = strchr(name, '.');
  json_t *nodes = json_object_get(spec, "nodes"), *n;
  size_t i;
  json_array_foreach(nodes, i, n) {
    const char *nn = json_string_value(json_object_get(n, "name"));
    if (nn && strlen(nn) == (size_t)(dot - name) && !strncmp(nn, name, (size_t)(dot - name)))
      return json_object_set(n, dot + 1, v) ? EM_ERR_NOMEM : EM_OK;
  }
  return em_error_set(err, EM_ERR_INVALID, "parameters: the spec has no node '%.*s' for '%s'",
                      (int)(dot - name), name, path);
}

char *em_tune_trial_spec(const em_tune_desc *d, const char *params_json, em_error *err) {
  int q = d->sampler == EM_TUNE_QUEUE ? em_tune_queue_index(d, params_json) : -1;
  json_t *spec = json_loads(q >= 0 ? d->queue_text[q] : d->spec_text, 0, NULL),
         *tr = json_loads(d->training_json, 0, NULL), *params = json_loads(params_json, 0, NULL);
  char *out = NULL;
  if (!json_is_object(spec) || !json_is_object(params)) {
    em_error_set(err, EM_ERR_FORMAT, "the base spec '%s' is not a JSON object", d->spec_path);
    goto done;
  }
  const char *k;
  json_t *v;
  json_object_foreach(tr, k, v) json_object_set(section(spec, "training"), k, v);
  json_object_foreach(params, k, v) {
    if (q >= 0) break; /* a queue's {"queue": i} names the spec, sets nothing */
    if (set_path(spec, k, v, err) != EM_OK) goto done;
  }
  out = json_dumps(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
done:
  json_decref(spec);
  json_decref(tr);
  json_decref(params);
  return out;
}

/* ---- pruning ----------------------------------------------------------------------------- */

bool em_tune_is_rung(const em_tune_desc *d, int e) {
  if (d->pruner == EM_PRUNE_MEDIAN) return e >= 1;
  if (d->pruner != EM_PRUNE_ASHA) return false;
  for (long r = d->min_epochs; r <= e; r *= d->reduction)
    if (r == e) return true;
  return false;
}

static bool better(const em_tune_desc *d, double a, double b) { return d->maximize ? a > b : a < b; }

bool em_tune_should_prune(const em_tune_desc *d, int e, double v, const double *others,
                          int n_others, char *why, size_t cap) {
  why[0] = '\0';
  if (!em_tune_is_rung(d, e) || !isfinite(v)) return false;
  if (d->pruner == EM_PRUNE_MEDIAN) {
    if (n_others < d->startup) return false;
    double *s = malloc(sizeof(double) * (size_t)n_others);
    if (!s) return false;
    memcpy(s, others, sizeof(double) * (size_t)n_others);
    qsort(s, (size_t)n_others, sizeof(double), cmp_double);
    double med = n_others % 2 ? s[n_others / 2] : 0.5 * (s[n_others / 2 - 1] + s[n_others / 2]);
    free(s);
    if (!better(d, med, v)) return false;
    snprintf(why, cap, "%s %.4f at evaluation %d is worse than the median %.4f of %d trials there",
             d->metric, v, e, med, n_others);
    return true;
  }
  /* ASHA: go on only within the top 1/reduction of the trials at this
   * rung, itself counted (at least one goes on: the first to arrive) */
  int n = n_others + 1, keep = n / d->reduction > 0 ? n / d->reduction : 1, ahead = 0;
  for (int i = 0; i < n_others; i++) ahead += better(d, others[i], v);
  if (ahead < keep) return false;
  snprintf(why, cap, "%s %.4f at epoch %d ranks %d of %d trials at that rung: ASHA keeps the top "
           "%d (1/%d)", d->metric, v, e, ahead + 1, n, keep, d->reduction);
  return true;
}
