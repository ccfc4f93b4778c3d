/* dev-reduce.c: reductions on devices: sum and mean over a dim, sum_all
 * and mean_all, max (with positions) and argmax, with backward.
 *
 * The reduce kernel writes x's shape with size 1 at the reduced dim;
 * without keepdim the result is a view that drops it. mean is the sum
 * scaled by 1/R in a second kernel; sum_all and mean_all reduce x seen as
 * one row. Backward of the sums is g broadcast back over the reduced dim
 * (stride 0) times the scale, one unary_backward kernel. Backward of max
 * scatters g to the saved positions with the embedding_backward kernel
 * (rows of width 1): the flat positions are computed on the host, which
 * costs one round trip of the (small) index tensor; a scatter kernel
 * would remove it. */
#include "dev-private.h"

#include "../core/grad-accumulate.h"
#include "../core/shape.h"

/* y (x's shape, size 1 at d) seen as the op's result. */
static em_tensor *result_view(em_tensor *y, const em_tensor *x, int d, bool keepdim) {
  if (keepdim) return y;
  int64_t shape[EM_MAX_DIMS];
  int nd = em_reduced_shape(x, d, false, shape);
  return em_dev_view_as(y, nd, shape);
}

/* ---- sum / mean over a dim, sum_all / mean_all ----------------------------------------- */

/* in[0] = x; i[0] = the reduced dim (-1: all); i[1] = keepdim; f[0] = scale. */
static void sum_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (gx && dev_live(gx, g) && em_tensor_numel(gx) > 0) {
    bool reduced[EM_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) reduced[d] = n->i[0] < 0 || d == n->i[0];
    em_tensor *gv = em_dev_broadcast_back(g, x, reduced, n->i[0] >= 0 && n->i[1]);
    EM_KCALL(dev_k(g), unary_backward, EM_KU_MULS, !fresh, gx, gv, gv, gv, n->f[0], 0);
  }
  em_device_set_op(prev);
}

static em_tensor *sum_dim(em_tensor *x, int dim, bool keepdim, bool mean) {
  const char *name = mean ? "mean" : "sum";
  DEV_OP_BEGIN(name, 1, x);
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && x->ndim > 0);
  int d = em_dim_norm(dim, x->ndim);
  int64_t keep[EM_MAX_DIMS];
  em_reduced_shape(x, d, true, keep);
  double scale = mean ? 1.0 / (double)x->shape[d] : 1.0;
  em_tensor *y = dev_empty(x, EM_DTYPE_F32, x->ndim, keep);
  em_tensor *s = mean ? dev_empty(x, EM_DTYPE_F32, x->ndim, keep) : y; /* the sum */
  if (dev_live(x, y, s) && em_tensor_numel(y) > 0) {
    const em_kernels *k = dev_k(x);
    EM_KCALL(k, reduce, EM_KR_SUM, s, NULL, x, d);
    if (mean) EM_KCALL(k, unary, EM_KU_MULS, y, s, scale, 0);
  }
  em_tensor *out = result_view(y, x, d, keepdim);
  if (dev_live(x, y) && em_needs_grad(1, &x)) {
    em_node *nd = em_record(name, sum_backward, out, 1, &x);
    nd->i[0] = d;
    nd->i[1] = keepdim;
    nd->f[0] = scale;
  }
  return DEV_OP_END(out);
}

em_tensor *em_dev_sum(em_tensor *x, int dim, bool keepdim) {
  return sum_dim(x, dim, keepdim, false);
}
em_tensor *em_dev_mean(em_tensor *x, int dim, bool keepdim) {
  return sum_dim(x, dim, keepdim, true);
}

static em_tensor *sum_all(em_tensor *x, bool mean) {
  const char *name = mean ? "mean_all" : "sum_all";
  DEV_OP_BEGIN(name, 1, x);
  EM_ASSERT(x->dtype == EM_DTYPE_F32);
  int64_t numel = em_tensor_numel(x), one = 1;
  double scale = mean ? 1.0 / (double)numel : 1.0;
  em_tensor *y = dev_empty(x, EM_DTYPE_F32, 1, &one); /* (1) */
  em_tensor *xc = em_contiguous_nograd(x);
  em_tensor *s = mean ? dev_empty(x, EM_DTYPE_F32, 1, &one) : y; /* the sum */
  if (dev_live(xc, y, s)) {
    const em_kernels *k = dev_k(x);
    if (numel == 0) {
      EM_KCALL(k, fill, y, 0.0);
    } else {
      EM_KCALL(k, reduce, EM_KR_SUM, s, NULL, em_dev_view_as(xc, 1, &numel), 0);
      if (mean) EM_KCALL(k, unary, EM_KU_MULS, y, s, scale, 0);
    }
  }
  em_tensor *out = em_dev_view_as(y, 0, NULL);
  if (dev_live(xc, y) && em_needs_grad(1, &x)) {
    em_node *nd = em_record(name, sum_backward, out, 1, &x);
    nd->i[0] = -1;
    nd->f[0] = scale;
  }
  return DEV_OP_END(out);
}

em_tensor *em_dev_sum_all(em_tensor *x) { return sum_all(x, false); }
em_tensor *em_dev_mean_all(em_tensor *x) { return sum_all(x, true); }

/* ---- max / argmax ---------------------------------------------------------------------------- */

/* in[0] = x; saved[0] = positions (x's shape, 1 at d); i[0] = d. */
static void max_backward(em_node *n) {
  em_tensor *x = n->in[0], *idx = n->saved[0], *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  int d = (int)n->i[0];
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  int64_t O = 1, R = x->shape[d], I = 1;
  for (int k = 0; k < d; k++) O *= x->shape[k];
  for (int k = d + 1; k < x->ndim; k++) I *= x->shape[k];
  int64_t m = O * I, flat_shape[1] = {m}, rows[2] = {O * R * I, 1}, gshape[2] = {m, 1};
  em_tensor *flat = gx && m > 0 ? dev_empty(x, EM_DTYPE_I64, 1, flat_shape) : NULL; /* (O * I) */
  if (flat && dev_live(gx, g, idx, flat)) {
    if (fresh) EM_KCALL(dev_k(g), fill, gx, 0.0);
    /* position (o, idx, i) of x for each output (o, i) */
    int64_t *pos = em_scratch(sizeof(int64_t) * (size_t)m);
    em_tensor_download(idx, pos);
    for (int64_t o = 0; o < O; o++)
      for (int64_t i = 0; i < I; i++) pos[o * I + i] = (o * R + pos[o * I + i]) * I + i;
    em_tensor_upload(flat, pos);
    em_tensor *gc = em_contiguous_nograd(g);
    if (dev_live(gc))
      EM_KCALL(dev_k(g), embedding_backward, em_dev_view_as(gx, 2, rows), em_dev_view_as(gc, 2, gshape),
                                   flat);
  }
  em_device_set_op(prev);
}

/* Values (x's shape, 1 at d; for integer x through an f32 copy) and
 * positions along d. */
static void max_run(em_tensor *x, int d, em_tensor **values, em_tensor **pos, bool *live) {
  int64_t keep[EM_MAX_DIMS];
  em_reduced_shape(x, d, true, keep);
  EM_ASSERT(x->shape[d] > 0 && "max over an empty dim");
  em_tensor *xf = x;
  if (x->dtype != EM_DTYPE_F32) {
    xf = dev_empty(x, EM_DTYPE_F32, x->ndim, x->shape);
    if (dev_live(x, xf) && em_tensor_numel(x) > 0) EM_KCALL(dev_k(x), copy, xf, x);
  }
  *values = dev_empty(x, EM_DTYPE_F32, x->ndim, keep);
  *pos = dev_empty(x, EM_DTYPE_I64, x->ndim, keep);
  *live = dev_live(xf, *values, *pos);
  if (*live && em_tensor_numel(*values) > 0) EM_KCALL(dev_k(x), reduce, EM_KR_MAX, *values, *pos, xf, d);
}

em_tensor *em_dev_max(em_tensor *x, int dim, bool keepdim, em_tensor **argmax) {
  DEV_OP_BEGIN("max", 1, x);
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && x->ndim > 0);
  int d = em_dim_norm(dim, x->ndim);
  em_tensor *y, *idx;
  bool live;
  max_run(x, d, &y, &idx, &live);
  em_tensor *out = result_view(y, x, d, keepdim);
  if (live && em_needs_grad(1, &x)) {
    em_node *nd = em_record("max", max_backward, out, 1, &x);
    nd->saved[0] = idx;
    nd->i[0] = d;
  }
  if (argmax) *argmax = result_view(idx, x, d, keepdim);
  return DEV_OP_END(out);
}

em_tensor *em_dev_argmax(em_tensor *x, int dim, bool keepdim) {
  em_dev_check_device("argmax", 1, &x);
  EM_OP_BEGIN("argmax", 1, x);
  const char *prev = em_device_set_op("argmax");
  EM_ASSERT(x->ndim > 0);
  int d = em_dim_norm(dim, x->ndim);
  em_tensor *y, *idx;
  bool live;
  max_run(x, d, &y, &idx, &live);
  em_device_set_op(prev);
  return EM_OP_END(result_view(idx, x, d, keepdim));
}
