/* dev-common.c: what the device ops share (dev-private.h): input checks,
 * the out-of-memory rule, views and gradient buffers. (The copies and
 * adds into gradients serve every device from engine/core/grad-accumulate.c.) */
#include "dev-private.h"

#include "../core/grad-accumulate.h"

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
  em_add_into(g->grad, g->buf);
}
