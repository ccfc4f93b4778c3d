/* loss.c: em_cross_entropy (log-softmax fused with the negative log
 * likelihood, optional label smoothing) and em_mse_loss, both with mean
 * reduction and backward, one front-end for every device (op-frontend.h).
 * The CPU's kernels are in cpu-loss.c.
 *
 * cross-entropy is its kernels: forward writes the loss and keeps one
 * log-sum-exp per row (lse, N), backward writes
 * g / N * (exp(x - lse) - eps / K - (1 - eps) [k == t]) into a gradient
 * buffer. The targets are checked on the host first (a target out of
 * range is a broken invariant, and a kernel cannot say so): host targets
 * with device logits (the trainer's labels) are checked there and copied
 * up, so that no step waits for the device; device targets are read back
 * once. mse is composed: d = a - b, loss = sumsq(d) / n; backward
 * ga = (2 / n) d * g and gb = -(2 / n) d * g with g the one-element
 * incoming gradient, read where it lives (no host round trip). */
#include "op-frontend.h"
#include "ops-private.h"

#include <stdio.h>

/* ---- cross entropy ------------------------------------------------------------------------ */

/* in: logits; saved: logits, target (contiguous), lse (N); f[0]: smoothing. */
static void cross_entropy_backward(em_node *n) {
  em_tensor *x = n->saved[0], *target = n->saved[1], *lse = n->saved[2], *g = n->out->grad;
  const char *prev = op_backward_begin(n);
  em_grad_buffer gx;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  if (bx && op_live(bx, g, x, target, lse)) {
    EM_KCALL(op_k(g), cross_entropy_backward, bx, g, x, target, lse, n->f[0]);
    em_grad_buffer_end(&gx);
  }
  em_device_set_op(prev);
}

/* Every target in [0, K) (t: host memory, N values). */
static void check_targets(const int64_t *t, int64_t N, int64_t K) {
  for (int64_t i = 0; i < N; i++)
    if (t[i] < 0 || t[i] >= K) {
      char msg[160];
      snprintf(msg, sizeof msg,
               "em_cross_entropy: class index out of range: target %lld of row %lld is out of "
               "range [0, %lld)",
               (long long)t[i], (long long)i, (long long)K);
      em_assert_fail(msg, __FILE__, __LINE__, __func__);
    }
}

em_tensor *em_cross_entropy(em_tensor *logits, em_tensor *target, double label_smoothing) {
  /* Targets may come from the host (the trainer's labels) for device
   * logits: checked there and copied up. */
  bool host_targets = !em_on_device(target) && em_on_device(logits);
  EM_ASSERT(em_dtype_is_float(logits->dtype) && logits->ndim == 2);
  OP_BEGIN_ANY("cross_entropy", host_targets ? 1 : 2, logits, target);
  em_op_check("cross_entropy", 1, &logits);
  if (target->dtype != EM_DTYPE_I64) {
    char a[32], msg[160];
    snprintf(msg, sizeof msg, "em_cross_entropy on %s: the targets must be i64, got %s",
             em_device_str(target->device, a, sizeof a), em_dtype_name(target->dtype));
    em_assert_fail(msg, __FILE__, __LINE__, __func__);
  }
  EM_ASSERT(target->ndim == 1 && target->shape[0] == logits->shape[0]);
  EM_ASSERT(label_smoothing >= 0 && label_smoothing <= 1);
  int64_t N = logits->shape[0], K = logits->shape[1];
  EM_ASSERT(N > 0 && K > 0);
  if (host_targets) {
    em_tensor *th = em_contiguous(target);
    check_targets(em_i64(th), N, K);
    target = em_to_device(th, logits->device);
  } else if (!em_on_device(target)) { /* host logits and targets: checked in place */
    for (int64_t i = 0; i < N; i++) {
      int64_t t = em_i64(target)[i * target->stride[0]];
      if (t < 0 || t >= K) check_targets(&t, 1, K);
    }
  }
  em_tensor *x = em_contiguous_nograd(logits), *tc = em_contiguous_nograd(target);
  em_tensor *out = em_empty_on(logits->device, logits->dtype, 0, NULL);
  em_tensor *lse = em_empty_on(logits->device, logits->dtype, 1, &N); /* (N) */
  const em_kernels *k = op_k(logits);
  bool live = op_live(x, tc, out, lse) && OP_HAS(k, cross_entropy_forward, "cross_entropy", x) &&
              OP_HAS(k, cross_entropy_backward, "cross_entropy", x);
  if (live) {
    if (!host_targets && em_on_device(tc)) { /* targets on the device: one wait to read them */
      int64_t *t = em_scratch(sizeof(int64_t) * (size_t)N);
      em_tensor_download(tc, t);
      check_targets(t, N, K);
    }
    EM_KCALL(k, cross_entropy_forward, out, lse, x, tc, label_smoothing);
  }
  if (live && em_needs_grad(1, &logits)) {
    em_node *nd = em_record("cross_entropy", cross_entropy_backward, out, 1, &logits);
    nd->saved[0] = x;
    nd->saved[1] = tc;
    nd->saved[2] = lse;
    nd->f[0] = label_smoothing;
  }
  return OP_END(out);
}

/* ---- mse ------------------------------------------------------------------------------------- */

/* in: a, b; saved[0]: d = a - b (contiguous). */
static void mse_backward(em_node *n) {
  em_tensor *d = n->saved[0], *g = n->out->grad; /* g: one element */
  const char *prev = op_backward_begin(n);
  const em_kernels *k = op_k(d);
  double scale = 2.0 / (double)em_tensor_numel(d);
  int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS] = {0};
  for (int i = 0; i < d->ndim; i++) shape[i] = d->shape[i];
  em_tensor *gb = em_view_raw(g, d->ndim, shape, stride, g->offset); /* g broadcast */
  for (int which = 0; which < 2; which++) {
    bool fresh;
    em_tensor *gx = em_grad_acquire(n->in[which], &fresh);
    if (!gx) continue;
    em_tensor *t = op_empty_like(d);
    if (!op_live(gx, t, d, g)) continue;
    EM_KCALL(k, unary, EM_KU_MULS, t, d, which == 0 ? scale : -scale, 0);
    EM_KCALL(k, binary, EM_KB_MUL, !fresh, gx, t, gb);
  }
  em_device_set_op(prev);
}

em_tensor *em_mse_loss(em_tensor *a, em_tensor *b) {
  EM_ASSERT(em_dtype_is_float(a->dtype) && a->dtype == b->dtype && em_tensor_same_shape(a, b));
  OP_BEGIN("mse_loss", 2, a, b);
  int64_t numel = em_tensor_numel(a);
  EM_ASSERT(numel > 0);
  em_tensor *d = em_empty_on(a->device, a->dtype, a->ndim, a->shape); /* a's shape, contiguous */
  em_tensor *s = em_empty_on(a->device, a->dtype, 0, NULL);
  em_tensor *out = em_empty_on(a->device, a->dtype, 0, NULL);
  const em_kernels *k = op_k(a);
  bool live = op_live(a, b, d, s, out) && OP_HAS(k, sumsq, "mse_loss", a);
  if (live) {
    EM_KCALL(k, binary, EM_KB_SUB, false, d, a, b);
    EM_KCALL(k, sumsq, false, s, d);
    EM_KCALL(k, unary, EM_KU_MULS, out, s, 1.0 / (double)numel, 0);
  }
  em_tensor *ins[2] = {a, b};
  if (live && em_needs_grad(2, ins)) {
    em_node *nd = em_record("mse_loss", mse_backward, out, 2, ins);
    nd->saved[0] = d;
  }
  return OP_END(out);
}
