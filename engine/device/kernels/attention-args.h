/* attention-args.h: the em_ksdpa of a fused attention call (kern-attention.h)
 * from its tensors and em_sdpa_args (em-backend.h), for the host side of
 * the reference device (ref-attention.c) and of CUDA (cuda-sdpa.cu). Host
 * C over em_tensor (valid C++ too), not a kernel body. */
#pragma once

#include "em-backend.h"
#include "kern-attention.h"

/* t's four strides into s (zeros for NULL). */
static inline void em_ksdpa_strides(int64_t *s, const em_tensor *t) {
  for (int d = 0; d < 4; d++) s[d] = t ? t->stride[d] : 0;
}

/* q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev), o (N, H, L, Ev): the
 * forward's output, or the one backward reads; g (N, H, L, Ev), kpm
 * (N, S) and the gradients gq, gk, gv (q's, k's, v's shapes) may be NULL. */
static inline em_ksdpa em_ksdpa_of(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                                   const em_tensor *o, const em_tensor *g,
                                   const em_tensor *gq, const em_tensor *gk,
                                   const em_tensor *gv, const em_tensor *kpm,
                                   const em_sdpa_args *args) {
  em_ksdpa a;
  memset(&a, 0, sizeof a);
  a.N = q->shape[0];
  a.H = q->shape[1];
  a.L = q->shape[2];
  a.S = k->shape[2];
  a.E = q->shape[3];
  a.Ev = v->shape[3];
  em_ksdpa_strides(a.qs, q);
  em_ksdpa_strides(a.ks, k);
  em_ksdpa_strides(a.vs, v);
  em_ksdpa_strides(a.os, o);
  em_ksdpa_strides(a.gs, g);
  em_ksdpa_strides(a.gqs, gq);
  em_ksdpa_strides(a.gks, gk);
  em_ksdpa_strides(a.gvs, gv);
  a.has_mask = kpm != NULL;
  if (kpm) {
    a.ms[0] = kpm->stride[0];
    a.ms[1] = kpm->stride[1];
  }
  a.causal = args->causal;
  a.scale = (float)args->scale;
  a.dropout = args->dropout_p > 0;
  a.zscale = em_kdropout_scale(args->dropout_p);
  a.threshold = em_kdropout_threshold(args->dropout_p);
  a.seed = args->seed;
  a.counter = args->counter;
  return a;
}
