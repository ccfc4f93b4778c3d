/* drift-features.c: a sample's drift features and a reference built from
 * many samples (em-drift.h). */
#include "em-drift.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CHANNELS 16
#define MAX_VECTOR 32

int em_drift_feature_count(const int64_t *shape, int ndim, bool integer_input,
                           char (*names)[16]) {
  if (integer_input || ndim < 1) return 0;
  int n = 0;
  if (ndim >= 2) {
    int64_t c = shape[0] < MAX_CHANNELS ? shape[0] : MAX_CHANNELS;
    for (int64_t i = 0; i < c; i++) {
      if (names) {
        snprintf(names[n], 16, "c%d_mean", (int)i);
        snprintf(names[n + 1], 16, "c%d_std", (int)i);
      }
      n += 2;
    }
  } else if (shape[0] <= MAX_VECTOR) {
    for (int64_t i = 0; i < shape[0]; i++, n++)
      if (names) snprintf(names[n], 16, "x%d", (int)i);
  } else {
    if (names) {
      snprintf(names[0], 16, "mean");
      snprintf(names[1], 16, "std");
    }
    n = 2;
  }
  return n;
}

/* Mean and standard deviation of n values (two passes: no cancellation). */
static void mean_std(const float *x, int64_t n, double *mean, double *sd) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i];
  double m = n ? s / (double)n : 0, v = 0;
  for (int64_t i = 0; i < n; i++) v += ((double)x[i] - m) * ((double)x[i] - m);
  *mean = m;
  *sd = n ? sqrt(v / (double)n) : 0;
}

void em_drift_features(const int64_t *shape, int ndim, const float *x, double *out) {
  if (ndim >= 2) {
    int64_t per = 1;
    for (int d = 1; d < ndim; d++) per *= shape[d];
    int64_t c = shape[0] < MAX_CHANNELS ? shape[0] : MAX_CHANNELS;
    for (int64_t i = 0; i < c; i++) mean_std(x + i * per, per, &out[2 * i], &out[2 * i + 1]);
  } else if (shape[0] <= MAX_VECTOR) {
    for (int64_t i = 0; i < shape[0]; i++) out[i] = x[i];
  } else {
    mean_std(x, shape[0], &out[0], &out[1]);
  }
}

int em_drift_classes(const int64_t *out_shape, int out_ndim) {
  if (out_ndim != 1 || out_shape[0] < 2 || out_shape[0] > EM_DRIFT_MAX_CLASSES) return 0;
  return (int)out_shape[0];
}

int em_drift_argmax(const float *logits, int classes) {
  int best = 0;
  for (int i = 1; i < classes; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-th quantile (0..1) of sorted v[0..n): linear between order
 * statistics (NumPy's default). */
static double quantile(const double *v, int64_t n, double q) {
  double pos = q * (double)(n - 1);
  int64_t i = (int64_t)floor(pos);
  if (i >= n - 1) return v[n - 1];
  return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

em_status em_drift_ref_build(em_drift_ref *r, int n_features, char (*names)[16],
                             const double *feats, int64_t n, const int *pred, int classes,
                             em_error *err) {
  memset(r, 0, sizeof *r);
  if (n < 20)
    return em_error_set(err, EM_ERR_INVALID,
                        "a drift reference needs at least 20 samples (%lld given)", (long long)n);
  if (n_features < 0 || n_features > EM_DRIFT_MAX_FEATURES || classes < 0 ||
      classes > EM_DRIFT_MAX_CLASSES)
    return em_error_set(err, EM_ERR_INVALID, "a drift reference of %d features and %d classes "
                        "is beyond what it holds", n_features, classes);
  double *v = malloc((size_t)n * sizeof *v);
  if (!v) return em_error_set(err, EM_ERR_NOMEM, "out of memory building a drift reference");
  r->samples = n;
  r->n_features = n_features;
  for (int f = 0; f < n_features; f++) {
    em_drift_feature *d = &r->f[f];
    snprintf(d->name, sizeof d->name, "%s", names[f]);
    for (int64_t i = 0; i < n; i++) v[i] = feats[i * n_features + f];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    for (int q = 0; q < EM_DRIFT_QUANTILES; q++) d->q[q] = quantile(v, n, q / 100.0);
    for (int b = 0; b < EM_DRIFT_BINS - 1; b++) d->edges[b] = quantile(v, n, (b + 1) / 10.0);
    /* the reference's own shares (ties make them other than a tenth) */
    int64_t counts[EM_DRIFT_BINS] = {0};
    for (int64_t i = 0; i < n; i++) {
      int b = 0;
      while (b < EM_DRIFT_BINS - 1 && v[i] > d->edges[b]) b++;
      counts[b]++;
    }
    for (int b = 0; b < EM_DRIFT_BINS; b++) d->ref_p[b] = (double)counts[b] / (double)n;
  }
  free(v);
  r->classes = pred ? classes : 0;
  if (r->classes) {
    for (int64_t i = 0; i < n; i++)
      if (pred[i] >= 0 && pred[i] < classes) r->class_p[pred[i]] += 1;
    for (int c = 0; c < classes; c++) r->class_p[c] /= (double)n;
  }
  return EM_OK;
}
