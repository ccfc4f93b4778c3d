/* gradcheck.c: finite-difference gradient checks. */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

em_tensor *gc_rand(em_dtype dt, int ndim, const int64_t *shape, double lo, double hi,
                   unsigned seed, bool requires_grad) {
  em_tensor *t = em_tensor_new(dt, ndim, shape, NULL);
  em_rng r;
  em_rng_seed(&r, seed);
  int64_t n = em_tensor_numel(t);
  for (int64_t k = 0; k < n; k++) {
    double v = lo + (hi - lo) * em_rng_uniform(&r);
    if (dt == EM_DTYPE_F32) em_f32(t)[k] = (float)v;
    else if (dt == EM_DTYPE_F64) em_f64(t)[k] = v;
    else if (dt == EM_DTYPE_I64) em_i64(t)[k] = (int64_t)v;
  }
  em_tensor_set_requires_grad(t, requires_grad);
  return t;
}

/* Element k (row-major) of t as a double. */
static double elem(const em_tensor *t, int64_t k) {
  int64_t idx[EM_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    idx[d] = k % t->shape[d];
    k /= t->shape[d];
  }
  return em_tensor_get(t, idx);
}

double gc_max_abs_diff(const em_tensor *a, const em_tensor *b) {
  int64_t n = em_tensor_numel(a);
  double worst = 0;
  if (n != em_tensor_numel(b)) return INFINITY;
  for (int64_t k = 0; k < n; k++) {
    double d = fabs(elem(a, k) - elem(b, k));
    if (!(d <= worst)) worst = d; /* NaN counts as worst */
  }
  return worst;
}

/* sum(f(inputs) * R) with no tape. */
static double weighted_output(gc_fn f, em_tensor **inputs, void *ctx, const double *R) {
  em_scope *s = em_scope_begin();
  bool prev = em_no_grad_begin();
  em_tensor *out = f(inputs, ctx);
  em_grad_mode_restore(prev);
  double acc = 0;
  int64_t n = em_tensor_numel(out);
  for (int64_t k = 0; k < n; k++) acc += elem(out, k) * R[k];
  em_scope_end(s);
  return acc;
}

bool gradcheck(const char *what, gc_fn f, int n, em_tensor **inputs, void *ctx,
               const gc_opts *opts) {
  gc_opts o = {1e-6, 1e-6, 1e-4};
  if (opts) o = *opts;
  bool ok = true;
  for (int i = 0; i < n; i++)
    if (inputs[i] && em_tensor_requires_grad(inputs[i])) {
      em_tensor_zero_grad(inputs[i]);
    }

  /* analytic */
  em_scope *s = em_scope_begin();
  em_tensor *out = f(inputs, ctx);
  int64_t nout = em_tensor_numel(out);
  double *R = malloc(sizeof(double) * (size_t)(nout ? nout : 1));
  em_rng r;
  em_rng_seed(&r, 1234);
  for (int64_t k = 0; k < nout; k++) R[k] = em_rng_uniform(&r) * 2 - 1;
  em_tensor *Rt = em_empty(out->dtype, out->ndim, out->shape);
  for (int64_t k = 0; k < nout; k++) {
    if (out->dtype == EM_DTYPE_F64) em_f64(Rt)[k] = R[k];
    else em_f32(Rt)[k] = (float)R[k];
  }
  if (!em_tensor_requires_grad(out)) {
    fprintf(stderr, "%s: output does not require grad\n", what);
    em_scope_end(s);
    free(R);
    return false;
  }
  em_backward_grad(out, Rt);
  em_scope_end(s);

  /* numerical, element by element */
  for (int i = 0; i < n; i++) {
    em_tensor *x = inputs[i];
    if (!x || !em_tensor_requires_grad(x)) continue;
    if (!x->grad) {
      fprintf(stderr, "%s: input %d received no gradient\n", what, i);
      ok = false;
      continue;
    }
    EM_ASSERT(x->dtype == EM_DTYPE_F64 && em_tensor_is_contiguous(x));
    double *xv = em_f64(x);
    int64_t m = em_tensor_numel(x);
    double worst = 0;
    int64_t worst_k = -1;
    double worst_a = 0, worst_n = 0;
    for (int64_t k = 0; k < m; k++) {
      double keep = xv[k];
      xv[k] = keep + o.eps;
      double fp = weighted_output(f, inputs, ctx, R);
      xv[k] = keep - o.eps;
      double fm = weighted_output(f, inputs, ctx, R);
      xv[k] = keep;
      double num = (fp - fm) / (2 * o.eps);
      double ana = em_f64(x->grad)[k];
      double err = fabs(ana - num) - (o.atol + o.rtol * fabs(num));
      if (!(err <= 0) && (worst_k < 0 || !(err <= worst))) {
        worst = err;
        worst_k = k;
        worst_a = ana;
        worst_n = num;
      }
    }
    if (worst_k >= 0) {
      fprintf(stderr, "%s: input %d element %lld: analytic %.10g, numerical %.10g\n", what, i,
              (long long)worst_k, worst_a, worst_n);
      ok = false;
    }
  }
  free(R);
  return ok;
}
