/* dev-views.c: views and layout on devices.
 *
 * reshape, flatten, transpose, permute, slice and expand only change
 * shape, strides and offset (em_view_raw keeps the device), and their
 * backward passes touch data only through em_grad_add, em_add_into and
 * em_reduce_to_shape, which hand off to the kernels: the implementations
 * of engine/ops/views.c serve every device, and em_dev_reshape & co. are
 * those. contiguous, concat and cast make new data, so they are here:
 * outputs on the input's device, copies through the copy kernel (which
 * converts dtypes for cast). */
#include "dev-private.h"

#include "../ops/ops-private.h"

#include <string.h>

em_tensor *em_dev_reshape(em_tensor *x, int ndim, const int64_t *shape) {
  return em_reshape(x, ndim, shape);
}
em_tensor *em_dev_flatten(em_tensor *x, int start_dim) { return em_flatten(x, start_dim); }
em_tensor *em_dev_transpose(em_tensor *x, int d0, int d1) { return em_transpose(x, d0, d1); }
em_tensor *em_dev_permute(em_tensor *x, const int *perm) { return em_permute(x, perm); }
em_tensor *em_dev_slice(em_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
  return em_slice(x, dim, start, end, step);
}
em_tensor *em_dev_expand(em_tensor *x, int ndim, const int64_t *shape) {
  return em_expand(x, ndim, shape);
}

/* ---- contiguous ------------------------------------------------------------- */

/* g (contiguous, the output's shape) seen in x's shape. */
static void contiguous_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  em_grad_add(x, em_dev_view_as(g, x->ndim, x->shape));
  em_device_set_op(prev);
}

em_tensor *em_dev_contiguous(em_tensor *x) {
  if (em_tensor_is_contiguous(x)) return x;
  em_dev_check_device("contiguous", 1, &x);
  EM_OP_BEGIN("contiguous", 1, x);
  const char *prev = em_device_set_op("contiguous");
  em_tensor *y = dev_empty_like(x);
  if (dev_live(x, y)) {
    dev_k(x)->copy(y, x);
    if (em_needs_grad(1, &x)) em_record("contiguous", contiguous_backward, y, 1, &x);
  }
  em_device_set_op(prev);
  return EM_OP_END(y);
}

/* ---- concat ----------------------------------------------------------------------- */

/* Input k's region of a tensor of the output's shape. */
static em_tensor *concat_region(em_tensor *t, int d, int64_t at, const em_tensor *xk) {
  return em_view_raw(t, t->ndim, xk->shape, t->stride, t->offset + at * t->stride[d]);
}

static void concat_backward(em_node *n) {
  em_tensor *const *xs = n->ctx;
  int d = (int)n->i[0];
  int64_t count = n->i[1], at = 0;
  em_tensor *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  for (int64_t k = 0; k < count; k++) {
    if (em_tensor_requires_grad(xs[k])) em_grad_add(xs[k], concat_region(g, d, at, xs[k]));
    at += xs[k]->shape[d];
  }
  em_device_set_op(prev);
}

em_tensor *em_dev_concat(int n, em_tensor *const *xs, int dim) {
  EM_ASSERT(n >= 1);
  em_dev_check_device("concat", n, xs);
  const int em_op_token_ = em_profile_hooks_on() ? em_op_begin_("concat", n < 4 ? n : 4, xs) : -1;
  const char *prev = em_device_set_op("concat");
  const em_tensor *x0 = xs[0];
  int d = em_dim_norm(dim, x0->ndim);
  int64_t shape[EM_MAX_DIMS];
  for (int k = 0; k < x0->ndim; k++) shape[k] = x0->shape[k];
  shape[d] = 0;
  for (int i = 0; i < n; i++) {
    EM_ASSERT(xs[i]->dtype == x0->dtype && xs[i]->ndim == x0->ndim);
    for (int k = 0; k < x0->ndim; k++) EM_ASSERT(k == d || xs[i]->shape[k] == x0->shape[k]);
    shape[d] += xs[i]->shape[d];
  }
  em_tensor *y = dev_empty(x0, x0->dtype, x0->ndim, shape);
  bool live = em_dev_live(n, xs) && dev_live(y);
  if (live) {
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
      if (em_tensor_numel(xs[i]) > 0) dev_k(y)->copy(concat_region(y, d, at, xs[i]), xs[i]);
      at += xs[i]->shape[d];
    }
  }
  if (live && em_needs_grad(n, xs)) {
    em_node *nd = em_record("concat", concat_backward, y,
                            n < EM_NODE_MAX_INPUTS ? n : EM_NODE_MAX_INPUTS, xs);
    em_tensor **all = em_scratch(sizeof *all * (size_t)n);
    memcpy(all, xs, sizeof *all * (size_t)n);
    nd->ctx = all;
    nd->i[0] = d;
    nd->i[1] = n;
  }
  em_device_set_op(prev);
  return EM_OP_END(y);
}

/* ---- cast ----------------------------------------------------------------------------- */

static void cast_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  em_tensor *gc = dev_empty(x, x->dtype, g->ndim, g->shape);
  if (dev_live(g, gc)) {
    dev_k(g)->copy(gc, g);
    em_grad_add(x, gc);
  }
  em_device_set_op(prev);
}

em_tensor *em_dev_cast(em_tensor *x, em_dtype dt) {
  if (x->dtype == dt) return x;
  em_dev_check_device("cast", 1, &x);
  EM_OP_BEGIN("cast", 1, x);
  const char *prev = em_device_set_op("cast");
  em_tensor *y = dev_empty(x, dt, x->ndim, x->shape);
  if (dev_live(x, y)) {
    if (em_tensor_numel(x) > 0) dev_k(x)->copy(y, x);
    if (em_dtype_is_float(x->dtype) && em_dtype_is_float(dt) && em_needs_grad(1, &x))
      em_record("cast", cast_backward, y, 1, &x);
  }
  em_device_set_op(prev);
  return EM_OP_END(y);
}
