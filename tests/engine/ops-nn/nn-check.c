/* nn-check.c: fast kernels against the plain loop reference. */
#include "nn-check.h"

#include <glib.h>

#include <math.h>
#include <stdio.h>

double nc_at(const em_tensor *t, int64_t k) {
  int64_t idx[EM_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    idx[d] = k % t->shape[d];
    k /= t->shape[d];
  }
  return em_tensor_get(t, idx);
}

em_tensor *nc_convert(const em_tensor *t, em_dtype dt) {
  em_tensor *c = em_tensor_new(dt, t->ndim, t->shape, NULL);
  em_tensor_copy_(c, t);
  em_tensor_set_requires_grad(c, em_tensor_requires_grad(t));
  return c;
}

em_tensor *nc_keep(const em_tensor *t) {
  em_tensor *c = em_tensor_new(t->dtype, t->ndim, t->shape, NULL);
  em_tensor_copy_(c, t);
  return c;
}

double nc_rel_diff(const em_tensor *a, const em_tensor *b) {
  int64_t n = em_tensor_numel(b);
  if (n != em_tensor_numel(a)) return INFINITY;
  double scale = 1, worst = 0;
  for (int64_t k = 0; k < n; k++) scale = fmax(scale, fabs(nc_at(b, k)));
  for (int64_t k = 0; k < n; k++) {
    double d = fabs(nc_at(a, k) - nc_at(b, k));
    if (!(d <= worst)) worst = d; /* NaN counts as worst */
  }
  return worst / scale;
}

/* Forward and backward in one scope; returns a persistent copy of the
 * output and leaves the gradients on the inputs. */
static em_tensor *run_once(gc_fn f, int n, em_tensor **in, void *ctx) {
  for (int i = 0; i < n; i++)
    if (in[i] && em_tensor_requires_grad(in[i])) em_tensor_zero_grad(in[i]);
  em_scope *s = em_scope_begin();
  em_tensor *y = f(in, ctx);
  em_tensor *kept = nc_keep(y);
  if (em_tensor_requires_grad(y)) {
    em_tensor *r = em_empty(y->dtype, y->ndim, y->shape);
    em_rng rng;
    em_rng_seed(&rng, 99);
    for (int64_t k = 0; k < em_tensor_numel(r); k++) {
      double v = em_rng_uniform(&rng) * 2 - 1;
      if (r->dtype == EM_DTYPE_F32) em_f32(r)[k] = (float)v;
      else em_f64(r)[k] = v;
    }
    em_backward_grad(y, r);
  }
  em_scope_end(s);
  return kept;
}

bool nc_fast_vs_ref(const char *what, gc_fn f, int n, em_tensor **inputs, void *ctx, double tol) {
  em_tensor *in32[EM_NODE_MAX_INPUTS * 2];
  g_assert(n <= (int)G_N_ELEMENTS(in32));
  for (int i = 0; i < n; i++)
    in32[i] = inputs[i] && inputs[i]->dtype == EM_DTYPE_F64 ? nc_convert(inputs[i], EM_DTYPE_F32)
                                                            : inputs[i];
  em_tensor *y64 = run_once(f, n, inputs, ctx);
  em_tensor *y32 = run_once(f, n, in32, ctx);
  bool ok = true;
  double d = nc_rel_diff(y32, y64);
  if (!(d <= tol)) {
    fprintf(stderr, "%s: output differs from the reference by %g\n", what, d);
    ok = false;
  }
  for (int i = 0; i < n; i++) {
    if (!inputs[i] || !em_tensor_requires_grad(inputs[i])) continue;
    if (!inputs[i]->grad || !in32[i]->grad) {
      fprintf(stderr, "%s: input %d received no gradient\n", what, i);
      ok = false;
      continue;
    }
    d = nc_rel_diff(in32[i]->grad, inputs[i]->grad);
    if (!(d <= tol)) {
      fprintf(stderr, "%s: gradient of input %d differs from the reference by %g\n", what, i, d);
      ok = false;
    }
  }
  for (int i = 0; i < n; i++)
    if (in32[i] != inputs[i]) em_tensor_free(in32[i]);
  em_tensor_free(y64);
  em_tensor_free(y32);
  return ok;
}
