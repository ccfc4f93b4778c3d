/* dev-common.c: what the device ops share (dev-private.h): input checks,
 * the out-of-memory rule, views and gradient buffers, and the device side
 * of the low-level helpers of engine/ops/ops-common.c (copies and adds
 * into views, sums down to a broadcast shape, contiguous copies).
 *
 * Kernels write contiguous outputs unless their contract says otherwise
 * (copy and fill take any strides), so an add into a strided view goes
 * through a contiguous temporary and a copy back. */
#include "dev-private.h"

#include "../ops/ops-private.h"

#include <stdarg.h>
#include <stdio.h>

void em_dev_fail_(const char *file, int line, const char *func, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  em_assert_fail(msg, file, line, func);
}

void em_dev_check_device(const char *name, int n, em_tensor *const *ts) {
  const em_tensor *first = NULL;
  char a[32], b[32];
  for (int k = 0; k < n; k++) {
    const em_tensor *t = ts[k];
    if (!t) continue;
    if (!first) first = t;
    else if (!em_device_eq(first->device, t->device))
      dev_fail("em_%s: inputs on %s and %s: move one with em_to_device", name,
               em_device_str(first->device, a, sizeof a), em_device_str(t->device, b, sizeof b));
  }
}

void em_dev_check(const char *name, int n, em_tensor *const *ts) {
  em_dev_check_device(name, n, ts);
  char a[32];
  for (int k = 0; k < n; k++) {
    const em_tensor *t = ts[k];
    if (t && em_dtype_is_float(t->dtype) && t->dtype != EM_DTYPE_F32)
      dev_fail("em_%s on %s supports f32, got %s", name, em_device_str(t->device, a, sizeof a),
               em_dtype_name(t->dtype));
  }
}

void em_dev_check_dtype(const char *name, const em_tensor *t, em_dtype dt, const char *what) {
  char a[32];
  if (t->dtype != dt)
    dev_fail("em_%s on %s: %s must be %s, got %s", name, em_device_str(t->device, a, sizeof a),
             what, em_dtype_name(dt), em_dtype_name(t->dtype));
}

bool em_dev_live(int n, em_tensor *const *ts) {
  if (em_device_error_pending()) return false;
  for (int k = 0; k < n; k++)
    if (ts[k] && !ts[k]->data) return false;
  return true;
}

/* ---- views ----------------------------------------------------------------- */

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
}

em_tensor *em_dev_view_as(em_tensor *t, int ndim, const int64_t *shape) {
  EM_ASSERT(em_tensor_is_contiguous(t));
  int64_t stride[EM_MAX_DIMS];
  contiguous_strides(ndim, shape, stride);
  return em_view_raw(t, ndim, shape, stride, t->offset);
}

em_tensor *em_dev_broadcast_back(em_tensor *g, const em_tensor *x, const bool *reduced,
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

/* ---- gradient buffers --------------------------------------------------------- */

em_tensor *em_dev_grad_begin(em_tensor *x, dev_grad *g) {
  g->x = x;
  g->grad = g->buf = NULL;
  if (!x) return NULL;
  bool fresh;
  g->grad = em_grad_acquire(x, &fresh);
  if (!g->grad) return NULL;
  g->buf = fresh ? g->grad : dev_empty_like(g->grad);
  return g->buf;
}

void em_dev_grad_end(dev_grad *g) {
  if (!g->buf || g->buf == g->grad) return;
  em_dev_add_into(g->grad, g->buf);
}

/* ---- the helpers of ops-common.c ------------------------------------------------ */

void em_dev_copy_into(em_tensor *dst, const em_tensor *src) {
  EM_ASSERT(dst->dtype == src->dtype);
  em_dev_check_device("copy", 2, (em_tensor *const[]){dst, (em_tensor *)src});
  if (!dev_live(dst, (em_tensor *)src) || em_tensor_numel(dst) == 0) return;
  EM_KCALL(dev_k(dst), copy, dst, src);
}

void em_dev_add_into(em_tensor *dst, const em_tensor *src) {
  EM_ASSERT(dst->dtype == src->dtype && dst->dtype == EM_DTYPE_F32);
  em_dev_check("add_into", 2, (em_tensor *const[]){dst, (em_tensor *)src});
  if (!dev_live(dst, (em_tensor *)src) || em_tensor_numel(dst) == 0) return;
  const em_kernels *k = dev_k(dst);
  if (em_tensor_is_contiguous(dst) && em_tensor_same_shape(dst, src)) {
    EM_KCALL(k, sum_to, true, dst, src); /* nothing summed: dst += src */
    return;
  }
  em_tensor *t = dev_empty_like(dst); /* (dst's shape) */
  if (!dev_live(t)) return;
  EM_KCALL(k, binary, EM_KB_ADD, false, t, dst, src);
  EM_KCALL(k, copy, dst, t);
}

/* out seen with g's number of dims (leading size-1 dims added). */
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

void em_dev_sum_into_broadcast(em_tensor *out, const em_tensor *g) {
  EM_ASSERT(out->dtype == g->dtype && g->dtype == EM_DTYPE_F32 && out->ndim <= g->ndim);
  em_dev_check("sum_into", 2, (em_tensor *const[]){out, (em_tensor *)g});
  if (!dev_live(out, (em_tensor *)g) || em_tensor_numel(out) == 0) return;
  if (em_tensor_is_contiguous(out)) {
    EM_KCALL(dev_k(out), sum_to, true, with_ndim(out, g->ndim), g);
    return;
  }
  em_tensor *t = dev_empty_like(out);
  if (!dev_live(t)) return;
  EM_KCALL(dev_k(out), sum_to, false, with_ndim(t, g->ndim), g);
  em_dev_add_into(out, t);
}

em_tensor *em_dev_reduce_to_shape(em_tensor *g, int ndim, const int64_t *shape) {
  EM_ASSERT(ndim <= g->ndim);
  em_tensor *r = em_empty_on(g->device, g->dtype, ndim, shape);
  if (dev_live(g, r) && em_tensor_numel(r) > 0) EM_KCALL(dev_k(g), sum_to, false, with_ndim(r, g->ndim), g);
  return r;
}
