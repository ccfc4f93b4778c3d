/* ref-misc.c: the reference device's embedding (forward and backward),
 * dropout mask, optimiser steps (SGD, Adam / AdamW), sum of squares and
 * the gradient scaler's unscale, through kernels/kern-random.h and
 * kern-optim.h. */
#include "ref-private.h"

#include "kernels/kern-optim.h"
#include "kernels/kern-random.h"

em_status em_ref_embedding_forward(em_tensor *y, const em_tensor *w, const em_tensor *idx) {
  EM_ASSERT(w->ndim == 2 && idx->dtype == EM_DTYPE_I64 && em_tensor_is_contiguous(y));
  int64_t V = w->shape[0], D = w->shape[1];
  em_kview vi = em_ref_view(idx);
  int64_t n = em_kview_numel(&vi);
  const int64_t *is = idx->data;
  const float *ws = em_f32(w); /* (V, D), any strides */
  float *ys = em_f32(y);       /* (n, D) */
  for (int64_t r = 0; r < n; r++) {
    int64_t v = is[em_kview_at(&vi, r)];
    EM_ASSERT(v >= 0 && v < V && "embedding: index out of range reached the kernel");
    for (int64_t d = 0; d < D; d++) ys[r * D + d] = ws[v * w->stride[0] + d * w->stride[1]];
  }
  return EM_OK;
}

em_status em_ref_embedding_backward(em_tensor *gw, const em_tensor *g, const em_tensor *idx) {
  EM_ASSERT(em_tensor_is_contiguous(gw) && em_tensor_is_contiguous(g));
  int64_t V = gw->shape[0], D = gw->shape[1];
  em_kview vi = em_ref_view(idx);
  int64_t n = em_kview_numel(&vi);
  const int64_t *is = idx->data;
  const float *gs = em_f32(g); /* (n, D) */
  float *gws = em_f32(gw);     /* (V, D) */
  for (int64_t r = 0; r < n; r++) {
    int64_t v = is[em_kview_at(&vi, r)];
    EM_ASSERT(v >= 0 && v < V && "embedding: index out of range reached the kernel");
    for (int64_t d = 0; d < D; d++) gws[v * D + d] += gs[r * D + d];
  }
  return EM_OK;
}

em_status em_ref_dropout_mask(em_tensor *mask, double p, uint64_t seed, uint64_t counter) {
  EM_ASSERT(mask->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(mask));
  uint64_t threshold = em_kdropout_threshold(p);
  float scale = em_kdropout_scale(p);
  float *ms = em_f32(mask);
  int64_t n = em_tensor_numel(mask);
  for (int64_t i = 0; i < n; i++)
    ms[i] = em_kdropout_keep(threshold, seed, counter, (uint64_t)i) ? scale : 0.f;
  return EM_OK;
}

em_status em_ref_sgd_step(em_tensor *p, const em_tensor *g, em_tensor *buf, double lr, double wd,
                     double momentum, double dampening, bool nesterov, bool first) {
  EM_ASSERT(em_tensor_is_contiguous(p) && em_tensor_is_contiguous(g) &&
            (!buf || em_tensor_is_contiguous(buf)));
  em_ksgd_scalars s;
  em_ksgd_scalars_init(&s, lr, wd, momentum, dampening, nesterov, first);
  float *ps = em_f32(p), *bs = buf ? em_f32(buf) : NULL;
  const float *gs = em_f32(g);
  int64_t n = em_tensor_numel(p);
  for (int64_t i = 0; i < n; i++) em_ksgd(&s, ps + i, gs[i], bs ? bs + i : NULL);
  return EM_OK;
}

em_status em_ref_adam_step(em_tensor *p, const em_tensor *g, em_tensor *m, em_tensor *v, int64_t step,
                      double lr, double beta1, double beta2, double eps, double wd,
                      bool decoupled) {
  EM_ASSERT(em_tensor_is_contiguous(p) && em_tensor_is_contiguous(g) &&
            em_tensor_is_contiguous(m) && em_tensor_is_contiguous(v) && step >= 1);
  em_kadam_scalars s;
  em_kadam_scalars_init(&s, step, lr, beta1, beta2, eps, wd, decoupled);
  float *ps = em_f32(p), *ms = em_f32(m), *vs = em_f32(v);
  const float *gs = em_f32(g);
  int64_t n = em_tensor_numel(p);
  for (int64_t i = 0; i < n; i++) em_kadam(&s, ps + i, gs[i], ms + i, vs + i);
  return EM_OK;
}

em_status em_ref_sumsq(bool acc, em_tensor *out, const em_tensor *x) {
  EM_ASSERT(em_tensor_is_contiguous(x));
  const float *xs = em_f32(x);
  int64_t n = em_tensor_numel(x);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)xs[i] * (double)xs[i];
  float *o = em_f32(out);
  *o = acc ? *o + (float)s : (float)s;
  return EM_OK;
}

em_status em_ref_unscale(em_tensor *x, float inv_scale, em_tensor *found) {
  EM_ASSERT(em_tensor_is_contiguous(x));
  float *xs = em_f32(x);
  int64_t n = em_tensor_numel(x);
  bool bad = false;
  for (int64_t i = 0; i < n; i++) {
    float v = xs[i];
    if (!(v - v == 0.f)) bad = true; /* NaN or infinity */
    xs[i] = v * inv_scale;
  }
  if (bad) em_f32(found)[0] = 1.f;
  return EM_OK;
}
