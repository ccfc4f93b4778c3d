/* kern-attention.h: the row math of fused scaled dot-product attention
 * (em_sdpa, em-ops.h; the sdpa_forward / sdpa_backward entries of
 * em-backend.h), in float, for the reference device (host loops over the
 * rows, engine/device/ref-attention.c) and CUDA (one thread per row,
 * engine/cuda/cuda-sdpa.cu). The CPU's tiled kernel (engine/ops/
 * cpu-sdpa.c) computes the same formulas in another order.
 *
 * For batch n, head h, query i and key j (L queries, S keys):
 *   s_ij   = scale * q_i . k_j, or hidden (-inf) when causal and
 *            j > i + S - L (the mask aligned to the last query), or when
 *            the key padding mask (N, S) is set at (n, j);
 *   P_ij   = exp(s_ij - lse_i), lse_i = log sum_j exp(s_ij) (-inf for a
 *            row with every key hidden: its P, output and gradients are 0);
 *   z_ij   = 1 / (1 - p) or 0: dropout of the weights, element
 *            ((n H + h) L + i) S + j of the stream (seed, counter) of
 *            kern-random.h, so the mask is em_dropout's over the (N, H,
 *            L, S) weights for the same draws, on every device;
 *   o_i    = sum_j P_ij z_ij v_j.
 * Forward keeps o and lse; backward recomputes P from q, k and lse, and
 * the mask from its counter:
 *   D_i    = g_i . o_i,  dP_ij = z_ij (g_i . v_j),
 *   dS_ij  = P_ij (dP_ij - D_i),
 *   gq_i   = scale sum_j dS_ij k_j,  gk_j = scale sum_i dS_ij q_i,
 *   gv_j   = sum_i P_ij z_ij g_i.
 * The forward row is one pass over the keys with a running maximum (the
 * online softmax); sums of the softmax and of D are in double. */
#pragma once

#include "kern-common.h"
#include "kern-random.h"

/* The sizes, strides and scalars of one call. Strides are in elements
 * over (N, H, rows, features) for q, k, v, g, the output o and the
 * gradients gq, gk, gv (any strides: the heads of a packed projection
 * are views), (N, S) for the mask; lse (N, H, L) is contiguous. */
typedef struct em_ksdpa {
  int64_t N, H, L, S, E, Ev;
  int64_t qs[4], ks[4], vs[4], gs[4], ms[2];
  int64_t os[4], gqs[4], gks[4], gvs[4];
  int causal, has_mask, dropout;
  float scale, zscale; /* zscale: 1 / (1 - p) (0 for p = 1) */
  uint64_t threshold, seed, counter;
} em_ksdpa;

/* Whether key j is hidden from query i of batch n. */
EM_HD int em_ksdpa_hidden(const em_ksdpa *a, const unsigned char *kpm, int64_t n, int64_t i,
                          int64_t j) {
  if (a->causal && j > i + a->S - a->L) return 1;
  return a->has_mask && kpm[n * a->ms[0] + j * a->ms[1]] != 0;
}

/* z_ij: the dropout factor of weight (n, h, i, j) (1 without dropout). */
EM_HD float em_ksdpa_keep(const em_ksdpa *a, int64_t n, int64_t h, int64_t i, int64_t j) {
  if (!a->dropout) return 1.f;
  uint64_t at = (uint64_t)(((n * a->H + h) * a->L + i) * a->S + j);
  return em_kdropout_keep(a->threshold, a->seed, a->counter, at) ? a->zscale : 0.f;
}

/* s_ij = scale * q_i . k_j (not masked). */
EM_HD float em_ksdpa_score(const em_ksdpa *a, const float *q, const float *k, int64_t n,
                           int64_t h, int64_t i, int64_t j) {
  const float *qr = q + n * a->qs[0] + h * a->qs[1] + i * a->qs[2];
  const float *kr = k + n * a->ks[0] + h * a->ks[1] + j * a->ks[2];
  float s = 0.f;
  for (int64_t e = 0; e < a->E; e++) s += qr[e * a->qs[3]] * kr[e * a->ks[3]];
  return s * a->scale;
}

/* Row (n, h, i) of the output and its log-sum-exp. */
EM_HD void em_ksdpa_fwd_row(const em_ksdpa *a, const float *q, const float *k, const float *v,
                            const unsigned char *kpm, float *o, float *lse, int64_t n,
                            int64_t h, int64_t i) {
  const int64_t row = (n * a->H + h) * a->L + i, oc = a->os[3];
  float *orow = o + n * a->os[0] + h * a->os[1] + i * a->os[2];
  for (int64_t d = 0; d < a->Ev; d++) orow[d * oc] = 0.f;
  float m = -em_kinf();
  double l = 0;
  for (int64_t j = 0; j < a->S; j++) {
    if (em_ksdpa_hidden(a, kpm, n, i, j)) continue;
    float s = em_ksdpa_score(a, q, k, n, h, i, j);
    if (s > m) { /* a new maximum: rescale what was summed */
      float alpha = expf(m - s);
      l *= (double)alpha;
      for (int64_t d = 0; d < a->Ev; d++) orow[d * oc] *= alpha;
      m = s;
    }
    float p = expf(s - m);
    l += (double)p;
    float pz = p * em_ksdpa_keep(a, n, h, i, j);
    if (pz == 0.f) continue;
    const float *vr = v + n * a->vs[0] + h * a->vs[1] + j * a->vs[2];
    for (int64_t d = 0; d < a->Ev; d++) orow[d * oc] += pz * vr[d * a->vs[3]];
  }
  if (l == 0) { /* every key hidden */
    lse[row] = -em_kinf();
    return;
  }
  float inv = (float)(1.0 / l);
  for (int64_t d = 0; d < a->Ev; d++) orow[d * oc] *= inv;
  lse[row] = m + (float)log(l);
}

/* D_i = g_i . o_i. */
EM_HD float em_ksdpa_delta(const em_ksdpa *a, const float *g, const float *o, int64_t n,
                           int64_t h, int64_t i) {
  const float *gr = g + n * a->gs[0] + h * a->gs[1] + i * a->gs[2];
  const float *orow = o + n * a->os[0] + h * a->os[1] + i * a->os[2];
  double s = 0;
  for (int64_t d = 0; d < a->Ev; d++) s += (double)gr[d * a->gs[3]] * (double)orow[d * a->os[3]];
  return (float)s;
}

/* dS_ij, with P_ij z_ij in *pz (both 0 for a hidden key). */
EM_HD float em_ksdpa_ds(const em_ksdpa *a, const float *q, const float *k, const float *v,
                        const float *g, const unsigned char *kpm, float lse_i, float d_i,
                        int64_t n, int64_t h, int64_t i, int64_t j, float *pz) {
  *pz = 0.f;
  if (em_ksdpa_hidden(a, kpm, n, i, j)) return 0.f;
  float p = expf(em_ksdpa_score(a, q, k, n, h, i, j) - lse_i);
  float z = em_ksdpa_keep(a, n, h, i, j);
  const float *gr = g + n * a->gs[0] + h * a->gs[1] + i * a->gs[2];
  const float *vr = v + n * a->vs[0] + h * a->vs[1] + j * a->vs[2];
  float dp = 0.f;
  for (int64_t d = 0; d < a->Ev; d++) dp += gr[d * a->gs[3]] * vr[d * a->vs[3]];
  *pz = p * z;
  return p * (dp * z - d_i);
}

/* Row i of gq (N, H, L, E), written. */
EM_HD void em_ksdpa_bwd_q_row(const em_ksdpa *a, const float *q, const float *k, const float *v,
                              const float *g, const float *o, const float *lse,
                              const unsigned char *kpm, float *gq, int64_t n, int64_t h,
                              int64_t i) {
  const int64_t row = (n * a->H + h) * a->L + i, gc = a->gqs[3];
  float *gr = gq + n * a->gqs[0] + h * a->gqs[1] + i * a->gqs[2];
  for (int64_t e = 0; e < a->E; e++) gr[e * gc] = 0.f;
  float d_i = em_ksdpa_delta(a, g, o, n, h, i), pz;
  for (int64_t j = 0; j < a->S; j++) {
    float ds = em_ksdpa_ds(a, q, k, v, g, kpm, lse[row], d_i, n, h, i, j, &pz);
    if (ds == 0.f) continue;
    const float *kr = k + n * a->ks[0] + h * a->ks[1] + j * a->ks[2];
    for (int64_t e = 0; e < a->E; e++) gr[e * gc] += ds * kr[e * a->ks[3]];
  }
  for (int64_t e = 0; e < a->E; e++) gr[e * gc] *= a->scale;
}

/* Row j of gk (N, H, S, E) and of gv (N, H, S, Ev), written; either may
 * be NULL. */
EM_HD void em_ksdpa_bwd_kv_row(const em_ksdpa *a, const float *q, const float *k, const float *v,
                               const float *g, const float *o, const float *lse,
                               const unsigned char *kpm, float *gk, float *gv, int64_t n,
                               int64_t h, int64_t j) {
  const int64_t kc = a->gks[3], vc = a->gvs[3];
  float *gkr = gk ? gk + n * a->gks[0] + h * a->gks[1] + j * a->gks[2] : 0;
  float *gvr = gv ? gv + n * a->gvs[0] + h * a->gvs[1] + j * a->gvs[2] : 0;
  for (int64_t e = 0; gkr && e < a->E; e++) gkr[e * kc] = 0.f;
  for (int64_t d = 0; gvr && d < a->Ev; d++) gvr[d * vc] = 0.f;
  /* causal: only the queries i >= j - S + L see key j */
  int64_t i0 = a->causal && j - a->S + a->L > 0 ? j - a->S + a->L : 0;
  for (int64_t i = i0; i < a->L; i++) {
    const int64_t qrow = (n * a->H + h) * a->L + i;
    float d_i = em_ksdpa_delta(a, g, o, n, h, i), pz;
    float ds = em_ksdpa_ds(a, q, k, v, g, kpm, lse[qrow], d_i, n, h, i, j, &pz);
    if (gvr && pz != 0.f) {
      const float *gr = g + n * a->gs[0] + h * a->gs[1] + i * a->gs[2];
      for (int64_t d = 0; d < a->Ev; d++) gvr[d * vc] += pz * gr[d * a->gs[3]];
    }
    if (gkr && ds != 0.f) {
      const float *qr = q + n * a->qs[0] + h * a->qs[1] + i * a->qs[2];
      for (int64_t e = 0; e < a->E; e++) gkr[e * kc] += ds * qr[e * a->qs[3]];
    }
  }
  for (int64_t e = 0; gkr && e < a->E; e++) gkr[e * kc] *= a->scale;
}
