/* dev-private.h: what the files of the device-generic op layer
 * (engine/device/dev-*.c) share: the input checks, the out-of-memory
 * rule and output allocation.
 *
 * Every device op has the same frame:
 *
 *   DEV_OP_BEGIN("relu", 1, x);      checks (same device, f32), opens the
 *                                    profiler span, names the op for the
 *                                    out-of-memory message
 *   y = dev_empty(x, ...);           outputs on the inputs' device
 *   if (dev_live(...)) { kernels; record the tape node }
 *   return DEV_OP_END(y);
 *
 * dev_live is the out-of-memory rule of em-device.h: once an allocation
 * on this thread has failed (the sticky error is pending) or a tensor has
 * no data, kernels are skipped and nothing is recorded, so the rest of
 * the step runs harmlessly on tensors of the right shapes and the caller
 * collects the error with em_device_error_take. */
#pragma once

#include "dev-ops.h"
#include "device-private.h"
#include "../core/grad-accumulate.h"
#include "../core/shape.h"
#include "em-device.h"
#include "em-profile.h"

#include <stdbool.h>

/* A broken invariant with a formatted message (file and line of the
 * caller); never returns. */
#define dev_fail(...) em_dev_fail_(__FILE__, __LINE__, __func__, __VA_ARGS__)
_Noreturn void em_dev_fail_(const char *file, int line, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Checks the tensors of op `name` (NULL entries are skipped): all on the
 * device of the first ("em_add: inputs on ref:0 and cpu: move one with
 * em_to_device"), and float ones f32 ("em_relu on ref:0 supports f32,
 * got f64"). Integer inputs are the op's to check. */
void em_dev_check(const char *name, int n, em_tensor *const *ts);
/* The device half of em_dev_check: all on the device of the first, or a
 * broken invariant naming the op and both devices. */
void em_dev_check_device(const char *name, int n, em_tensor *const *ts);
/* False when kernels must be skipped: the device error is pending, or one
 * of the tensors (NULL entries skipped) has no data. */
bool em_dev_live(int n, em_tensor *const *ts);
/* Asserts that t (not NULL) has dtype dt (index tensors: I64). */
void em_dev_check_dtype(const char *name, const em_tensor *t, em_dtype dt, const char *what);

#define DEV_TS(...) (int)(sizeof((em_tensor *const[]){__VA_ARGS__}) / sizeof(em_tensor *)), \
                    (em_tensor *const[]){__VA_ARGS__}
#define dev_live(...) em_dev_live(DEV_TS(__VA_ARGS__))

#define DEV_OP_BEGIN(name, n, ...)                                             \
  em_dev_check((name), (n), (em_tensor *const[]){__VA_ARGS__});                \
  EM_OP_BEGIN((name), (n), __VA_ARGS__);                                       \
  const char *const dev_prev_op_ = em_device_set_op(name)
#define DEV_OP_END(y) (em_device_set_op(dev_prev_op_), EM_OP_END(y))

/* The kernel table of t's device. */
static inline const em_kernels *dev_k(const em_tensor *t) { return em_kernels_of(t); }

/* Scoped tensors on like's device. */
static inline em_tensor *dev_empty(const em_tensor *like, em_dtype dt, int ndim,
                                   const int64_t *shape) {
  return em_empty_on(like->device, dt, ndim, shape);
}
static inline em_tensor *dev_empty_like(const em_tensor *t) {
  return em_empty_on(t->device, t->dtype, t->ndim, t->shape);
}
/* Names the op of a backward function for the out-of-memory message;
 * returns the previous name for em_device_set_op. */
static inline const char *dev_backward_begin(const em_node *n) { return em_device_set_op(n->op); }
