/* dev-ops.h: the device-generic op layer (engine/device/dev-*.c).
 *
 * em_dev_X is em_X (em-ops.h) for inputs that live off the CPU: same
 * arguments, same results, same autograd. Each op of engine/ops starts
 * with `if (EM_ON_DEVICE(x, w, b)) return em_dev_X(...);` (every tensor
 * input tested, before the op's profiler span: the device op opens its
 * own), so callers never name these. The element-wise ops (unary.c,
 * elementwise.c), the reductions (reduce.c), softmax and log_softmax,
 * dropout, embedding, the views, contiguous, concat and cast (views.c),
 * matmul and linear (matmul.c, linear.c) and the losses (loss.c) have no
 * em_dev_X: they are on the op front-end
 * (engine/ops/op-frontend.h), one function for every device.
 *
 * The device ops check that every input lives on the same device (a
 * mismatch is a broken invariant whose message names the op and both
 * devices: the layer and trainer code moves data explicitly) and that
 * float inputs are f32, allocate outputs there, record the tape node and
 * call the backend's kernels (device-private.h); backward is written once
 * here for every device. dev-private.h tells how they run on after an
 * out-of-memory error. */
#pragma once

#include "em-ops.h"

em_tensor *em_dev_conv2d(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p);
em_tensor *em_dev_max_pool2d(em_tensor *x, const em_pool2d_params *p);
em_tensor *em_dev_avg_pool2d(em_tensor *x, const em_pool2d_params *p);
em_tensor *em_dev_batch_norm(em_tensor *x, em_tensor *weight, em_tensor *bias, em_tensor *running_mean, em_tensor *running_var, bool training, double momentum, double eps);
em_tensor *em_dev_layer_norm(em_tensor *x, int nd, em_tensor *weight, em_tensor *bias, double eps);

/* ---- the hand-off test ----------------------------------------------------- */
/* True when one of the n tensors (NULL entries skipped) lives off the
 * CPU: the CPU ops test all their tensor inputs, so that a mix of CPU and
 * device tensors reaches the device layer's same-device check. */
static inline bool em_dev_any_(int n, em_tensor *const *ts) {
  for (int k = 0; k < n; k++)
    if (ts[k] && em_on_device(ts[k])) return true;
  return false;
}
#define EM_ON_DEVICE(...)                                                         \
  em_dev_any_((int)(sizeof((em_tensor *const[]){__VA_ARGS__}) / sizeof(em_tensor *)), \
              (em_tensor *const[]){__VA_ARGS__})
