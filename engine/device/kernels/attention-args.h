/* attention-args.h: the em_ksdpa of a fused attention call (kern-attention.h)
 * from its tensors and em_sdpa_args (em-backend.h), for the host side of
 * the reference device (ref-attention.c) and of CUDA (cuda-sdpa.cu). Host
 * C over em_tensor (valid C++ too), not a kernel body. */
#pragma once

#include "em-backend.h"
#include "kern-attention.h"

/* q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev); g (N, H, L, Ev) and
 * kpm (N, S) may be NULL. */
static inline em_ksdpa em_ksdpa_of(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                                   const em_tensor *g, const em_tensor *kpm,
                                   const em_sdpa_args *args) {
  em_ksdpa a;
  memset(&a, 0, sizeof a);
  a.N = q->shape[0];
  a.H = q->shape[1];
  a.L = q->shape[2];
  a.S = k->shape[2];
  a.E = q->shape[3];
  a.Ev = v->shape[3];
  for (int d = 0; d < 4; d++) {
    a.qs[d] = q->stride[d];
    a.ks[d] = k->stride[d];
    a.vs[d] = v->stride[d];
    a.gs[d] = g ? g->stride[d] : 0;
  }
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
