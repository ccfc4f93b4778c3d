/* dev-softmax-loss.c: em_cross_entropy and em_mse_loss on devices, with
 * backward. (softmax and log_softmax have one front-end for every device,
 * engine/ops/softmax.c.)
 *
 * cross-entropy is its kernels; cross-entropy checks the
 * targets on the host first (one copy of N indices), since a target out
 * of range is a broken invariant as on the CPU and a kernel cannot say so.
 * mse is composed: d = a - b, loss = sumsq(d) / n; backward
 * ga = (2 / n) d * g and gb = -(2 / n) d * g with g the one-element
 * incoming gradient, read on the device (no host round trip). */
#include "dev-private.h"

#include "../core/grad-accumulate.h"

/* ---- cross entropy ------------------------------------------------------------------------ */

/* in: logits; saved: logits, target (contiguous), lse (N); f[0]: smoothing. */
static void cross_entropy_backward(em_node *n) {
  em_tensor *x = n->saved[0], *target = n->saved[1], *lse = n->saved[2], *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  em_grad_buffer gx;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  if (bx && dev_live(bx, g, x, target, lse)) {
    EM_KCALL(dev_k(g), cross_entropy_backward, bx, g, x, target, lse, n->f[0]);
    em_grad_buffer_end(&gx);
  }
  em_device_set_op(prev);
}

/* Every target in [0, K) (t: host memory, N values). */
static void check_targets(const int64_t *t, int64_t N, int64_t K) {
  for (int64_t i = 0; i < N; i++)
    if (t[i] < 0 || t[i] >= K)
      dev_fail("em_cross_entropy: target %lld of row %lld is out of range [0, %lld)",
               (long long)t[i], (long long)i, (long long)K);
}

em_tensor *em_dev_cross_entropy(em_tensor *logits, em_tensor *target, double label_smoothing) {
  /* Targets may come from the host (the trainer's labels): checked there
   * and copied up, so that no step waits for the device to read them. */
  bool host_targets = !em_on_device(target) && em_on_device(logits);
  DEV_OP_BEGIN("cross_entropy", host_targets ? 1 : 2, logits, target);
  EM_ASSERT(logits->dtype == EM_DTYPE_F32 && logits->ndim == 2);
  em_dev_check_dtype("cross_entropy", target, EM_DTYPE_I64, "the targets");
  EM_ASSERT(target->ndim == 1 && target->shape[0] == logits->shape[0]);
  EM_ASSERT(label_smoothing >= 0 && label_smoothing <= 1);
  int64_t N = logits->shape[0], K = logits->shape[1];
  EM_ASSERT(N > 0 && K > 0);
  if (host_targets) {
    em_tensor *th = em_contiguous(target);
    check_targets(em_i64(th), N, K);
    target = em_to_device(th, logits->device);
  }
  em_tensor *x = em_contiguous_nograd(logits), *tc = em_contiguous_nograd(target);
  em_tensor *out = dev_empty(logits, EM_DTYPE_F32, 0, NULL);
  em_tensor *lse = dev_empty(logits, EM_DTYPE_F32, 1, &N); /* (N) */
  bool live = dev_live(x, tc, out, lse);
  if (live) {
    if (!host_targets) { /* targets on the device: one wait to read them */
      int64_t *t = em_scratch(sizeof(int64_t) * (size_t)N);
      em_tensor_download(tc, t);
      check_targets(t, N, K);
    }
    EM_KCALL(dev_k(x), cross_entropy_forward, out, lse, x, tc, label_smoothing);
  }
  if (live && em_needs_grad(1, &logits)) {
    em_node *nd = em_record("cross_entropy", cross_entropy_backward, out, 1, &logits);
    nd->saved[0] = x;
    nd->saved[1] = tc;
    nd->saved[2] = lse;
    nd->f[0] = label_smoothing;
  }
  return DEV_OP_END(out);
}

/* ---- mse ------------------------------------------------------------------------------------- */

/* in: a, b; saved[0]: d = a - b (contiguous). */
static void mse_backward(em_node *n) {
  em_tensor *d = n->saved[0], *g = n->out->grad; /* g: one element */
  const char *prev = dev_backward_begin(n);
  const em_kernels *k = dev_k(d);
  double scale = 2.0 / (double)em_tensor_numel(d);
  int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS] = {0};
  for (int i = 0; i < d->ndim; i++) shape[i] = d->shape[i];
  em_tensor *gb = em_view_raw(g, d->ndim, shape, stride, g->offset); /* g broadcast */
  for (int which = 0; which < 2; which++) {
    bool fresh;
    em_tensor *gx = em_grad_acquire(n->in[which], &fresh);
    if (!gx) continue;
    em_tensor *t = dev_empty_like(d);
    if (!dev_live(gx, t, d, g)) continue;
    EM_KCALL(k, unary, EM_KU_MULS, t, d, which == 0 ? scale : -scale, 0);
    EM_KCALL(k, binary, EM_KB_MUL, !fresh, gx, t, gb);
  }
  em_device_set_op(prev);
}

em_tensor *em_dev_mse_loss(em_tensor *a, em_tensor *b) {
  DEV_OP_BEGIN("mse_loss", 2, a, b);
  EM_ASSERT(a->dtype == EM_DTYPE_F32 && b->dtype == EM_DTYPE_F32 && em_tensor_same_shape(a, b));
  int64_t numel = em_tensor_numel(a);
  EM_ASSERT(numel > 0);
  em_tensor *d = dev_empty_like(a), *s = dev_empty(a, EM_DTYPE_F32, 0, NULL);
  em_tensor *out = dev_empty(a, EM_DTYPE_F32, 0, NULL);
  bool live = dev_live(a, b, d, s, out);
  if (live) {
    const em_kernels *k = dev_k(a);
    EM_KCALL(k, binary, EM_KB_SUB, false, d, a, b);
    EM_KCALL(k, sumsq, false, s, d);
    EM_KCALL(k, unary, EM_KU_MULS, out, s, 1.0 / (double)numel, 0);
  }
  em_tensor *ins[2] = {a, b};
  if (live && em_needs_grad(2, ins)) {
    em_node *nd = em_record("mse_loss", mse_backward, out, 2, ins);
    nd->saved[0] = d;
  }
  return DEV_OP_END(out);
}
