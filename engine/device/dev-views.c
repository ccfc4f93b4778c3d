/* dev-views.c: views and layout on devices.
 *
 * reshape, flatten, transpose, permute, slice and expand only change
 * shape, strides and offset (em_view_raw keeps the device), and their
 * backward passes touch data only through em_grad_add, em_add_into and
 * em_reduce_to_shape, which hand off to the kernels: the implementations
 * of engine/ops/views.c serve every device (no em_dev_reshape & co.), and
 * so does em_concat (its copies go through em_copy_into).
 * contiguous and cast make new data, so they are here: outputs on the
 * input's device, copies through the copy kernel (which converts dtypes
 * for cast). */
#include "dev-private.h"

#include "../core/grad-accumulate.h"

/* ---- contiguous ------------------------------------------------------------- */

/* g (contiguous, the output's shape) seen in x's shape. */
static void contiguous_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  em_grad_add(x, em_view_as(g, x->ndim, x->shape));
  em_device_set_op(prev);
}

em_tensor *em_dev_contiguous(em_tensor *x) {
  if (em_tensor_is_contiguous(x)) return x;
  em_dev_check_device("contiguous", 1, &x);
  EM_OP_BEGIN("contiguous", 1, x);
  const char *prev = em_device_set_op("contiguous");
  em_tensor *y = dev_empty_like(x);
  if (dev_live(x, y)) {
    EM_KCALL(dev_k(x), copy, y, x);
    if (em_needs_grad(1, &x)) em_record("contiguous", contiguous_backward, y, 1, &x);
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
    EM_KCALL(dev_k(g), copy, gc, g);
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
    if (em_tensor_numel(x) > 0) EM_KCALL(dev_k(x), copy, y, x);
    if (em_dtype_is_float(x->dtype) && em_dtype_is_float(dt) && em_needs_grad(1, &x))
      em_record("cast", cast_backward, y, 1, &x);
  }
  em_device_set_op(prev);
  return EM_OP_END(y);
}
