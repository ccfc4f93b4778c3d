/* reduce.c: em_sum, em_mean (over a dim), em_sum_all, em_mean_all, em_max
 * (with positions) and em_argmax, with backward, one front-end for every
 * device (op-frontend.h). The CPU's kernels are in cpu-reduce.c.
 *
 * The reduce kernel writes x's shape with size 1 at the reduced dim;
 * without keepdim the result is a view that drops it. mean is the sum
 * scaled by 1/R in a second kernel; sum_all and mean_all reduce x seen as
 * one row (an empty x sums to 0, and its mean is NaN, as PyTorch's).
 * Backward of the sums is g broadcast back over the reduced dims (stride
 * 0) times the scale, one unary_backward kernel. Backward of max scatters
 * g to the saved positions with the embedding_backward kernel (rows of
 * width 1): the flat positions are computed on the host, which on a
 * device costs one round trip of the (small) index tensor; a scatter
 * kernel would remove it.
 *
 * max keeps the first maximum (backward goes to it, as in PyTorch) and
 * propagates NaN (the first NaN wins). argmax takes integer inputs too,
 * through a float copy (f64 where the backend has it, exact for i32). */
#include "op-frontend.h"
#include "ops-private.h"

#include <math.h>

/* y (x's shape, size 1 at d) seen as the op's result. */
static em_tensor *result_view(em_tensor *y, const em_tensor *x, int d, bool keepdim) {
  if (keepdim) return y;
  int64_t shape[EM_MAX_DIMS];
  int nd = em_reduced_shape(x, d, false, shape);
  return em_view_as(y, nd, shape);
}

/* ---- sum / mean over a dim, sum_all / mean_all ----------------------------------------- */

/* A view of g (the gradient of a reduction of x) in x's shape, stride 0
 * along the reduced dims (reduced[d]; g has them as size 1 when keepdim,
 * else lacks them). */
static em_tensor *broadcast_back(em_tensor *g, const em_tensor *x, const bool *reduced,
                                 bool keepdim) {
  int64_t stride[EM_MAX_DIMS];
  int gd = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (reduced[d]) {
      stride[d] = 0;
      if (keepdim) gd++;
    } else {
      stride[d] = g->stride[gd++];
    }
  }
  EM_ASSERT(gd == g->ndim);
  return em_view_raw(g, x->ndim, x->shape, stride, g->offset);
}

/* in[0] = x; i[0] = the reduced dim (-1: all); i[1] = keepdim; f[0] = scale. */
static void sum_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  const char *prev = op_backward_begin(n);
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (gx && op_live(gx, g) && em_tensor_numel(gx) > 0) {
    bool reduced[EM_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) reduced[d] = n->i[0] < 0 || d == n->i[0];
    em_tensor *gv = broadcast_back(g, x, reduced, n->i[0] >= 0 && n->i[1]);
    EM_KCALL(op_k(g), unary_backward, EM_KU_MULS, !fresh, gx, gv, gv, gv, n->f[0], 0);
  }
  em_device_set_op(prev);
}

static bool has_sum_kernels(const em_kernels *k, const char *name, const em_tensor *x) {
  return OP_HAS(k, reduce, name, x) && OP_HAS(k, unary, name, x) &&
         OP_HAS(k, unary_backward, name, x);
}

static em_tensor *sum_dim(em_tensor *x, int dim, bool keepdim, bool mean) {
  const char *name = mean ? "mean" : "sum";
  EM_ASSERT(em_dtype_is_float(x->dtype) && x->ndim > 0);
  OP_BEGIN(name, 1, x);
  int d = em_dim_norm(dim, x->ndim);
  int64_t keep[EM_MAX_DIMS];
  em_reduced_shape(x, d, true, keep);
  double scale = mean ? 1.0 / (double)x->shape[d] : 1.0;
  em_tensor *y = em_empty_on(x->device, x->dtype, x->ndim, keep);
  em_tensor *s = mean ? em_empty_on(x->device, x->dtype, x->ndim, keep) : y; /* the sum */
  const em_kernels *k = op_k(x);
  const bool live = op_live(x, y, s) && has_sum_kernels(k, name, x);
  if (live && em_tensor_numel(y) > 0) {
    EM_KCALL(k, reduce, EM_KR_SUM, s, NULL, x, d);
    if (mean) EM_KCALL(k, unary, EM_KU_MULS, y, s, scale, 0);
  }
  em_tensor *out = result_view(y, x, d, keepdim);
  if (live && em_needs_grad(1, &x)) {
    em_node *nd = em_record(name, sum_backward, out, 1, &x);
    nd->i[0] = d;
    nd->i[1] = keepdim;
    nd->f[0] = scale;
  }
  return OP_END(out);
}

em_tensor *em_sum(em_tensor *x, int dim, bool keepdim) { return sum_dim(x, dim, keepdim, false); }
em_tensor *em_mean(em_tensor *x, int dim, bool keepdim) { return sum_dim(x, dim, keepdim, true); }

static em_tensor *sum_all(em_tensor *x, bool mean) {
  const char *name = mean ? "mean_all" : "sum_all";
  EM_ASSERT(em_dtype_is_float(x->dtype));
  OP_BEGIN(name, 1, x);
  int64_t numel = em_tensor_numel(x), one = 1;
  double scale = mean ? 1.0 / (double)numel : 1.0;
  em_tensor *y = em_empty_on(x->device, x->dtype, 1, &one); /* (1) */
  em_tensor *xc = em_contiguous_nograd(x);
  em_tensor *s = mean ? em_empty_on(x->device, x->dtype, 1, &one) : y; /* the sum */
  const em_kernels *k = op_k(x);
  const bool live = op_live(xc, y, s) && has_sum_kernels(k, name, x) && OP_HAS(k, fill, name, x);
  if (live) {
    if (numel == 0) {
      EM_KCALL(k, fill, y, mean ? NAN : 0.0);
    } else {
      EM_KCALL(k, reduce, EM_KR_SUM, s, NULL, em_view_as(xc, 1, &numel), 0);
      if (mean) EM_KCALL(k, unary, EM_KU_MULS, y, s, scale, 0);
    }
  }
  em_tensor *out = em_view_as(y, 0, NULL);
  if (live && em_needs_grad(1, &x)) {
    em_node *nd = em_record(name, sum_backward, out, 1, &x);
    nd->i[0] = -1;
    nd->f[0] = scale;
  }
  return OP_END(out);
}

em_tensor *em_sum_all(em_tensor *x) { return sum_all(x, false); }
em_tensor *em_mean_all(em_tensor *x) { return sum_all(x, true); }

/* ---- max / argmax ---------------------------------------------------------------------------- */

/* in[0] = x; saved[0] = positions (x's shape, 1 at d); i[0] = d. */
static void max_backward(em_node *n) {
  em_tensor *x = n->in[0], *idx = n->saved[0], *g = n->out->grad;
  const char *prev = op_backward_begin(n);
  int d = (int)n->i[0];
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  int64_t O = 1, R = x->shape[d], I = 1;
  for (int k = 0; k < d; k++) O *= x->shape[k];
  for (int k = d + 1; k < x->ndim; k++) I *= x->shape[k];
  int64_t m = O * I, flat_shape[1] = {m}, rows[2] = {O * R * I, 1}, gshape[2] = {m, 1};
  em_tensor *flat = gx && m > 0 ? em_empty_on(x->device, EM_DTYPE_I64, 1, flat_shape) : NULL;
  if (flat && op_live(gx, g, idx, flat)) {
    const em_kernels *k = op_k(g);
    if (fresh) EM_KCALL(k, fill, gx, 0.0);
    /* position (o, idx, i) of x for each output (o, i) (O * I) */
    int64_t *pos = em_scratch(sizeof(int64_t) * (size_t)m);
    em_tensor_download(idx, pos);
    for (int64_t o = 0; o < O; o++)
      for (int64_t i = 0; i < I; i++) pos[o * I + i] = (o * R + pos[o * I + i]) * I + i;
    em_tensor_upload(flat, pos);
    em_tensor *gc = em_contiguous_nograd(g);
    if (op_live(gc))
      EM_KCALL(k, embedding_backward, em_view_as(gx, 2, rows), em_view_as(gc, 2, gshape), flat);
  }
  em_device_set_op(prev);
}

/* Values (x's shape, 1 at d; for integer x through a float copy) and
 * positions along d; false when the kernels were skipped. */
static bool max_run(em_tensor *x, int d, const char *name, em_tensor **values, em_tensor **pos) {
  int64_t keep[EM_MAX_DIMS];
  em_reduced_shape(x, d, true, keep);
  EM_ASSERT(x->shape[d] > 0 && "max over an empty dim");
  const em_kernels *k = op_k(x);
  em_tensor *xf = x;
  bool live = OP_HAS(k, reduce, name, x);
  if (!em_dtype_is_float(x->dtype)) {
    xf = em_empty_on(x->device, em_backend_of(x)->f64 ? EM_DTYPE_F64 : EM_DTYPE_F32, x->ndim,
                     x->shape);
    live = live && OP_HAS(k, copy, name, x);
    if (live && op_live(x, xf) && em_tensor_numel(x) > 0) EM_KCALL(k, copy, xf, x);
  }
  *values = em_empty_on(x->device, xf->dtype, x->ndim, keep);
  *pos = em_empty_on(x->device, EM_DTYPE_I64, x->ndim, keep);
  live = live && op_live(xf, *values, *pos);
  if (live && em_tensor_numel(*values) > 0) EM_KCALL(k, reduce, EM_KR_MAX, *values, *pos, xf, d);
  return live;
}

em_tensor *em_max(em_tensor *x, int dim, bool keepdim, em_tensor **argmax) {
  EM_ASSERT(em_dtype_is_float(x->dtype) && x->ndim > 0);
  OP_BEGIN("max", 1, x);
  int d = em_dim_norm(dim, x->ndim);
  em_tensor *y, *idx;
  bool live = max_run(x, d, "max", &y, &idx);
  em_tensor *out = result_view(y, x, d, keepdim);
  if (live && em_needs_grad(1, &x) && OP_HAS(op_k(x), embedding_backward, "max", x) &&
      OP_HAS(op_k(x), fill, "max", x)) {
    em_node *nd = em_record("max", max_backward, out, 1, &x);
    nd->saved[0] = idx;
    nd->i[0] = d;
  }
  if (argmax) *argmax = result_view(idx, x, d, keepdim);
  return OP_END(out);
}

em_tensor *em_argmax(em_tensor *x, int dim, bool keepdim) {
  EM_ASSERT(x->ndim > 0);
  OP_BEGIN("argmax", 1, x);
  int d = em_dim_norm(dim, x->ndim);
  em_tensor *y, *idx;
  max_run(x, d, "argmax", &y, &idx);
  return OP_END(result_view(idx, x, d, keepdim));
}
