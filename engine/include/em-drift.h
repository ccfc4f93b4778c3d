/* em-drift.h: are a model's inputs still like its training data?
 *
 * A version keeps a reference (built at registration from its training
 * split): the distribution of a few per-sample features of its inputs and
 * of its predicted classes. A live window (the server's last requests, or
 * a file given to `ember drift`) is compared with it:
 *   - per feature, the population stability index over the reference's
 *     ten deciles, PSI = sum (live - ref) ln(live / ref), each share
 *     floored at 1e-4 (the usual reading: < 0.1 stable, 0.1-0.25 a
 *     moderate shift, > 0.25 a large one); and the two-sample
 *     Kolmogorov-Smirnov statistic against the reference's percentiles
 *     (its CDF known to 1%), judged against the critical value at
 *     alpha = 0.01, 1.628 sqrt((n + m) / (n m));
 *   - the predicted classes' shares, by the Jensen-Shannon divergence
 *     (base 2: 0 the same, 1 disjoint).
 *
 * The features of one sample: for an image or any input of two or more
 * dimensions (C, ...), the mean and the standard deviation of each of its
 * first 16 channels ("c0_mean", "c0_std"): what brightness, contrast,
 * inversion and noise move; for a vector of up to 32 values, each value
 * ("x0" ...); for a longer vector, its mean and standard deviation
 * ("mean", "std"). Integer (token) inputs have none: only their
 * predictions are compared. Predictions are compared for outputs that are
 * one vector of two or more classes (argmax). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "em-error.h"

#define EM_DRIFT_BINS 10
#define EM_DRIFT_QUANTILES 101 /* percentiles 0..100 */
#define EM_DRIFT_MAX_FEATURES 32
#define EM_DRIFT_MAX_CLASSES 1000

typedef struct {
  char name[16];
  double edges[EM_DRIFT_BINS - 1]; /* the reference's deciles */
  double ref_p[EM_DRIFT_BINS];     /* its share in each bin */
  double q[EM_DRIFT_QUANTILES];    /* its percentiles */
} em_drift_feature;

typedef struct {
  int64_t samples;                 /* what it was built from */
  int n_features;
  em_drift_feature f[EM_DRIFT_MAX_FEATURES];
  int classes;                     /* 0: predictions not compared */
  double class_p[EM_DRIFT_MAX_CLASSES];
} em_drift_ref;

/* The features of a sample of shape (ndim) (no batch dimension): how many
 * (0..EM_DRIFT_MAX_FEATURES) and their names (names may be NULL). */
int em_drift_feature_count(const int64_t *shape, int ndim, bool integer_input,
                           char (*names)[16]);
/* Sample x's feature values into out (em_drift_feature_count of them). */
void em_drift_features(const int64_t *shape, int ndim, const float *x, double *out);
/* The classes of an output of shape (ndim) whose predictions are compared
 * (0: none). */
int em_drift_classes(const int64_t *out_shape, int out_ndim);
/* The predicted class of one output row of `classes` logits. */
int em_drift_argmax(const float *logits, int classes);

/* Builds a reference from n samples: feats (n, n_features) and pred (n)
 * (NULL when classes is 0). n must be at least 20. */
em_status em_drift_ref_build(em_drift_ref *r, int n_features, char (*names)[16],
                             const double *feats, int64_t n, const int *pred, int classes,
                             em_error *err);
/* JSON (malloc'd) and back; parse errors say what is wrong. */
char *em_drift_ref_to_json(const em_drift_ref *r);
em_status em_drift_ref_from_json(em_drift_ref *r, const char *json, em_error *err);

/* A model's reference from up to max_samples samples of a dataset (its
 * training split), spread evenly over it: their features and the model's
 * predictions (inference mode, on the model's device). */
struct em_model;
struct em_dataset;
em_status em_drift_ref_of_data(em_drift_ref *r, struct em_model *m, const struct em_dataset *ds,
                               int64_t max_samples, em_error *err);

/* A window judged against a reference. */
typedef struct {
  int64_t n;                       /* samples in the window */
  double psi[EM_DRIFT_MAX_FEATURES];
  double ks[EM_DRIFT_MAX_FEATURES];
  double ks_critical;              /* at alpha 0.01 for these counts */
  double js;                       /* predictions; NAN when not compared */
  int worst;                       /* the feature of the largest PSI (-1: none) */
} em_drift_stats;

/* feats (n, r->n_features) in any order, pred (n) or NULL. */
void em_drift_compare(const em_drift_ref *r, const double *feats, int64_t n, const int *pred,
                      em_drift_stats *out);
/* Thresholds: a PSI above psi, a KS statistic above its critical value
 * with a PSI above psi / 2 (KS alone fires on shifts too small to matter
 * with large windows), or a JS divergence above js. */
typedef struct {
  double psi, js;
} em_drift_limits;
/* Whether the window drifted, and a one-line account into why (the
 * worst feature's figures, the prediction divergence). */
bool em_drift_judge(const em_drift_ref *r, const em_drift_stats *s, const em_drift_limits *lim,
                    char *why, size_t cap);
