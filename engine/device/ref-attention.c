/* ref-attention.c: the reference device's fused scaled dot-product
 * attention (the sdpa_forward and sdpa_backward entries of em-backend.h),
 * f32: host loops over the rows of kernels/kern-attention.h, which CUDA's
 * kernels (engine/cuda/cuda-sdpa.cu) run one thread per row. Forward: one
 * pass per query row (online softmax); backward: the gq rows, then the gk
 * and gv rows, each recomputing the weights from q, k and lse. */
#include "ref-private.h"

#include "kernels/attention-args.h"

static const unsigned char *mask_ptr(const em_tensor *kpm) {
  return kpm ? (const unsigned char *)em_tensor_ptr(kpm) : NULL;
}

em_status em_ref_sdpa_forward(em_tensor *o, em_tensor *lse, const em_tensor *q, const em_tensor *k,
                              const em_tensor *v, const em_tensor *kpm, const em_sdpa_args *args) {
  EM_ASSERT(q->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(lse));
  em_ksdpa a = em_ksdpa_of(q, k, v, o, NULL, NULL, NULL, NULL, kpm, args);
  for (int64_t n = 0; n < a.N; n++)
    for (int64_t h = 0; h < a.H; h++)
      for (int64_t i = 0; i < a.L; i++)
        em_ksdpa_fwd_row(&a, em_f32(q), em_f32(k), em_f32(v), mask_ptr(kpm), em_f32(o),
                         em_f32(lse), n, h, i);
  return EM_OK;
}

em_status em_ref_sdpa_backward(em_tensor *gq, em_tensor *gk, em_tensor *gv, const em_tensor *g,
                               const em_tensor *q, const em_tensor *k, const em_tensor *v,
                               const em_tensor *o, const em_tensor *lse, const em_tensor *kpm,
                               const em_sdpa_args *args) {
  EM_ASSERT(q->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(lse));
  em_ksdpa a = em_ksdpa_of(q, k, v, o, g, gq, gk, gv, kpm, args);
  const float *qs = em_f32(q), *ks = em_f32(k), *vs = em_f32(v), *gs = em_f32(g);
  for (int64_t n = 0; n < a.N; n++)
    for (int64_t h = 0; h < a.H; h++) {
      for (int64_t i = 0; gq && i < a.L; i++)
        em_ksdpa_bwd_q_row(&a, qs, ks, vs, gs, em_f32(o), em_f32(lse), mask_ptr(kpm),
                           em_f32(gq), n, h, i);
      for (int64_t j = 0; (gk || gv) && j < a.S; j++)
        em_ksdpa_bwd_kv_row(&a, qs, ks, vs, gs, em_f32(o), em_f32(lse), mask_ptr(kpm),
                            gk ? em_f32(gk) : NULL, gv ? em_f32(gv) : NULL, n, h, j);
    }
  return EM_OK;
}
