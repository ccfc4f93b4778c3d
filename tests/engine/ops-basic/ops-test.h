/* ops-test.h: small helpers shared by the basic-op tests (static inline so
 * each test uses what it needs). */
#pragma once

#include <glib.h>
#include <math.h>
#include <string.h>

#include "gradcheck.h"

/* Element k (row-major) of t as a double; any dtype, any strides. */
static inline double ot_elem(const em_tensor *t, int64_t k) {
  int64_t idx[EM_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    idx[d] = k % t->shape[d];
    k /= t->shape[d];
  }
  return em_tensor_get(t, idx);
}

static inline bool ot_shape_is(const em_tensor *t, int ndim, const int64_t *shape) {
  if (t->ndim != ndim) return false;
  for (int d = 0; d < ndim; d++)
    if (t->shape[d] != shape[d]) return false;
  return true;
}

/* |a - b| <= atol + rtol |b| for every element (same numel); NaNs must
 * match. Reports the first offender. */
static inline void ot_assert_close(const char *what, const em_tensor *a, const em_tensor *b,
                                   double atol, double rtol) {
  int64_t n = em_tensor_numel(a);
  g_assert_cmpint(n, ==, em_tensor_numel(b));
  for (int64_t k = 0; k < n; k++) {
    double x = ot_elem(a, k), y = ot_elem(b, k);
    if (isnan(x) || isnan(y)) {
      if (isnan(x) && isnan(y)) continue;
    } else if (x == y || fabs(x - y) <= atol + rtol * fabs(y)) {
      continue;
    }
    g_error("%s: element %lld: %.9g vs %.9g", what, (long long)k, x, y);
  }
}

/* Bit-identical values (f32/f64, same numel, any strides). */
static inline void ot_assert_equal(const char *what, const em_tensor *a, const em_tensor *b) {
  ot_assert_close(what, a, b, 0, 0);
}

/* A non-contiguous view holding the same values as x (contiguous, at
 * least 2-D): the values are stored transposed in a scoped tensor and
 * seen through a transposed view, so ops on it take their strided path. */
static inline em_tensor *ot_strided_copy(const em_tensor *x) {
  int nd = x->ndim;
  int64_t tshape[EM_MAX_DIMS];
  for (int d = 0; d < nd; d++) tshape[d] = x->shape[d];
  tshape[nd - 2] = x->shape[nd - 1];
  tshape[nd - 1] = x->shape[nd - 2];
  em_tensor *store = em_empty(x->dtype, nd, tshape);
  em_tensor *v = em_transpose(store, nd - 2, nd - 1);
  em_tensor_copy_(v, x);
  g_assert_false(em_tensor_is_contiguous(v));
  return v;
}

/* Persistent tensor from values. */
static inline em_tensor *ot_new(em_dtype dt, int ndim, const int64_t *shape, const double *v) {
  em_tensor *t = em_tensor_new(dt, ndim, shape, NULL);
  int64_t n = em_tensor_numel(t);
  for (int64_t k = 0; k < n; k++) {
    if (dt == EM_DTYPE_F32) em_f32(t)[k] = (float)v[k];
    else if (dt == EM_DTYPE_F64) em_f64(t)[k] = v[k];
    else em_i64(t)[k] = (int64_t)v[k];
  }
  return t;
}

/* Runs gradcheck and frees the inputs. */
static inline void ot_gradcheck(const char *what, gc_fn f, int n, em_tensor **in, void *ctx,
                                const gc_opts *o) {
  g_assert_true(gradcheck(what, f, n, in, ctx, o));
  for (int i = 0; i < n; i++) em_tensor_free(in[i]);
}

/* Backward twice without zero_grad must give twice the gradient (the
 * accumulate path of every backward kernel). Frees nothing. */
static inline void ot_check_accumulates(const char *what, gc_fn f, int n, em_tensor **in,
                                        void *ctx) {
  em_tensor *first[8];
  g_assert_cmpint(n, <=, 8);
  for (int pass = 0; pass < 2; pass++) {
    em_scope *s = em_scope_begin();
    if (pass == 0)
      for (int i = 0; i < n; i++)
        if (em_tensor_requires_grad(in[i])) em_tensor_zero_grad(in[i]);
    em_tensor *y = f(in, ctx);
    em_tensor *ones = em_full(y->dtype, y->ndim, y->shape, 1.0);
    em_backward_grad(y, ones);
    em_scope_end(s);
    if (pass == 0)
      for (int i = 0; i < n; i++) {
        first[i] = NULL;
        if (!em_tensor_requires_grad(in[i])) continue;
        g_assert_nonnull(in[i]->grad);
        first[i] = em_tensor_new(in[i]->dtype, in[i]->ndim, in[i]->shape, NULL);
        em_tensor_copy_(first[i], in[i]->grad);
      }
  }
  for (int i = 0; i < n; i++) {
    if (!first[i]) continue;
    int64_t m = em_tensor_numel(first[i]);
    for (int64_t k = 0; k < m; k++) {
      double a = ot_elem(in[i]->grad, k), b = 2 * ot_elem(first[i], k);
      if (!(fabs(a - b) <= 1e-9 * (1 + fabs(b))))
        g_error("%s: input %d element %lld: accumulated %.12g, expected %.12g", what, i,
                (long long)k, a, b);
    }
    em_tensor_free(first[i]);
  }
}
