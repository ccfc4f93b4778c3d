/* op-frontend.c: the checks and rules every op of the front-end shares
 * (op-frontend.h). */
#include "op-frontend.h"

#include "em-device.h"

#include <stdarg.h>
#include <stdio.h>

/* A broken invariant with a formatted message (the caller's place). */
#define op_fail(...) op_fail_(__FILE__, __LINE__, __func__, __VA_ARGS__)
__attribute__((format(printf, 4, 5))) _Noreturn static void op_fail_(const char *file, int line,
                                                                     const char *func,
                                                                     const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  em_assert_fail(msg, file, line, func);
}

/* The first non-NULL tensor, after checking that all are on its device. */
static const em_tensor *check_one_device(const char *name, int n, em_tensor *const *ts) {
  const em_tensor *first = NULL;
  char a[32], b[32];
  for (int k = 0; k < n; k++) {
    const em_tensor *t = ts[k];
    if (!t) continue;
    if (!first) first = t;
    else if (!em_device_eq(first->device, t->device))
      op_fail("em_%s: inputs on %s and %s: move one with em_to_device", name,
              em_device_str(first->device, a, sizeof a), em_device_str(t->device, b, sizeof b));
  }
  return first;
}

void em_op_check_device(const char *name, int n, em_tensor *const *ts) {
  (void)check_one_device(name, n, ts);
}

void em_op_check(const char *name, int n, em_tensor *const *ts) {
  const em_tensor *first = check_one_device(name, n, ts);
  char a[32];
  if (!first) return;
  const em_backend *be = em_backend_of(first);
  EM_ASSERT(be && "a tensor on a device kind this build lacks");
  for (int k = 0; k < n; k++) {
    const em_tensor *t = ts[k];
    if (t && em_dtype_is_float(t->dtype) && t->dtype != EM_DTYPE_F32 &&
        !(t->dtype == EM_DTYPE_F64 && be->f64))
      op_fail("em_%s on %s supports f32%s, got %s", name, em_device_str(t->device, a, sizeof a),
              be->f64 ? " and f64" : "", em_dtype_name(t->dtype));
  }
}

bool em_op_live(int n, em_tensor *const *ts) {
  if (em_device_error_pending()) return false;
  for (int k = 0; k < n; k++)
    if (ts[k] && !ts[k]->data) return false;
  return true;
}

bool em_op_has_(const void *kernel, const char *entry, const char *op, const em_tensor *t) {
  if (kernel) return true;
  char d[32];
  em_error e;
  em_error_set(&e, EM_ERR_UNSUPPORTED, "em_%s: %s has no kernel '%s' (the %s backend lacks it)",
               op, em_device_str(t->device, d, sizeof d), entry, em_backend_of(t)->name);
  em_device_error_raise(&e);
  return false;
}
