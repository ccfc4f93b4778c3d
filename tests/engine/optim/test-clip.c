/* test-clip.c: em_clip_grad_norm against torch.nn.utils.clip_grad_norm_,
 * with skipped (absent or stale) gradients and non-finite norms. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-optim.h"
#include "gradcheck.h"
#include "torch-ref.h"

#define N_PARAMS 3

typedef enum { POISON_NONE, POISON_INF, POISON_NAN } poison;

typedef struct {
  const char *path;
  em_dtype dt;
  double max_norm;
  double scale;  /* gradients uniform in (-scale, scale) */
  int absent;    /* index of a param with no current gradient, or -1 */
  poison poison; /* a non-finite value in param 0's gradient */
  /* PyTorch sums f32 squares in f32, so f32 gradients near 1e20 give it
   * an infinite norm; the engine sums in double and clips them. The
   * reference then runs in f64 on the same (f32) values. */
  bool ref_f64;
} clip_case;

static const clip_case cases[] = {
  {"/engine/clip/f64-clipped", EM_DTYPE_F64, 1.0, 1.0, -1, POISON_NONE, false},
  {"/engine/clip/f64-unclipped", EM_DTYPE_F64, 100.0, 1.0, -1, POISON_NONE, false},
  {"/engine/clip/f32-clipped", EM_DTYPE_F32, 0.5, 3.0, -1, POISON_NONE, false},
  {"/engine/clip/f32-skips-absent", EM_DTYPE_F32, 2.0, 1.0, 1, POISON_NONE, false},
  {"/engine/clip/f32-huge", EM_DTYPE_F32, 1.0, 1e20, -1, POISON_NONE, true},
  {"/engine/clip/inf", EM_DTYPE_F32, 1.0, 1.0, -1, POISON_INF, false},
  {"/engine/clip/nan", EM_DTYPE_F64, 1.0, 1.0, 2, POISON_NAN, false},
};
#define N_CASES ((int)G_N_ELEMENTS(cases))

static const int64_t sizes[N_PARAMS] = {17, 5, 40};

/* Params with gradients as the case describes: the absent one has a
 * stale .grad (written before a zero_grad) so clipping must skip it. */
static void make_params(const clip_case *c, int ci, em_tensor **p) {
  for (int i = 0; i < N_PARAMS; i++) {
    p[i] = gc_rand(c->dt, 1, &sizes[i], -1, 1, 10 + (unsigned)i, true);
    em_tensor *g = gc_rand(c->dt, 1, &sizes[i], -c->scale, c->scale,
                           100 * (unsigned)ci + (unsigned)i, false);
    if (i == 0 && c->poison != POISON_NONE) {
      double bad = c->poison == POISON_INF ? INFINITY : NAN;
      if (c->dt == EM_DTYPE_F32) em_f32(g)[3] = (float)bad;
      else em_f64(g)[3] = bad;
    }
    em_grad_accumulate(p[i], g);
    if (i == c->absent) em_tensor_zero_grad(p[i]);
    em_tensor_free(g);
  }
}

static double value(const em_tensor *t, int64_t k) {
  return t->dtype == EM_DTYPE_F32 ? em_f32(t)[k] : em_f64(t)[k];
}

static tref_batch *reference(void) {
  static tref_batch *ref;
  static char *why;
  static bool tried;
  if (!tried) {
    tried = true;
    ref = tref_batch_new();
    for (int ci = 0; ci < N_CASES; ci++) {
      const clip_case *c = &cases[ci];
      em_tensor *p[N_PARAMS];
      make_params(c, ci, p);
      tref_case(ref, "clip");
      tref_word(ref, em_dtype_name(c->ref_f64 ? EM_DTYPE_F64 : c->dt));
      tref_num(ref, c->max_norm);
      tref_int(ref, N_PARAMS);
      for (int i = 0; i < N_PARAMS; i++) {
        tref_int(ref, i != c->absent);
        tref_int(ref, sizes[i]);
        if (i != c->absent)
          for (int64_t k = 0; k < sizes[i]; k++) tref_num(ref, value(p[i]->grad, k));
        em_tensor_free(p[i]);
      }
    }
    tref_batch_run_or_skip(&ref, &why);
  } else if (!ref) {
    g_test_skip(why);
  }
  return ref;
}

static void test_against_torch(gconstpointer data) {
  const clip_case *c = data;
  int ci = (int)(c - cases);
  tref_batch *ref = reference();
  if (!ref) return;
  em_tensor *p[N_PARAMS];
  make_params(c, ci, p);
  /* The gradients before clipping, to check that a non-finite norm
   * leaves them alone. */
  em_tensor *before[N_PARAMS];
  for (int i = 0; i < N_PARAMS; i++) {
    before[i] = em_tensor_new(c->dt, 1, &sizes[i], NULL);
    em_tensor_copy_(before[i], p[i]->grad);
  }
  double total = em_clip_grad_norm(N_PARAMS, p, c->max_norm);
  int64_t n;
  const double *want = tref_result(ref, ci, &n);
  double tol = c->dt == EM_DTYPE_F32 ? 1e-5 : 1e-6;
  if (c->poison != POISON_NONE) {
    g_assert_false(isfinite(want[0]));
    g_assert_false(isfinite(total));
    g_assert_cmpint(isnan(total), ==, isnan(want[0]));
    for (int i = 0; i < N_PARAMS; i++)
      g_assert_cmpmem(em_tensor_ptr(p[i]->grad), em_tensor_nbytes(before[i]),
                      em_tensor_ptr(before[i]), em_tensor_nbytes(before[i]));
  } else {
    /* The norm relative to itself; the gradients relative to it too. */
    double e = fabs(total - want[0]) / want[0];
    if (!(e <= tol)) g_error("%s: norm %.17g, PyTorch %.17g", c->path, total, want[0]);
    const double *w = want + 1;
    for (int i = 0; i < N_PARAMS; i++) {
      if (i == c->absent) {
        g_assert_cmpmem(em_tensor_ptr(p[i]->grad), em_tensor_nbytes(before[i]),
                        em_tensor_ptr(before[i]), em_tensor_nbytes(before[i]));
        continue;
      }
      double scale = fmax(want[0], c->max_norm);
      for (int64_t k = 0; k < sizes[i]; k++, w++) {
        double d = fabs(value(p[i]->grad, k) - *w) / scale;
        if (!(d <= tol))
          g_error("%s: param %d grad %lld: %.17g, PyTorch %.17g", c->path, i, (long long)k,
                  value(p[i]->grad, k), *w);
      }
    }
    g_assert_true(w == want + n);
    /* Clipped means the new norm is max_norm (to the 1e-6 in the
     * coefficient); unclipped means nothing moved. */
    double again = em_clip_grad_norm(N_PARAMS, p, INFINITY);
    if (total > c->max_norm) g_assert_cmpfloat(fabs(again - c->max_norm) / c->max_norm, <, 1e-5);
    else g_assert_cmpfloat(again, ==, total);
  }
  for (int i = 0; i < N_PARAMS; i++) {
    em_tensor_free(p[i]);
    em_tensor_free(before[i]);
  }
}

static void test_no_grads(void) {
  int64_t shape[1] = {4};
  em_tensor *p[2] = {gc_rand(EM_DTYPE_F32, 1, shape, -1, 1, 1, true),
                     gc_rand(EM_DTYPE_F32, 1, shape, -1, 1, 2, true)};
  g_assert_cmpfloat(em_clip_grad_norm(2, p, 1.0), ==, 0.0);
  g_assert_null(p[0]->grad);
  em_tensor_free(p[0]);
  em_tensor_free(p[1]);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  for (int ci = 0; ci < N_CASES; ci++)
    g_test_add_data_func(cases[ci].path, &cases[ci], test_against_torch);
  g_test_add_func("/engine/clip/no-gradients", test_no_grads);
  return g_test_run();
}
