/* test-drift.c: the drift features of a sample, a reference and a window
 * judged against it (em-drift.h): PSI and KS figures worked by hand, a
 * window from the reference's own distribution that stays quiet and
 * shifted ones that do not, predicted classes by Jensen-Shannon, the JSON
 * round trip and its refusals. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-drift.h"

static double gauss(GRand *r) { /* Box-Muller */
  double u = g_rand_double_range(r, 1e-12, 1), v = g_rand_double(r);
  return sqrt(-2 * log(u)) * cos(2 * G_PI * v);
}

static void test_features(void) {
  char names[EM_DRIFT_MAX_FEATURES][16];
  int64_t img[3] = {2, 1, 2}; /* two channels of two pixels */
  g_assert_cmpint(em_drift_feature_count(img, 3, false, names), ==, 4);
  g_assert_cmpstr(names[0], ==, "c0_mean");
  g_assert_cmpstr(names[3], ==, "c1_std");
  float x[4] = {0, 1, 0.5f, 0.5f};
  double f[4];
  em_drift_features(img, 3, x, f);
  g_assert_cmpfloat_with_epsilon(f[0], 0.5, 1e-12);
  g_assert_cmpfloat_with_epsilon(f[1], 0.5, 1e-12); /* population std of {0, 1} */
  g_assert_cmpfloat_with_epsilon(f[2], 0.5, 1e-12);
  g_assert_cmpfloat_with_epsilon(f[3], 0.0, 1e-12);
  int64_t vec[1] = {3};
  g_assert_cmpint(em_drift_feature_count(vec, 1, false, names), ==, 3);
  g_assert_cmpstr(names[2], ==, "x2");
  int64_t longv[1] = {100};
  g_assert_cmpint(em_drift_feature_count(longv, 1, false, names), ==, 2);
  g_assert_cmpint(em_drift_feature_count(longv, 1, true, names), ==, 0); /* tokens */
  int64_t many[3] = {64, 4, 4}; /* channels past 16 are left out */
  g_assert_cmpint(em_drift_feature_count(many, 3, false, NULL), ==, 32);
  int64_t out10[1] = {10}, out1[1] = {1}, seq[2] = {8, 10};
  g_assert_cmpint(em_drift_classes(out10, 1), ==, 10);
  g_assert_cmpint(em_drift_classes(out1, 1), ==, 0);
  g_assert_cmpint(em_drift_classes(seq, 2), ==, 0);
  float logits[4] = {0.1f, 3, -2, 2.9f};
  g_assert_cmpint(em_drift_argmax(logits, 4), ==, 1);
}

/* A reference of 0..19 and a window all at 100: every live sample in the
 * top decile. PSI = 9 (1e-4 - 0.1) ln(1e-4 / 0.1) + (1 - 0.1) ln(1 / 0.1)
 * with the 1e-4 floor; KS = 1 (the reference's CDF is 1 there, the
 * window's 0 just below). */
static void test_by_hand(void) {
  char names[1][16] = {"x0"};
  double ref[20], live[50];
  for (int i = 0; i < 20; i++) ref[i] = i;
  for (int i = 0; i < 50; i++) live[i] = 100;
  em_drift_ref *r = g_new0(em_drift_ref, 1);
  em_error err = {0};
  g_assert_cmpint(em_drift_ref_build(r, 1, names, ref, 20, NULL, 0, &err), ==, EM_OK);
  g_assert_cmpfloat_with_epsilon(r->f[0].edges[0], 1.9, 1e-12); /* linear between order stats */
  g_assert_cmpfloat_with_epsilon(r->f[0].q[50], 9.5, 1e-12);
  for (int b = 0; b < EM_DRIFT_BINS; b++) g_assert_cmpfloat_with_epsilon(r->f[0].ref_p[b], 0.1, 1e-12);
  em_drift_stats s;
  em_drift_compare(r, live, 50, NULL, &s);
  double want = 9 * (1e-4 - 0.1) * log(1e-4 / 0.1) + 0.9 * log(10.0);
  g_assert_cmpfloat_with_epsilon(s.psi[0], want, 1e-9);
  g_assert_cmpfloat_with_epsilon(s.ks[0], 1.0, 1e-12);
  g_assert_true(isnan(s.js));
  /* the window equal to the reference: PSI 0, KS no more than the 1% the
   * percentiles resolve plus one live step (1/20) */
  em_drift_compare(r, ref, 20, NULL, &s);
  g_assert_cmpfloat_with_epsilon(s.psi[0], 0.0, 1e-12);
  g_assert_cmpfloat(s.ks[0], <=, 0.05 + 0.01 + 1e-12);
  /* ties: half the reference at 0, a window of zeros has half of its
   * mass there too at the step (KS 0.5, not 1) */
  double half[20];
  for (int i = 0; i < 20; i++) half[i] = i < 10 ? 0 : i;
  g_assert_cmpint(em_drift_ref_build(r, 1, names, half, 20, NULL, 0, &err), ==, EM_OK);
  double zeros[10] = {0};
  em_drift_compare(r, zeros, 10, NULL, &s);
  g_assert_cmpfloat(fabs(s.ks[0] - 0.5), <, 0.06); /* the CDF at 0 is known to the percentile */
  g_assert_cmpint(em_drift_ref_build(r, 1, names, ref, 19, NULL, 0, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "at least 20"));
  g_free(r);
}

/* Gaussian features: a window from the same distribution stays below the
 * limits, a shifted one (mean + 1 sd, or sd x 2) crosses them. With a
 * reference of 2000 and a window of 500 the PSI of an unshifted window
 * is about (bins - 1)(1/500 + 1/2000) = 0.0225 in expectation, far under
 * 0.25; one of +1 sd is near 1. */
static void test_windows(void) {
  enum { N = 2000, W = 500, F = 2 };
  GRand *g = g_rand_new_with_seed(7);
  double *ref = g_new(double, N * F), *live = g_new(double, W * F);
  int *pred = g_new(int, N), *lp = g_new(int, W);
  for (int i = 0; i < N; i++) {
    ref[i * F] = gauss(g);
    ref[i * F + 1] = 3 + 0.5 * gauss(g);
    pred[i] = i % 10;
  }
  char names[F][16] = {"c0_mean", "c0_std"};
  em_drift_ref *r = g_new0(em_drift_ref, 1);
  em_error err = {0};
  g_assert_cmpint(em_drift_ref_build(r, F, names, ref, N, pred, 10, &err), ==, EM_OK);
  em_drift_limits lim = {.psi = 0.25, .js = 0.1};
  char why[256];
  em_drift_stats s;
  for (int i = 0; i < W; i++) {
    live[i * F] = gauss(g);
    live[i * F + 1] = 3 + 0.5 * gauss(g);
    lp[i] = (i * 7) % 10;
  }
  em_drift_compare(r, live, W, lp, &s);
  g_assert_cmpfloat(s.psi[0], <, 0.1);
  g_assert_cmpfloat(s.psi[1], <, 0.1);
  g_assert_cmpfloat(s.ks[0], <, s.ks_critical);
  g_assert_cmpfloat(s.js, <, 0.01);
  g_assert_false(em_drift_judge(r, &s, &lim, why, sizeof why));
  g_assert_cmpfloat_with_epsilon(s.ks_critical, 1.628 * sqrt(2500.0 / (500.0 * 2000)), 1e-12);

  for (int i = 0; i < W; i++) live[i * F] += 1; /* mean + 1 sd */
  em_drift_compare(r, live, W, lp, &s);
  g_assert_cmpfloat(s.psi[0], >, 0.5);
  g_assert_cmpfloat(s.ks[0], >, s.ks_critical);
  g_assert_cmpint(s.worst, ==, 0);
  g_assert_true(em_drift_judge(r, &s, &lim, why, sizeof why));
  g_assert_nonnull(strstr(why, "c0_mean PSI"));

  for (int i = 0; i < W; i++) {
    live[i * F] -= 1;
    live[i * F + 1] = 3 + 1.0 * gauss(g); /* sd x 2 */
    lp[i] = 3;                            /* and one class only */
  }
  em_drift_compare(r, live, W, lp, &s);
  g_assert_cmpfloat(s.psi[1], >, 0.25);
  /* JS of a point mass against ten equal classes: the mixture is 0.55 on
   * the class and 0.05 on each other one */
  double m3 = 0.55, mo = 0.05;
  double js = 0.5 * 1 * log2(1 / m3) + 0.5 * (0.1 * log2(0.1 / m3) + 9 * 0.1 * log2(0.1 / mo));
  g_assert_cmpfloat_with_epsilon(s.js, js, 1e-9);
  g_assert_true(em_drift_judge(r, &s, &lim, why, sizeof why));
  g_assert_nonnull(strstr(why, "JS"));
  g_free(ref);
  g_free(live);
  g_free(pred);
  g_free(lp);
  g_free(r);
  g_rand_free(g);
}

static void test_json(void) {
  enum { N = 100 };
  double v[N];
  int pred[N];
  for (int i = 0; i < N; i++) {
    v[i] = sin(i * 0.37) * 1e3 + 1.0 / 3;
    pred[i] = i % 3;
  }
  char names[1][16] = {"mean"};
  em_drift_ref *a = g_new0(em_drift_ref, 1), *b = g_new0(em_drift_ref, 1);
  em_error err = {0};
  g_assert_cmpint(em_drift_ref_build(a, 1, names, v, N, pred, 3, &err), ==, EM_OK);
  char *j = em_drift_ref_to_json(a);
  g_assert_cmpint(em_drift_ref_from_json(b, j, &err), ==, EM_OK);
  g_assert_cmpint(b->samples, ==, N);
  g_assert_cmpint(b->classes, ==, 3);
  g_assert_cmpstr(b->f[0].name, ==, "mean");
  for (int q = 0; q < EM_DRIFT_QUANTILES; q++)
    g_assert_cmpfloat(fabs(a->f[0].q[q] - b->f[0].q[q]), <=, 1e-8 * fabs(a->f[0].q[q])); /* 9 digits */
  free(j);
  g_assert_cmpint(em_drift_ref_from_json(b, "{", &err), ==, EM_ERR_FORMAT);
  g_assert_nonnull(strstr(err.msg, "not JSON"));
  g_assert_cmpint(em_drift_ref_from_json(b, "{\"format\": 2}", &err), ==, EM_ERR_FORMAT);
  g_assert_nonnull(strstr(err.msg, "format 1"));
  g_assert_cmpint(em_drift_ref_from_json(b, "{\"format\":1,\"samples\":5,\"features\":[{\"name\":"
                                            "\"x0\",\"edges\":[1]}],\"class_p\":[]}", &err),
                  ==, EM_ERR_FORMAT);
  g_assert_nonnull(strstr(err.msg, "feature 0"));
  g_free(a);
  g_free(b);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/drift/features", test_features);
  g_test_add_func("/engine/drift/by-hand", test_by_hand);
  g_test_add_func("/engine/drift/windows", test_windows);
  g_test_add_func("/engine/drift/json", test_json);
  return g_test_run();
}
