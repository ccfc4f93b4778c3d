/* grad-accumulate.c: copies, adds and sums for backward, on every device
 * (grad-accumulate.h), through the backend's copy, sum_to and binary
 * kernels.
 *
 * Kernels write contiguous outputs unless their contract says otherwise
 * (copy, fill and sum_to take any strides), so an add of a broadcast
 * source goes through a contiguous temporary and a copy back; an add of
 * a source of dst's own shape is one sum_to pass with nothing summed. */
#include "grad-accumulate.h"

#include "core-private.h"

#include "em-backend.h"
#include "em-device.h"

#include <stdio.h>

/* All on one device: a broken invariant otherwise (ops moved data
 * explicitly, so a mix here is the engine's bug). */
static void check_one_device(const char *what, const em_tensor *a, const em_tensor *b) {
  if (em_device_eq(a->device, b->device)) return;
  char da[32], db[32], msg[160];
  snprintf(msg, sizeof msg, "%s: tensors on %s and %s", what,
           em_device_str(a->device, da, sizeof da), em_device_str(b->device, db, sizeof db));
  em_assert_fail(msg, __FILE__, __LINE__, __func__);
}

/* Whether kernels may run on a and b (em-device.h: no pending device
 * error, both have data) and there is anything to do. */
static bool live(const em_tensor *a, const em_tensor *b) {
  return !em_device_error_pending() && a->data && b->data && em_tensor_numel(a) > 0;
}

void em_copy_into(em_tensor *dst, const em_tensor *src) {
  EM_ASSERT(dst->dtype == src->dtype);
  check_one_device("copy_into", dst, src);
  if (live(dst, src)) EM_KCALL(em_kernels_of(dst), copy, dst, src);
}

void em_add_into(em_tensor *dst, const em_tensor *src) {
  EM_ASSERT(dst->dtype == src->dtype && em_dtype_is_float(dst->dtype));
  check_one_device("add_into", dst, src);
  if (!live(dst, src)) return;
  const em_kernels *k = em_kernels_of(dst);
  if (em_tensor_same_shape(dst, src)) {
    EM_KCALL(k, sum_to, true, dst, src); /* nothing summed: dst += src */
    return;
  }
  em_tensor *t = em_empty_on(dst->device, dst->dtype, dst->ndim, dst->shape);
  if (!t->data) return;
  if (EM_KCALL(k, binary, EM_KB_ADD, false, t, dst, src)) EM_KCALL(k, copy, dst, t);
}

void em_grad_add(em_tensor *x, const em_tensor *g) {
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (!gx) return;
  EM_ASSERT(em_tensor_same_shape(gx, g));
  if (fresh) em_copy_into(gx, g);
  else em_add_into(gx, g);
}

void em_grad_pass(em_tensor *x, em_tensor *g) {
  if (!em_grad_adopt(x, g)) em_grad_add(x, g);
}

em_tensor *em_contiguous_nograd(em_tensor *t) {
  if (em_tensor_is_contiguous(t)) return t;
  em_tensor *c = em_empty_like(t);
  em_copy_into(c, t);
  return c;
}

/* out seen with ndim dims (leading size-1 dims added), as sum_to wants. */
static em_tensor *with_ndim(em_tensor *out, int ndim) {
  if (out->ndim == ndim) return out;
  int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS];
  int lead = ndim - out->ndim;
  for (int d = 0; d < ndim; d++) {
    shape[d] = d < lead ? 1 : out->shape[d - lead];
    stride[d] = d < lead ? 0 : out->stride[d - lead];
  }
  for (int d = lead - 1; d >= 0; d--) stride[d] = d + 1 < ndim ? stride[d + 1] * shape[d + 1] : 1;
  return em_view_raw(out, ndim, shape, stride, out->offset);
}

void em_sum_into_broadcast(em_tensor *out, const em_tensor *g) {
  EM_ASSERT(out->dtype == g->dtype && em_dtype_is_float(g->dtype) && out->ndim <= g->ndim);
  check_one_device("sum_into_broadcast", out, g);
  if (live(out, g)) EM_KCALL(em_kernels_of(out), sum_to, true, with_ndim(out, g->ndim), g);
}

em_tensor *em_reduce_to_shape(em_tensor *g, int ndim, const int64_t *shape) {
  bool same = g->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = g->shape[d] == shape[d];
  if (same) return g;
  EM_ASSERT(ndim <= g->ndim && !em_needs_grad(1, &g));
  em_tensor *r = em_empty_on(g->device, g->dtype, ndim, shape);
  if (!em_device_error_pending() && g->data && r->data && em_tensor_numel(r) > 0)
    EM_KCALL(em_kernels_of(g), sum_to, false, with_ndim(r, g->ndim), g);
  return r;
}

em_tensor *em_grad_buffer_begin(em_tensor *x, em_grad_buffer *g) {
  g->x = x;
  g->grad = g->buf = NULL;
  if (!x) return NULL;
  bool fresh;
  g->grad = em_grad_acquire(x, &fresh);
  if (!g->grad) return NULL;
  g->buf = fresh ? g->grad : em_empty_like(g->grad);
  return g->buf;
}

void em_grad_buffer_end(em_grad_buffer *g) {
  if (!g->buf || g->buf == g->grad) return;
  em_add_into(g->grad, g->buf);
}
