/* views.c: views and layout: reshape, flatten, transpose, permute, slice,
 * expand, contiguous, concat and cast, with backward.
 *
 * Views share the input's storage (em_view_raw): only shape, strides and
 * offset change. Backward brings the output's gradient (contiguous, the
 * view's shape) back to the input's geometry and adds it into the input's
 * gradient, so gradients flow through any chain of views to the
 * parameters underneath:
 *   reshape, flatten, contiguous: the same values in the input's shape
 *     (the output's gradient itself, when the input has none yet:
 *     em_grad_pass);
 *   transpose, permute: g viewed through the inverse permutation;
 *   slice: g added into the sliced region (the rest stays zero);
 *   expand: g summed over the broadcast dims (em_reduce_to_shape);
 *   concat: each input takes its region of g;
 *   cast: g cast back to the input's float type.
 * One front-end for every device (op-frontend.h): the views only change
 * metadata; contiguous, concat and cast copy through the backend's copy
 * kernel (which converts dtypes for cast). */
#include "op-frontend.h"
#include "ops-private.h"

/* ---- reshape / flatten --------------------------------------------------------------- */

/* Strides that let a view with shape `shape` walk x's elements in
 * row-major order, or false when x's strides do not allow it (the
 * algorithm of PyTorch's computeStride: dims of x that are contiguous
 * with each other form chunks, and each chunk must split exactly into
 * dims of the new shape). */
static bool view_strides(const em_tensor *x, int ndim, const int64_t *shape, int64_t *stride) {
  if (em_tensor_is_contiguous(x) || em_tensor_numel(x) == 0) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
      stride[d] = s;
      s *= shape[d];
    }
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base = x->stride[x->ndim - 1], tensor_numel = 1, view_numel = 1;
  for (int td = x->ndim - 1; td >= 0; td--) {
    tensor_numel *= x->shape[td];
    if (td == 0 ||
        (x->shape[td - 1] != 1 && x->stride[td - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        stride[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base = x->stride[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

/* Gradient of any op whose output holds x's values in row-major order
 * (reshape, contiguous): g (contiguous) seen in x's shape. */
static void same_order_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  int64_t stride[EM_MAX_DIMS], s = 1;
  for (int d = x->ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= x->shape[d];
  }
  em_grad_pass(x, em_view_raw(g, x->ndim, x->shape, stride, g->offset));
}

em_tensor *em_reshape(em_tensor *x, int ndim, const int64_t *shape) {
  EM_ASSERT(ndim >= 0 && ndim <= EM_MAX_DIMS);
  EM_OP_BEGIN("reshape", 1, x);
  int64_t sh[EM_MAX_DIMS], known = 1;
  int infer = -1;
  for (int d = 0; d < ndim; d++) {
    sh[d] = shape[d];
    if (shape[d] == -1) {
      EM_ASSERT(infer < 0 && "reshape: at most one -1");
      infer = d;
    } else {
      EM_ASSERT(shape[d] >= 0);
      known *= shape[d];
    }
  }
  int64_t numel = em_tensor_numel(x);
  if (infer >= 0) {
    EM_ASSERT(known > 0 && numel % known == 0 && "reshape: -1 cannot be inferred");
    sh[infer] = numel / known;
  } else {
    EM_ASSERT(known == numel && "reshape: element count differs");
  }
  int64_t stride[EM_MAX_DIMS];
  em_tensor *src = x;
  if (!view_strides(x, ndim, sh, stride)) {
    src = em_contiguous(x); /* records its own node */
    EM_ASSERT(view_strides(src, ndim, sh, stride));
  }
  em_tensor *y = em_view_raw(src, ndim, sh, stride, src->offset);
  if (em_needs_grad(1, &src)) em_record("reshape", same_order_backward, y, 1, &src);
  return EM_OP_END(y);
}

em_tensor *em_flatten(em_tensor *x, int start_dim) {
  if (x->ndim == 0) {
    int64_t one = 1;
    return em_reshape(x, 1, &one);
  }
  int s = em_dim_norm(start_dim, x->ndim);
  int64_t shape[EM_MAX_DIMS], rest = 1;
  for (int d = 0; d < s; d++) shape[d] = x->shape[d];
  for (int d = s; d < x->ndim; d++) rest *= x->shape[d];
  shape[s] = rest;
  return em_reshape(x, s + 1, shape);
}

/* ---- transpose / permute ---------------------------------------------------------------- */

static void permute_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  /* out dim j is x dim perm[j]: g's stride for x dim perm[j] is g's stride j */
  int64_t stride[EM_MAX_DIMS];
  for (int j = 0; j < x->ndim; j++) stride[n->i[j]] = g->stride[j];
  em_grad_pass(x, em_view_raw(g, x->ndim, x->shape, stride, g->offset));
}

em_tensor *em_permute(em_tensor *x, const int *perm) {
  EM_OP_BEGIN("permute", 1, x);
  int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS];
  bool seen[EM_MAX_DIMS] = {false};
  int p[EM_MAX_DIMS];
  for (int j = 0; j < x->ndim; j++) {
    p[j] = em_dim_norm(perm[j], x->ndim);
    EM_ASSERT(!seen[p[j]] && "permute: repeated dim");
    seen[p[j]] = true;
    shape[j] = x->shape[p[j]];
    stride[j] = x->stride[p[j]];
  }
  em_tensor *y = em_view_raw(x, x->ndim, shape, stride, x->offset);
  if (em_needs_grad(1, &x)) {
    em_node *nd = em_record("permute", permute_backward, y, 1, &x);
    for (int j = 0; j < x->ndim; j++) nd->i[j] = p[j];
  }
  return EM_OP_END(y);
}

em_tensor *em_transpose(em_tensor *x, int d0, int d1) {
  int perm[EM_MAX_DIMS];
  for (int j = 0; j < x->ndim; j++) perm[j] = j;
  int a = em_dim_norm(d0, x->ndim), b = em_dim_norm(d1, x->ndim);
  perm[a] = b;
  perm[b] = a;
  return em_permute(x, perm);
}

/* ---- slice ------------------------------------------------------------------------------------- */

/* The region of a contiguous tensor of x's shape that the slice covers. */
static em_tensor *slice_region(em_tensor *t, const em_tensor *out, int d, int64_t start,
                               int64_t step) {
  int64_t stride[EM_MAX_DIMS], s = 1;
  for (int k = t->ndim - 1; k >= 0; k--) {
    stride[k] = s;
    s *= t->shape[k];
  }
  int64_t offset = t->offset + start * stride[d];
  stride[d] *= step;
  return em_view_raw(t, out->ndim, out->shape, stride, offset);
}

static void slice_backward(em_node *n) {
  em_tensor *x = n->in[0];
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (!gx) return;
  if (fresh) em_tensor_fill_(gx, 0.0);
  em_add_into(slice_region(gx, n->out, (int)n->i[0], n->i[1], n->i[2]), n->out->grad);
}

em_tensor *em_slice(em_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
  int d = em_dim_norm(dim, x->ndim);
  EM_ASSERT(step > 0 && "slice: step must be positive");
  EM_OP_BEGIN("slice", 1, x);
  int64_t size = x->shape[d];
  /* Python's rules: negative counts from the end, then clamp to [0, size] */
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : start > size ? size : start;
  end = end < start ? start : end > size ? size : end;
  int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS];
  for (int k = 0; k < x->ndim; k++) {
    shape[k] = x->shape[k];
    stride[k] = x->stride[k];
  }
  shape[d] = (end - start + step - 1) / step;
  stride[d] = x->stride[d] * step;
  em_tensor *y = em_view_raw(x, x->ndim, shape, stride, x->offset + start * x->stride[d]);
  if (em_needs_grad(1, &x)) {
    em_node *nd = em_record("slice", slice_backward, y, 1, &x);
    nd->i[0] = d;
    nd->i[1] = start;
    nd->i[2] = step;
  }
  return EM_OP_END(y);
}

/* ---- expand -------------------------------------------------------------------------------------- */

static void expand_backward(em_node *n) {
  em_tensor *x = n->in[0];
  em_grad_add(x, em_reduce_to_shape(n->out->grad, x->ndim, x->shape));
}

em_tensor *em_expand(em_tensor *x, int ndim, const int64_t *shape) {
  EM_ASSERT(ndim >= x->ndim && ndim <= EM_MAX_DIMS);
  EM_OP_BEGIN("expand", 1, x);
  int64_t sh[EM_MAX_DIMS], stride[EM_MAX_DIMS];
  int lead = ndim - x->ndim;
  for (int d = 0; d < ndim; d++) {
    int xd = d - lead;
    if (xd < 0) {
      EM_ASSERT(shape[d] >= 0 && "expand: -1 on a new dim");
      sh[d] = shape[d];
      stride[d] = 0;
    } else if (shape[d] == -1 || shape[d] == x->shape[xd]) {
      sh[d] = x->shape[xd];
      stride[d] = x->stride[xd];
    } else {
      EM_ASSERT(x->shape[xd] == 1 && "expand: only size-1 dims broadcast");
      sh[d] = shape[d];
      stride[d] = 0;
    }
  }
  em_tensor *y = em_view_raw(x, ndim, sh, stride, x->offset);
  if (em_needs_grad(1, &x)) em_record("expand", expand_backward, y, 1, &x);
  return EM_OP_END(y);
}

/* ---- contiguous ----------------------------------------------------------------------------------- */

/* Any device: the backend's copy kernel (through em_copy_into). */
em_tensor *em_contiguous(em_tensor *x) {
  if (em_tensor_is_contiguous(x)) return x;
  OP_BEGIN_ANY("contiguous", 1, x);
  em_tensor *y = op_empty_like(x);
  if (op_live(x, y)) {
    em_copy_into(y, x);
    if (em_needs_grad(1, &x)) em_record("contiguous", same_order_backward, y, 1, &x);
  }
  return OP_END(y);
}

/* ---- concat ---------------------------------------------------------------------------------------- */

/* Input k's region of a tensor of the output's shape. */
static em_tensor *concat_region(em_tensor *t, int d, int64_t at, const em_tensor *xk) {
  return em_view_raw(t, t->ndim, xk->shape, t->stride, t->offset + at * t->stride[d]);
}

static void concat_backward(em_node *n) {
  em_tensor *const *xs = n->ctx;
  int d = (int)n->i[0];
  int64_t count = n->i[1], at = 0;
  em_tensor *g = n->out->grad;
  for (int64_t k = 0; k < count; k++) {
    if (em_tensor_requires_grad(xs[k])) em_grad_add(xs[k], concat_region(g, d, at, xs[k]));
    at += xs[k]->shape[d];
  }
}

/* Any device: the inputs' (one for all), through em_copy_into. */
em_tensor *em_concat(int n, em_tensor *const *xs, int dim) {
  EM_ASSERT(n >= 1);
  em_op_check_device("concat", n, xs);
  const int em_op_token_ = em_profile_hooks_on() ? em_op_begin_("concat", n < 4 ? n : 4, xs) : -1;
  const char *prev = em_device_set_op("concat");
  const em_tensor *x0 = xs[0];
  int d = em_dim_norm(dim, x0->ndim);
  int64_t shape[EM_MAX_DIMS];
  for (int k = 0; k < x0->ndim; k++) shape[k] = x0->shape[k];
  shape[d] = 0;
  for (int i = 0; i < n; i++) {
    EM_ASSERT(xs[i]->dtype == x0->dtype && xs[i]->ndim == x0->ndim);
    for (int k = 0; k < x0->ndim; k++)
      EM_ASSERT(k == d || xs[i]->shape[k] == x0->shape[k]);
    shape[d] += xs[i]->shape[d];
  }
  em_tensor *y = em_empty_on(x0->device, x0->dtype, x0->ndim, shape);
  /* after an out-of-memory error: the shape only */
  const bool live = em_op_live(n, xs) && op_live(y);
  int64_t at = 0;
  for (int i = 0; live && i < n; i++) {
    if (em_tensor_numel(xs[i]) > 0) em_copy_into(concat_region(y, d, at, xs[i]), xs[i]);
    at += xs[i]->shape[d];
  }
  if (live && em_needs_grad(n, xs)) {
    /* The node holds at most EM_NODE_MAX_INPUTS inputs; the full list
     * lives in scope memory. */
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

/* ---- cast ----------------------------------------------------------------------------------------------- */

static void cast_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  const char *prev = op_backward_begin(n);
  em_tensor *gc = em_empty_on(x->device, x->dtype, g->ndim, g->shape);
  if (op_live(g, gc)) {
    if (em_tensor_numel(g) > 0) EM_KCALL(op_k(g), copy, gc, g);
    em_grad_add(x, gc);
  }
  em_device_set_op(prev);
}

/* Any device: the backend's copy kernel, which converts. */
em_tensor *em_cast(em_tensor *x, em_dtype dt) {
  if (x->dtype == dt) return x;
  OP_BEGIN_ANY("cast", 1, x);
  em_tensor *y = em_empty_on(x->device, dt, x->ndim, x->shape);
  const em_kernels *k = op_k(x);
  if (op_live(x, y) && OP_HAS(k, copy, "cast", x)) {
    if (em_tensor_numel(x) > 0) EM_KCALL(k, copy, y, x);
    if (em_dtype_is_float(x->dtype) && em_dtype_is_float(dt) && em_needs_grad(1, &x))
      em_record("cast", cast_backward, y, 1, &x);
  }
  return OP_END(y);
}
