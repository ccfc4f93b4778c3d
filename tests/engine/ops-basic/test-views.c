/* test-views.c: reshape, flatten, transpose, permute, slice, expand,
 * contiguous, concat and cast: geometry and storage sharing, values, and
 * gradients flowing through views (and chains of views) to persistent
 * parameters; the backward walk's memory (autograd.c): gradients handed
 * on without a copy are right when the input has other uses too, an
 * intermediate's gradient is gone (NULL) after backward, and a chain's
 * backward holds a few of its gradients at a time, not all. */
#include "ops-test.h"

/* x (2, 3, 4) with x[i, j, k] = 100 i + 10 j + k, as a persistent f64. */
static em_tensor *iota234(void) {
  int64_t shape[3] = {2, 3, 4};
  em_tensor *x = em_tensor_new(EM_DTYPE_F64, 3, shape, NULL);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) em_f64(x)[(i * 3 + j) * 4 + k] = 100 * i + 10 * j + k;
  return x;
}

static double at3(const em_tensor *t, int64_t i, int64_t j, int64_t k) {
  int64_t idx[3] = {i, j, k};
  return em_tensor_get(t, idx);
}

/* ---- reshape / flatten ------------------------------------------------------------------ */

static void test_reshape_forward(void) {
  em_tensor *x = iota234();
  em_scope *s = em_scope_begin();
  int64_t sh[2] = {6, -1};
  em_tensor *y = em_reshape(x, 2, sh);
  int64_t want[2] = {6, 4};
  g_assert_true(ot_shape_is(y, 2, want));
  g_assert_true(y->data == x->data); /* a view */
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(ot_elem(y, k), ==, ot_elem(x, k));

  /* a transposed tensor cannot be viewed flat: contiguous copy */
  em_tensor *t = em_transpose(x, 1, 2); /* (2, 4, 3) */
  int64_t flat[1] = {24};
  em_tensor *f = em_reshape(t, 1, flat);
  g_assert_true(f->data != x->data);
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(ot_elem(f, k), ==, ot_elem(t, k));

  /* ...but a permutation whose leading dims stay in order merges them as
   * a view: (3, 4, 2) with strides (4, 1, 12) -> (12, 2) */
  em_tensor *pm = em_permute(x, (const int[]){1, 2, 0});
  int64_t lead[2] = {12, 2};
  em_tensor *m = em_reshape(pm, 2, lead);
  g_assert_true(m->data == x->data);
  g_assert_cmpint(m->stride[0], ==, 1);
  g_assert_cmpint(m->stride[1], ==, 12);
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(ot_elem(m, k), ==, ot_elem(pm, k));

  /* a slice along dim 0 splits and merges inner dims as a view */
  em_tensor *sl = em_slice(x, 0, 1, 2, 1); /* (1, 3, 4) */
  int64_t sp[3] = {3, 2, 2};
  em_tensor *v = em_reshape(sl, 3, sp);
  g_assert_true(v->data == x->data);
  for (int k = 0; k < 12; k++) g_assert_cmpfloat(ot_elem(v, k), ==, 100 + ot_elem(x, k));

  /* size-1 dims come and go */
  int64_t ones[5] = {1, 2, 1, 12, 1};
  em_tensor *o = em_reshape(t, 5, ones);
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(ot_elem(o, k), ==, ot_elem(t, k));

  /* flatten */
  em_tensor *fl = em_flatten(x, 1);
  int64_t fw[2] = {2, 12};
  g_assert_true(ot_shape_is(fl, 2, fw));
  g_assert_true(fl->data == x->data);
  em_tensor *fl2 = em_flatten(x, -2);
  int64_t fw2[2] = {2, 12};
  g_assert_true(ot_shape_is(fl2, 2, fw2));
  em_tensor *fl0 = em_flatten(t, 0);
  g_assert_cmpint(fl0->ndim, ==, 1);
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(ot_elem(fl0, k), ==, ot_elem(t, k));
  em_scope_end(s);
  em_tensor_free(x);
}

static em_tensor *f_reshape(em_tensor **in, void *ctx) {
  int64_t sh[2] = {-1, 6};
  return em_reshape(in[0], 2, sh);
}
static em_tensor *f_reshape_copy(em_tensor **in, void *ctx) {
  int64_t sh[2] = {4, 6};
  return em_reshape(em_transpose(in[0], 0, 2), 2, sh);
}
static em_tensor *f_flatten(em_tensor **in, void *ctx) {
  return em_flatten(em_permute(in[0], (const int[]){1, 0, 2}), 1);
}

static void test_reshape_backward(void) {
  int64_t shape[3] = {2, 3, 4};
  em_tensor *a[1] = {gc_rand(EM_DTYPE_F64, 3, shape, -1, 1, 1, true)};
  ot_check_accumulates("reshape", f_reshape, 1, a, NULL);
  ot_gradcheck("reshape", f_reshape, 1, a, NULL, NULL);
  em_tensor *b[1] = {gc_rand(EM_DTYPE_F64, 3, shape, -1, 1, 2, true)};
  ot_gradcheck("reshape-copy", f_reshape_copy, 1, b, NULL, NULL);
  em_tensor *c[1] = {gc_rand(EM_DTYPE_F64, 3, shape, -1, 1, 3, true)};
  ot_gradcheck("flatten", f_flatten, 1, c, NULL, NULL);
}

/* ---- transpose / permute ------------------------------------------------------------------- */

static void test_permute_forward(void) {
  em_tensor *x = iota234();
  em_scope *s = em_scope_begin();
  em_tensor *t = em_transpose(x, 0, -1); /* (4, 3, 2) */
  int64_t ts[3] = {4, 3, 2};
  g_assert_true(ot_shape_is(t, 3, ts) && t->data == x->data);
  em_tensor *p = em_permute(x, (const int[]){2, 0, 1}); /* (4, 2, 3) */
  int64_t ps[3] = {4, 2, 3};
  g_assert_true(ot_shape_is(p, 3, ps));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) {
        g_assert_cmpfloat(at3(t, k, j, i), ==, at3(x, i, j, k));
        g_assert_cmpfloat(at3(p, k, i, j), ==, at3(x, i, j, k));
      }
  em_scope_end(s);
  em_tensor_free(x);
}

static em_tensor *f_transpose(em_tensor **in, void *ctx) { return em_transpose(in[0], 1, 0); }
static em_tensor *f_permute(em_tensor **in, void *ctx) {
  /* a permuted parameter scaled element-wise: non-trivial upstream grads */
  em_tensor *p = em_permute(in[0], (const int[]){2, 0, 1});
  return em_mul(p, in[1]);
}

static void test_permute_backward(void) {
  int64_t s2[2] = {3, 5}, s3[3] = {2, 3, 4}, sw[3] = {4, 2, 3};
  em_tensor *a[1] = {gc_rand(EM_DTYPE_F64, 2, s2, -1, 1, 4, true)};
  ot_check_accumulates("transpose", f_transpose, 1, a, NULL);
  ot_gradcheck("transpose", f_transpose, 1, a, NULL, NULL);
  em_tensor *b[2] = {gc_rand(EM_DTYPE_F64, 3, s3, -1, 1, 5, true),
                     gc_rand(EM_DTYPE_F64, 3, sw, -1, 1, 6, true)};
  ot_gradcheck("permute", f_permute, 2, b, NULL, NULL);
}

/* ---- slice ------------------------------------------------------------------------------------- */

typedef struct {
  int dim;
  int64_t start, end, step, want_len;
} slice_case;

static const slice_case slices[] = {
    {1, 0, 2, 1, 2},     {1, 1, 3, 1, 2},   {2, 1, 4, 2, 2},  {-1, -3, -1, 1, 2},
    {2, -100, 100, 3, 2}, {0, 1, 2, 1, 1},   {2, 3, 1, 1, 0},  {1, -1, 3, 1, 1},
    {2, 0, 4, 5, 1},      {-3, -2, 100, 1, 2},
};

static void test_slice_forward(void) {
  em_tensor *x = iota234();
  em_scope *s = em_scope_begin();
  for (size_t c = 0; c < sizeof slices / sizeof slices[0]; c++) {
    const slice_case *sc = &slices[c];
    em_tensor *y = em_slice(x, sc->dim, sc->start, sc->end, sc->step);
    int d = sc->dim < 0 ? sc->dim + 3 : sc->dim;
    g_assert_cmpint(y->shape[d], ==, sc->want_len);
    g_assert_true(y->data == x->data);
    int64_t size = x->shape[d], st = sc->start < 0 ? sc->start + size : sc->start;
    if (st < 0) st = 0;
    int64_t n = em_tensor_numel(y);
    for (int64_t e = 0; e < n; e++) {
      int64_t idx[3], r = e;
      for (int k = 2; k >= 0; k--) {
        idx[k] = r % y->shape[k];
        r /= y->shape[k];
      }
      int64_t src[3] = {idx[0], idx[1], idx[2]};
      src[d] = st + idx[d] * sc->step;
      g_assert_cmpfloat(em_tensor_get(y, idx), ==, em_tensor_get(x, src));
    }
  }
  /* slice of a slice */
  em_tensor *y = em_slice(em_slice(x, 2, 1, 4, 1), 2, 0, 3, 2); /* k = 1, 3 */
  g_assert_cmpint(y->shape[2], ==, 2);
  g_assert_cmpfloat(at3(y, 1, 2, 0), ==, 121);
  g_assert_cmpfloat(at3(y, 1, 2, 1), ==, 123);
  em_scope_end(s);
  em_tensor_free(x);
}

static em_tensor *f_slice(em_tensor **in, void *ctx) {
  const slice_case *sc = ctx;
  return em_slice(in[0], sc->dim, sc->start, sc->end, sc->step);
}
static em_tensor *f_slice_chain(em_tensor **in, void *ctx) {
  /* rows 1.. of a transposed parameter, every other column, times w */
  em_tensor *t = em_slice(em_slice(em_transpose(in[0], 0, 1), 0, 1, 100, 1), 1, -5, 100, 2);
  return em_mul(t, in[1]);
}

static void test_slice_backward(void) {
  int64_t shape[3] = {2, 3, 4};
  for (size_t c = 0; c < sizeof slices / sizeof slices[0]; c++) {
    if (slices[c].want_len == 0) continue;
    em_tensor *in[1] = {gc_rand(EM_DTYPE_F64, 3, shape, -1, 1, 7 + (unsigned)c, true)};
    ot_check_accumulates("slice", f_slice, 1, in, (void *)&slices[c]);
    ot_gradcheck("slice", f_slice, 1, in, (void *)&slices[c], NULL);
  }
  int64_t ps[2] = {6, 4}, ws[2] = {3, 3};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, ps, -1, 1, 30, true),
                      gc_rand(EM_DTYPE_F64, 2, ws, -1, 1, 31, true)};
  ot_gradcheck("slice-chain", f_slice_chain, 2, in, NULL, NULL);

  /* outside the slice the gradient is exactly zero */
  em_tensor *x = iota234();
  em_tensor_set_requires_grad(x, true);
  em_scope *s = em_scope_begin();
  em_backward(em_sum_all(em_slice(x, 2, 1, 3, 1)));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++)
        g_assert_cmpfloat(em_f64(x->grad)[(i * 3 + j) * 4 + k], ==, (k == 1 || k == 2) ? 1 : 0);
  em_scope_end(s);
  em_tensor_free(x);
}

/* ---- expand ----------------------------------------------------------------------------------------- */

static void test_expand_forward(void) {
  int64_t s13[2] = {1, 3};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 2, s13, -1, 1, 8, false);
  em_scope *s = em_scope_begin();
  int64_t to[3] = {2, 4, -1};
  em_tensor *y = em_expand(x, 3, to);
  int64_t want[3] = {2, 4, 3};
  g_assert_true(ot_shape_is(y, 3, want) && y->data == x->data);
  g_assert_cmpint(y->stride[0], ==, 0);
  g_assert_cmpint(y->stride[1], ==, 0);
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(ot_elem(y, k), ==, em_f32(x)[k % 3]);
  /* expanded tensors feed the other ops (stride-0 operands) */
  em_tensor *c = em_contiguous(y);
  g_assert_true(em_tensor_is_contiguous(c));
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(em_f32(c)[k], ==, em_f32(x)[k % 3]);
  em_tensor *sm = em_sum(y, 1, false);
  for (int k = 0; k < 6; k++)
    g_assert_cmpfloat_with_epsilon(em_f32(sm)[k], 4 * em_f32(x)[k % 3], 1e-6);
  em_scope_end(s);
  em_tensor_free(x);
}

static em_tensor *f_expand(em_tensor **in, void *ctx) {
  int64_t to[3] = {2, 4, 3};
  return em_mul(em_expand(in[0], 3, to), in[1]);
}
static em_tensor *f_expand_col(em_tensor **in, void *ctx) {
  int64_t to[2] = {-1, 5};
  return em_expand(in[0], 2, to);
}

static void test_expand_backward(void) {
  int64_t s13[2] = {1, 3}, sw[3] = {2, 4, 3}, s31[2] = {3, 1};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, s13, -1, 1, 9, true),
                      gc_rand(EM_DTYPE_F64, 3, sw, -1, 1, 10, false)};
  ot_check_accumulates("expand", f_expand, 2, in, NULL);
  ot_gradcheck("expand", f_expand, 2, in, NULL, NULL);
  em_tensor *c[1] = {gc_rand(EM_DTYPE_F64, 2, s31, -1, 1, 11, true)};
  ot_gradcheck("expand-col", f_expand_col, 1, c, NULL, NULL);
}

/* ---- contiguous --------------------------------------------------------------------------------------- */

static em_tensor *f_contiguous(em_tensor **in, void *ctx) {
  return em_contiguous(em_transpose(in[0], 0, 1));
}

static void test_contiguous(void) {
  em_tensor *x = iota234();
  em_scope *s = em_scope_begin();
  g_assert_true(em_contiguous(x) == x);
  em_tensor *t = em_transpose(x, 0, 2);
  em_tensor *c = em_contiguous(t);
  g_assert_true(c != t && em_tensor_is_contiguous(c));
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(em_f64(c)[k], ==, ot_elem(t, k));
  /* integer tensors copy too */
  int64_t is[2] = {2, 3};
  double iv[6] = {1, 2, 3, 4, 5, 6};
  em_tensor *xi = ot_new(EM_DTYPE_I64, 2, is, iv);
  em_tensor *ci = em_contiguous(em_transpose(xi, 0, 1));
  int64_t want[6] = {1, 4, 2, 5, 3, 6};
  for (int k = 0; k < 6; k++) g_assert_cmpint(em_i64(ci)[k], ==, want[k]);
  em_scope_end(s);
  em_tensor_free(x);
  em_tensor_free(xi);
  int64_t shape[2] = {3, 4};
  em_tensor *in[1] = {gc_rand(EM_DTYPE_F64, 2, shape, -1, 1, 12, true)};
  ot_check_accumulates("contiguous", f_contiguous, 1, in, NULL);
  ot_gradcheck("contiguous", f_contiguous, 1, in, NULL, NULL);
}

/* ---- concat -------------------------------------------------------------------------------------------- */

static void test_concat_forward(void) {
  em_tensor *x = iota234();
  em_scope *s = em_scope_begin();
  em_tensor *parts[3] = {em_slice(x, 2, 0, 1, 1), em_slice(x, 2, 1, 3, 1), em_slice(x, 2, 3, 4, 1)};
  em_tensor *y = em_concat(3, parts, -1);
  g_assert_true(ot_shape_is(y, 3, x->shape));
  for (int k = 0; k < 24; k++) g_assert_cmpfloat(em_f64(y)[k], ==, em_f64(x)[k]);
  em_tensor *two[2] = {x, em_transpose(em_transpose(x, 0, 1), 0, 1)};
  em_tensor *z = em_concat(2, two, 0);
  int64_t zs[3] = {4, 3, 4};
  g_assert_true(ot_shape_is(z, 3, zs));
  for (int k = 0; k < 48; k++) g_assert_cmpfloat(em_f64(z)[k], ==, em_f64(x)[k % 24]);
  em_scope_end(s);
  em_tensor_free(x);
}

static em_tensor *f_concat(em_tensor **in, void *ctx) {
  int dim = GPOINTER_TO_INT(ctx);
  /* five inputs (more than a tape node holds), one of them a view */
  em_tensor *xs[5] = {in[0], in[1], em_transpose(in[2], 0, 1), in[3], in[4]};
  return em_concat(5, xs, dim);
}

static void test_concat_backward(void) {
  int64_t a[2] = {2, 3}, b[2] = {1, 3}, c[2] = {3, 2}, d[2] = {4, 3};
  em_tensor *in[5] = {gc_rand(EM_DTYPE_F64, 2, a, -1, 1, 13, true),
                      gc_rand(EM_DTYPE_F64, 2, b, -1, 1, 14, false),
                      gc_rand(EM_DTYPE_F64, 2, c, -1, 1, 15, true),
                      gc_rand(EM_DTYPE_F64, 2, d, -1, 1, 16, true),
                      gc_rand(EM_DTYPE_F64, 2, a, -1, 1, 17, true)};
  ot_check_accumulates("concat", f_concat, 5, in, GINT_TO_POINTER(0));
  ot_gradcheck("concat", f_concat, 5, in, GINT_TO_POINTER(0), NULL);
  int64_t e[2] = {3, 2}, f[2] = {3, 1}, g[2] = {2, 3}, h[2] = {3, 4};
  em_tensor *in2[5] = {gc_rand(EM_DTYPE_F64, 2, e, -1, 1, 18, true),
                       gc_rand(EM_DTYPE_F64, 2, f, -1, 1, 19, true),
                       gc_rand(EM_DTYPE_F64, 2, g, -1, 1, 20, true),
                       gc_rand(EM_DTYPE_F64, 2, h, -1, 1, 21, true),
                       gc_rand(EM_DTYPE_F64, 2, e, -1, 1, 22, true)};
  ot_gradcheck("concat-dim1", f_concat, 5, in2, GINT_TO_POINTER(-1), NULL);
}

/* ---- cast ------------------------------------------------------------------------------------------------ */

static em_tensor *f_cast(em_tensor **in, void *ctx) {
  /* f64 -> f32 -> f64 through a view, times a weight */
  em_tensor *y = em_cast(em_cast(em_transpose(in[0], 0, 1), EM_DTYPE_F32), EM_DTYPE_F64);
  return em_mul(y, in[1]);
}

static void test_cast(void) {
  int64_t shape[2] = {2, 3};
  double v[6] = {1.5, -2.7, 3.99, -0.5, 1e10, 0.1};
  em_tensor *x = ot_new(EM_DTYPE_F64, 2, shape, v);
  em_tensor_set_requires_grad(x, true);
  em_scope *s = em_scope_begin();
  g_assert_true(em_cast(x, EM_DTYPE_F64) == x);
  em_tensor *f = em_cast(x, EM_DTYPE_F32);
  g_assert_true(f->dtype == EM_DTYPE_F32 && em_tensor_requires_grad(f));
  for (int k = 0; k < 6; k++) g_assert_cmpfloat(em_f32(f)[k], ==, (float)v[k]);
  em_tensor *i = em_cast(em_transpose(x, 0, 1), EM_DTYPE_I64);
  g_assert_false(em_tensor_requires_grad(i)); /* no grad through integers */
  int64_t wt[6] = {1, 0, -2, 10000000000LL, 3, 0}; /* transposed, truncated */
  for (int k = 0; k < 6; k++) g_assert_cmpint(em_i64(i)[k], ==, wt[k]);
  em_tensor *back = em_cast(i, EM_DTYPE_F32);
  g_assert_false(em_tensor_requires_grad(back));
  g_assert_cmpfloat(em_f32(back)[3], ==, 1e10f);
  em_scope_end(s);
  em_tensor_free(x);

  int64_t ps[2] = {3, 2}, ws[2] = {2, 3};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, ps, -1, 1, 23, true),
                      gc_rand(EM_DTYPE_F64, 2, ws, -1, 1, 24, true)};
  gc_opts o = {1e-2, 1e-4, 1e-4}; /* f32 rounding in the middle: coarse step */
  ot_gradcheck("cast", f_cast, 2, in, NULL, &o);
}

/* ---- a chain of views on a parameter --------------------------------------------------------------------------- */

static em_tensor *f_chain(em_tensor **in, void *ctx) {
  /* w (4, 6): reshape to (2, 2, 6), permute, slice, flatten, expand-add a
   * bias, then reduce: every view op's backward on one path */
  int64_t sh[3] = {2, 2, 6};
  em_tensor *t = em_permute(em_reshape(in[0], 3, sh), (const int[]){2, 0, 1}); /* (6, 2, 2) */
  t = em_slice(t, 0, 1, -1, 2);                                                 /* (2, 2, 2) */
  t = em_flatten(t, 1);                                                         /* (2, 4) */
  int64_t to[2] = {2, 4};
  em_tensor *b = em_expand(in[1], 2, to);
  em_tensor *y = em_mul(em_add(t, b), t);
  return em_sum(y, 0, false);
}

static void test_view_chain(void) {
  int64_t ws[2] = {4, 6}, bs[1] = {4};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, ws, -1, 1, 25, true),
                      gc_rand(EM_DTYPE_F64, 1, bs, -1, 1, 26, true)};
  ot_check_accumulates("chain", f_chain, 2, in, NULL);
  ot_gradcheck("chain", f_chain, 2, in, NULL, NULL);
}

/* ---- the backward walk's memory --------------------------------------------------------- */

/* x used twice, through a reshape and directly, in both orders: the
 * first consumer walked hands its gradient to x (em_grad_pass), the
 * other adds into it; d/dx (3 x + reshape(x)) = 4 everywhere. Scope
 * leaves and persistent tensors alike. */
static void test_grad_handed_on(void) {
  int64_t sh[2] = {6, 4}, flat[1] = {24};
  for (int order = 0; order < 2; order++)
    for (int persistent = 0; persistent < 2; persistent++) {
      em_tensor *px = persistent ? iota234() : NULL;
      if (px) em_tensor_set_requires_grad(px, true);
      em_scope *s = em_scope_begin();
      em_tensor *x = px ? em_reshape(px, 2, sh) : em_zeros(EM_DTYPE_F64, 2, sh);
      if (!px) x->flags |= EM_TENSOR_REQUIRES_GRAD;
      em_tensor *a = em_reshape(em_reshape(x, 1, flat), 2, sh), *b = em_mul_scalar(x, 3);
      em_tensor *y = order ? em_add(a, b) : em_add(b, a), *m = em_mul_scalar(y, 1);
      em_backward(em_sum_all(m));
      g_assert_null(m->grad); /* an intermediate's gradient: gone after its node */
      g_assert_null(y->grad);
      g_assert_null(a->grad);
      em_tensor *leaf = px ? px : x;
      g_assert_nonnull(leaf->grad);
      for (int64_t k = 0; k < em_tensor_numel(leaf); k++)
        g_assert_cmpfloat(em_f64(leaf->grad)[k], ==, 4.0);
      em_scope_end(s);
      em_tensor_free(px);
    }
}

/* A chain of 16 ops over 1 MiB tensors: forward keeps its 16 outputs,
 * backward frees each gradient once its node has run, so the peak over
 * the forward's is a few tensors (the gradient in flight, a fresh one,
 * the sum's broadcast), not 16. */
static void test_backward_frees(void) {
  int64_t sh[2] = {256, 1024};
  const int64_t mib = 256 * 1024 * 4;
  em_tensor *w = em_tensor_new(EM_DTYPE_F32, 2, sh, NULL);
  em_tensor_set_requires_grad(w, true);
  em_scope *s = em_scope_begin();
  em_tensor *h = w;
  for (int k = 0; k < 16; k++) h = em_mul_scalar(h, 1.0);
  em_tensor *loss = em_sum_all(h);
  em_memory_stats a, b;
  em_memory_stats_get(&a);
  em_memory_reset_peak();
  em_backward(loss);
  em_memory_stats_get(&b);
  g_assert_cmpint(b.peak_allocated_bytes - a.allocated_bytes, <=, 4 * mib);
  em_scope_end(s);
  em_tensor_free(w);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/ops/reshape/forward", test_reshape_forward);
  g_test_add_func("/engine/ops/reshape/backward", test_reshape_backward);
  g_test_add_func("/engine/ops/permute/forward", test_permute_forward);
  g_test_add_func("/engine/ops/permute/backward", test_permute_backward);
  g_test_add_func("/engine/ops/slice/forward", test_slice_forward);
  g_test_add_func("/engine/ops/slice/backward", test_slice_backward);
  g_test_add_func("/engine/ops/expand/forward", test_expand_forward);
  g_test_add_func("/engine/ops/expand/backward", test_expand_backward);
  g_test_add_func("/engine/ops/contiguous", test_contiguous);
  g_test_add_func("/engine/ops/concat/forward", test_concat_forward);
  g_test_add_func("/engine/ops/concat/backward", test_concat_backward);
  g_test_add_func("/engine/ops/cast", test_cast);
  g_test_add_func("/engine/ops/views/chain-backward", test_view_chain);
  g_test_add_func("/engine/autograd/grad-handed-on", test_grad_handed_on);
  g_test_add_func("/engine/autograd/backward-frees", test_backward_frees);
  return g_test_run();
}
