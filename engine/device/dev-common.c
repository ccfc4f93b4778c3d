/* dev-common.c: what the device ops share (dev-private.h): input checks,
 * the out-of-memory rule. (Gradient buffers, copies and adds into
 * gradients and reshaped views serve every device from engine/core.) */
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
