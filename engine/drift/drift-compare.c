/* drift-compare.c: a window of samples against a reference, and the
 * reference's JSON (em-drift.h). */
#include "em-drift.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHARE_FLOOR 1e-4 /* an empty bin would make ln(live / ref) infinite */
#define KS_C_ALPHA_001 1.628

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The reference's CDF at x, linear between its percentiles. */
static double ref_cdf(const em_drift_feature *d, double x) {
  const double *q = d->q;
  if (x < q[0]) return 0;
  if (x >= q[EM_DRIFT_QUANTILES - 1]) return 1;
  int lo = 0, hi = EM_DRIFT_QUANTILES - 1; /* q[lo] <= x < q[hi] */
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (q[mid] <= x) lo = mid;
    else hi = mid;
  }
  /* a run of equal percentiles (a value many samples share): the CDF
   * jumps there, to the last of them */
  double span = q[hi] - q[lo];
  double t = span > 0 ? (x - q[lo]) / span : 1;
  return (lo + t) / 100.0;
}

static double psi_of(const em_drift_feature *d, const double *v, int64_t n) {
  int64_t counts[EM_DRIFT_BINS] = {0};
  for (int64_t i = 0; i < n; i++) {
    int b = 0;
    while (b < EM_DRIFT_BINS - 1 && v[i] > d->edges[b]) b++;
    counts[b]++;
  }
  double psi = 0;
  for (int b = 0; b < EM_DRIFT_BINS; b++) {
    double live = fmax((double)counts[b] / (double)n, SHARE_FLOOR);
    double ref = fmax(d->ref_p[b], SHARE_FLOOR);
    psi += (live - ref) * log(live / ref);
  }
  return psi;
}

/* The reference's CDF just below x (its left limit: less than at x where
 * many samples share the value x). */
static double ref_cdf_below(const em_drift_feature *d, double x) {
  const double *q = d->q;
  if (x <= q[0]) return 0;
  if (x > q[EM_DRIFT_QUANTILES - 1]) return 1;
  int lo = 0, hi = EM_DRIFT_QUANTILES - 1; /* q[lo] < x <= q[hi] */
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (q[mid] < x) lo = mid;
    else hi = mid;
  }
  return (lo + (x - q[lo]) / (q[hi] - q[lo])) / 100.0;
}

/* sup |F_live - F_ref| (v sorted): between two live values F_live is
 * flat and F_ref rises, so the largest gap is at a live value or just
 * below one, each side taken with its own limit. */
static double ks_of(const em_drift_feature *d, const double *v, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = i;
    while (j + 1 < n && v[j + 1] == v[i]) j++;
    double below = (double)i / (double)n, at = (double)(j + 1) / (double)n;
    worst = fmax(worst, fmax(fabs(ref_cdf_below(d, v[i]) - below), fabs(ref_cdf(d, v[i]) - at)));
    i = j;
  }
  return worst;
}

static double js_divergence(const double *p, const double *q, int k) {
  double js = 0;
  for (int i = 0; i < k; i++) {
    double m = 0.5 * (p[i] + q[i]);
    if (p[i] > 0) js += 0.5 * p[i] * log2(p[i] / m);
    if (q[i] > 0) js += 0.5 * q[i] * log2(q[i] / m);
  }
  return js;
}

void em_drift_compare(const em_drift_ref *r, const double *feats, int64_t n, const int *pred,
                      em_drift_stats *out) {
  memset(out, 0, sizeof *out);
  out->n = n;
  out->js = NAN;
  out->worst = -1;
  if (n <= 0) return;
  out->ks_critical = KS_C_ALPHA_001 * sqrt((double)(n + r->samples) / ((double)n * r->samples));
  double *v = malloc((size_t)n * sizeof *v);
  if (!v) return;
  for (int f = 0; f < r->n_features; f++) {
    for (int64_t i = 0; i < n; i++) v[i] = feats[i * r->n_features + f];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    out->psi[f] = psi_of(&r->f[f], v, n);
    out->ks[f] = ks_of(&r->f[f], v, n);
    if (out->worst < 0 || out->psi[f] > out->psi[out->worst]) out->worst = f;
  }
  free(v);
  if (r->classes && pred) {
    double *live = calloc((size_t)r->classes, sizeof *live);
    if (!live) return;
    for (int64_t i = 0; i < n; i++)
      if (pred[i] >= 0 && pred[i] < r->classes) live[pred[i]] += 1.0 / (double)n;
    out->js = js_divergence(live, r->class_p, r->classes);
    free(live);
  }
}

bool em_drift_judge(const em_drift_ref *r, const em_drift_stats *s, const em_drift_limits *lim,
                    char *why, size_t cap) {
  bool drift = false;
  size_t k = 0;
  why[0] = '\0';
  for (int f = 0; f < r->n_features; f++) {
    bool by_psi = s->psi[f] > lim->psi;
    bool by_ks = s->ks[f] > s->ks_critical && s->psi[f] > lim->psi / 2;
    if (!by_psi && !by_ks) continue;
    if (!drift || f == s->worst)
      k = (size_t)snprintf(why, cap, "%s PSI %.3f (limit %g), KS %.3f (critical %.3f)",
                           r->f[f].name, s->psi[f], lim->psi, s->ks[f], s->ks_critical);
    drift = true;
  }
  if (isfinite(s->js) && s->js > lim->js) {
    if (k < cap)
      snprintf(why + k, cap - k, "%spredicted classes JS %.3f (limit %g)", drift ? "; " : "",
               s->js, lim->js);
    drift = true;
  }
  return drift;
}

/* ---- JSON ------------------------------------------------------------------- */

static json_t *numbers(const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
  return a;
}

char *em_drift_ref_to_json(const em_drift_ref *r) {
  json_t *o = json_object(), *fs = json_array();
  json_object_set_new(o, "format", json_integer(1));
  json_object_set_new(o, "samples", json_integer(r->samples));
  for (int f = 0; f < r->n_features; f++) {
    const em_drift_feature *d = &r->f[f];
    json_array_append_new(fs, json_pack("{s:s, s:o, s:o, s:o}", "name", d->name, "edges",
                                        numbers(d->edges, EM_DRIFT_BINS - 1), "p",
                                        numbers(d->ref_p, EM_DRIFT_BINS), "q",
                                        numbers(d->q, EM_DRIFT_QUANTILES)));
  }
  json_object_set_new(o, "features", fs);
  json_object_set_new(o, "class_p", numbers(r->class_p, r->classes));
  char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
  json_decref(o);
  return txt;
}

static bool read_numbers(json_t *a, double *v, int n) {
  if (!json_is_array(a) || (int)json_array_size(a) != n) return false;
  for (int i = 0; i < n; i++) {
    json_t *x = json_array_get(a, (size_t)i);
    if (!json_is_number(x)) return false;
    v[i] = json_number_value(x);
  }
  return true;
}

em_status em_drift_ref_from_json(em_drift_ref *r, const char *text, em_error *err) {
  memset(r, 0, sizeof *r);
  json_error_t je;
  json_t *o = json_loads(text, 0, &je);
  if (!o) return em_error_set(err, EM_ERR_FORMAT, "the drift reference is not JSON: %s", je.text);
  em_status st = EM_OK;
  json_t *fs = json_object_get(o, "features"), *cp = json_object_get(o, "class_p");
  json_t *ns = json_object_get(o, "samples");
  if (json_integer_value(json_object_get(o, "format")) != 1 || !json_is_array(fs) ||
      !json_is_array(cp) || !json_is_integer(ns) || json_integer_value(ns) < 1 ||
      json_array_size(fs) > EM_DRIFT_MAX_FEATURES || json_array_size(cp) > EM_DRIFT_MAX_CLASSES) {
    st = em_error_set(err, EM_ERR_FORMAT, "the drift reference is not one this version of "
                      "Ember reads (format 1: samples, features, class_p)");
    goto out;
  }
  r->samples = json_integer_value(ns);
  r->n_features = (int)json_array_size(fs);
  for (int f = 0; f < r->n_features && st == EM_OK; f++) {
    json_t *d = json_array_get(fs, (size_t)f);
    const char *name = json_string_value(json_object_get(d, "name"));
    if (!name || strlen(name) >= sizeof r->f[f].name ||
        !read_numbers(json_object_get(d, "edges"), r->f[f].edges, EM_DRIFT_BINS - 1) ||
        !read_numbers(json_object_get(d, "p"), r->f[f].ref_p, EM_DRIFT_BINS) ||
        !read_numbers(json_object_get(d, "q"), r->f[f].q, EM_DRIFT_QUANTILES))
      st = em_error_set(err, EM_ERR_FORMAT, "the drift reference's feature %d is incomplete", f);
    else
      snprintf(r->f[f].name, sizeof r->f[f].name, "%s", name);
  }
  r->classes = (int)json_array_size(cp);
  if (st == EM_OK && !read_numbers(cp, r->class_p, r->classes))
    st = em_error_set(err, EM_ERR_FORMAT, "the drift reference's class shares are not numbers");
out:
  json_decref(o);
  return st;
}
