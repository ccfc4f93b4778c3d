/* dropout.c: em_dropout with PyTorch's semantics. In training each
 * element is zeroed with probability p and survivors are scaled by
 * 1 / (1 - p); in eval, or with p == 0, the op is the identity and
 * returns x itself. The keep mask (one byte per element) is drawn from
 * the caller's rng and saved, so backward is gx = gy * keep / (1 - p).
 *
 * Each 64-bit draw of the rng decides two elements: element k is dropped
 * when 32 bits of draw k / 2 (low bits for even k, high for odd) fall
 * below p * 2^32. The same rng state gives the same mask whatever the
 * dtype. The mask is drawn and applied chunk by chunk, so that it is
 * still in cache when the (vectorised) multiply reads it. */
#include "ops-private.h"

#include <math.h>

#define CHUNK 4096 /* elements drawn, then applied, at a time (even) */

/* keep[k] = 1 when element k survives, for k in [0, n). */
static void draw_keep(em_rng *rng, uint64_t threshold, uint8_t *keep, int64_t n) {
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    uint64_t r = em_rng_next(rng);
    keep[k] = (r & 0xffffffffu) >= threshold;
    keep[k + 1] = (r >> 32) >= threshold;
  }
  if (k < n) keep[k] = (em_rng_next(rng) & 0xffffffffu) >= threshold;
}

/* out = a * keep * scale over [0, n); accumulates into out unless fresh. */
static void apply_f32(const float *a, const uint8_t *keep, float scale, float *out, int64_t n,
                      bool fresh) {
  if (fresh) for (int64_t k = 0; k < n; k++) out[k] = keep[k] ? a[k] * scale : 0.0f;
  else for (int64_t k = 0; k < n; k++) out[k] += keep[k] ? a[k] * scale : 0.0f;
}

static void apply_f64(const double *a, const uint8_t *keep, double scale, double *out, int64_t n,
                      bool fresh) {
  if (fresh) for (int64_t k = 0; k < n; k++) out[k] = keep[k] ? a[k] * scale : 0.0;
  else for (int64_t k = 0; k < n; k++) out[k] += keep[k] ? a[k] * scale : 0.0;
}

static void dropout_backward(em_node *n) {
  bool fresh;
  em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
  if (!gx) return;
  const uint8_t *keep = n->ctx;
  em_tensor *gy = n->out->grad; /* contiguous, same shape */
  int64_t numel = em_tensor_numel(gy);
  if (gy->dtype == EM_DTYPE_F32) apply_f32(em_f32(gy), keep, (float)n->f[1], em_f32(gx), numel, fresh);
  else apply_f64(em_f64(gy), keep, n->f[1], em_f64(gx), numel, fresh);
}

em_tensor *em_dropout(em_tensor *x, double p, bool training, em_rng *rng) {
  if (em_on_device(x)) return em_dev_dropout(x, p, training, rng);
  EM_ASSERT(EM_IS_FLOAT(x) && p >= 0 && p <= 1);
  if (!training || p == 0) return x;
  EM_ASSERT(rng);
  EM_OP_BEGIN("dropout", 1, x);
  int64_t numel = em_tensor_numel(x);
  em_tensor *xc = em_contiguous_nograd(x);
  em_tensor *y = em_empty(x->dtype, x->ndim, x->shape);
  uint8_t *keep = em_scratch((size_t)(numel ? numel : 1));
  uint64_t threshold = (uint64_t)ldexp(p, 32); /* 2^32 for p == 1: drops all */
  double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  for (int64_t b = 0; b < numel; b += CHUNK) {
    int64_t len = numel - b < CHUNK ? numel - b : CHUNK;
    draw_keep(rng, threshold, keep + b, len);
    if (x->dtype == EM_DTYPE_F32)
      apply_f32(em_f32(xc) + b, keep + b, (float)scale, em_f32(y) + b, len, true);
    else
      apply_f64(em_f64(xc) + b, keep + b, scale, em_f64(y) + b, len, true);
  }
  if (em_needs_grad(1, &x)) {
    em_node *nd = em_record("dropout", dropout_backward, y, 1, &x);
    nd->ctx = keep;
    nd->f[0] = p;
    nd->f[1] = scale;
  }
  return EM_OP_END(y);
}
