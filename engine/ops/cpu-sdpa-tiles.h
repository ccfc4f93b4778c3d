/* cpu-sdpa-tiles.h: the typed half of the CPU's fused attention
 * (cpu-sdpa.c, which has the scheme and the contract at its top): one
 * (batch, head) forward or backward over tiles of BQ queries by BK keys.
 * cpu-sdpa.c includes it twice, for float and for double, with
 *   SD_T      the element type
 *   SD_FN(f)  f's name for that type (f_f32, f_f64)
 *   SD_FMA    fmaf or fma (rounded once: the same value at every vector
 *             width, so the clones of EM_CPU_CLONES agree bit for bit)
 *   SD_EXP    em_expf (vectorisable, about 2 ulp) or exp.
 * No include guard: it is a template, not a module header. */

/* C (m, n; ldc) (+)= A (m, k; lda) B (k, n; ldb), m a multiple of 4 and
 * n of 16: 4 x 16 blocks of C kept in registers over the reduction,
 * every element summed in k order. */
static inline __attribute__((always_inline)) void SD_FN(mm)(int64_t m, int64_t n, int64_t k,
                                                            const SD_T *a, int64_t lda,
                                                            const SD_T *b, int64_t ldb, SD_T *c,
                                                            int64_t ldc, bool acc) {
  for (int64_t i = 0; i < m; i += 4)
    for (int64_t j = 0; j < n; j += 16) {
      SD_T s0[16], s1[16], s2[16], s3[16];
      SD_T *c0 = c + i * ldc + j, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
      for (int q = 0; q < 16; q++) {
        s0[q] = acc ? c0[q] : 0;
        s1[q] = acc ? c1[q] : 0;
        s2[q] = acc ? c2[q] : 0;
        s3[q] = acc ? c3[q] : 0;
      }
      const SD_T *a0 = a + i * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
      for (int64_t p = 0; p < k; p++) {
        const SD_T *br = b + p * ldb + j;
        const SD_T x0 = a0[p], x1 = a1[p], x2 = a2[p], x3 = a3[p];
        for (int q = 0; q < 16; q++) {
          s0[q] = SD_FMA(x0, br[q], s0[q]);
          s1[q] = SD_FMA(x1, br[q], s1[q]);
          s2[q] = SD_FMA(x2, br[q], s2[q]);
          s3[q] = SD_FMA(x3, br[q], s3[q]);
        }
      }
      for (int q = 0; q < 16; q++) {
        c0[q] = s0[q];
        c1[q] = s1[q];
        c2[q] = s2[q];
        c3[q] = s3[q];
      }
    }
}

/* dst (rows, cols padded to ldd; rows up to rows_p zero) = src rows
 * [0, rows) of (rows, cols) with strides (rs, cs); transposed (dst
 * (cols, ldd) with dst[c][r]) when tr. */
static inline void SD_FN(pack)(SD_T *dst, int64_t ldd, int64_t rows_p, int64_t cols_p,
                               const SD_T *src, int64_t rows, int64_t cols, int64_t rs,
                               int64_t cs, bool tr) {
  for (int64_t r = 0; r < rows_p; r++)
    for (int64_t c = 0; c < cols_p; c++) {
      SD_T x = r < rows && c < cols ? src[r * rs + c * cs] : 0;
      if (tr) dst[c * ldd + r] = x;
      else dst[r * ldd + c] = x;
    }
}

/* Row r of a score tile: s = scale * raw for the keys query i sees, -inf
 * for the others; returns the row's maximum. */
static inline SD_T SD_FN(mask_row)(const sd_head *hd, SD_T *row, int64_t i, int64_t j0,
                                   int64_t bkp) {
  const int64_t last = hd->causal ? i + hd->S - hd->L : hd->S - 1; /* the last key i sees */
  const SD_T scale = (SD_T)hd->scale, ninf = (SD_T)-INFINITY;
  SD_T mx = ninf;
  for (int64_t c = 0; c < bkp; c++) {
    const int64_t j = j0 + c;
    const SD_T s = j > last || hd->hidden[j] ? ninf : row[c] * scale;
    row[c] = s;
    mx = s > mx ? s : mx;
  }
  return mx;
}

/* z (bkp) = the dropout factors of keys [j0, j0 + bkp) for query i. */
static inline void SD_FN(keep_row)(const sd_head *hd, SD_T *z, int64_t i, int64_t j0,
                                   int64_t bkp) {
  const uint64_t base = (uint64_t)((hd->nh * hd->L + i) * hd->S + j0);
  const SD_T zs = (SD_T)hd->zscale;
  uint32_t r[4];
  uint64_t blk = UINT64_MAX;
  for (int64_t c = 0; c < bkp; c++) {
    const uint64_t at = base + (uint64_t)c;
    if (at >> 2 != blk) {
      blk = at >> 2;
      em_krandom_block(hd->seed, hd->counter, blk, r);
    }
    z[c] = (uint64_t)r[at & 3] >= hd->threshold ? zs : 0;
  }
}

/* Forward of one (batch, head): o rows (L, Ev) and lse (L). */
EM_CPU_CLONES static void SD_FN(fwd_head)(const sd_head *hd, const sd_work *w, SD_T *o,
                                          SD_T *lse) {
  const int64_t L = hd->L, S = hd->S, E = hd->E, Ev = hd->Ev, Sp = w->Sp, Evp = w->Evp;
  const SD_T *Q = hd->q, *K = hd->k, *V = hd->v;
  SD_T *kt = w->kt, *vv = w->vv, *qt = w->qt, *st = w->st, *ot = w->ot, *z = w->z, *m = w->m;
  double *l = w->l;
  SD_FN(pack)(kt, Sp, Sp, E, K, S, E, hd->ks[0], hd->ks[1], true);      /* (E, Sp) */
  SD_FN(pack)(vv, Evp, Sp, Evp, V, S, Ev, hd->vs[0], hd->vs[1], false); /* (Sp, Evp) */
  for (int64_t i0 = 0; i0 < L; i0 += BQ) {
    const int64_t bq = L - i0 < BQ ? L - i0 : BQ, bqp = RUP(bq, 4);
    const int64_t jend = key_end(hd, i0 + bq - 1);
    for (int64_t r = 0; r < bqp; r++) {
      m[r] = (SD_T)-INFINITY;
      l[r] = 0;
      for (int64_t d = 0; d < Evp; d++) ot[r * Evp + d] = 0;
    }
    if (jend > 0)
      SD_FN(pack)(qt, E, bqp, E, Q + i0 * hd->qs[0], bq, E, hd->qs[0], hd->qs[1], false);
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      const int64_t bkp = RUP(jend - j0 < BK ? jend - j0 : BK, 16);
      SD_FN(mm)(bqp, bkp, E, qt, E, kt + j0, Sp, st, BK, false);
      for (int64_t r = 0; r < bqp; r++) {
        SD_T *row = st + r * BK;
        const SD_T mt = r < bq ? SD_FN(mask_row)(hd, row, i0 + r, j0, bkp) : (SD_T)-INFINITY;
        const SD_T mn = mt > m[r] ? mt : m[r];
        if (mn == (SD_T)-INFINITY) { /* nothing seen yet on this row */
          for (int64_t c = 0; c < bkp; c++) row[c] = 0;
          continue;
        }
        const SD_T alpha = SD_EXP(m[r] - mn);
        double sum = 0;
        for (int64_t c = 0; c < bkp; c++) row[c] = SD_EXP(row[c] - mn);
        for (int64_t c = 0; c < bkp; c++) sum += (double)row[c];
        l[r] = l[r] * (double)alpha + sum;
        m[r] = mn;
        if (hd->dropout) {
          SD_FN(keep_row)(hd, z, i0 + r, j0, bkp);
          for (int64_t c = 0; c < bkp; c++) row[c] *= z[c];
        }
        if (alpha != 1)
          for (int64_t d = 0; d < Evp; d++) ot[r * Evp + d] *= alpha;
      }
      SD_FN(mm)(bqp, Evp, bkp, st, BK, vv + j0 * Evp, Evp, ot, Evp, true);
    }
    for (int64_t r = 0; r < bq; r++) {
      SD_T *orow = o + (i0 + r) * Ev;
      if (l[r] == 0) { /* every key hidden: zeros */
        for (int64_t d = 0; d < Ev; d++) orow[d] = 0;
        lse[i0 + r] = (SD_T)-INFINITY;
        continue;
      }
      const SD_T inv = (SD_T)(1.0 / l[r]);
      for (int64_t d = 0; d < Ev; d++) orow[d] = ot[r * Evp + d] * inv;
      lse[i0 + r] = m[r] + (SD_T)log(l[r]);
    }
  }
}

/* Backward of one (batch, head): the rows of gq (L, E), gk (S, E) and gv
 * (S, Ev) that are not NULL. */
EM_CPU_CLONES static void SD_FN(bwd_head)(const sd_head *hd, const sd_work *w, const SD_T *o,
                                          const SD_T *lse, SD_T *gq, SD_T *gk, SD_T *gv) {
  const int64_t L = hd->L, S = hd->S, E = hd->E, Ev = hd->Ev;
  const int64_t Sp = w->Sp, Ep = w->Ep, Evp = w->Evp;
  SD_T *kt = w->kt, *kk = w->kk, *vt = w->vt, *qt = w->qt, *dot = w->dot, *st = w->st;
  SD_T *dpt = w->dpt, *pdt = w->pdt, *dst = w->dst, *dq = w->dq, *dk = w->dk, *dv = w->dv;
  SD_T *z = w->z, *dd = w->m;
  const SD_T *Q = hd->q, *K = hd->k, *V = hd->v, *G = hd->g;
  const SD_T scale = (SD_T)hd->scale;
  SD_FN(pack)(kt, Sp, Sp, E, K, S, E, hd->ks[0], hd->ks[1], true);   /* (E, Sp) */
  SD_FN(pack)(kk, Ep, Sp, Ep, K, S, E, hd->ks[0], hd->ks[1], false); /* (Sp, Ep) */
  SD_FN(pack)(vt, Sp, Sp, Ev, V, S, Ev, hd->vs[0], hd->vs[1], true); /* (Ev, Sp) */
  if (gk) memset(dk, 0, sizeof(SD_T) * (size_t)(Sp * Ep));
  if (gv) memset(dv, 0, sizeof(SD_T) * (size_t)(Sp * Evp));
  for (int64_t i0 = 0; i0 < L; i0 += BQ) {
    const int64_t bq = L - i0 < BQ ? L - i0 : BQ, bqp = RUP(bq, 4);
    const int64_t jend = key_end(hd, i0 + bq - 1);
    memset(dq, 0, sizeof(SD_T) * (size_t)(bqp * Ep));
    if (jend > 0) {
      SD_FN(pack)(qt, Ep, bqp, Ep, Q + i0 * hd->qs[0], bq, E, hd->qs[0], hd->qs[1], false);
      SD_FN(pack)(dot, Evp, bqp, Evp, G + i0 * hd->gs[0], bq, Ev, hd->gs[0], hd->gs[1], false);
      for (int64_t r = 0; r < bq; r++) { /* D_i = g_i . o_i */
        double s = 0;
        for (int64_t d = 0; d < Ev; d++)
          s += (double)dot[r * Evp + d] * (double)o[(i0 + r) * Ev + d];
        dd[r] = (SD_T)s;
      }
    }
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      const int64_t bkp = RUP(jend - j0 < BK ? jend - j0 : BK, 16);
      SD_FN(mm)(bqp, bkp, E, qt, Ep, kt + j0, Sp, st, BK, false);
      SD_FN(mm)(bqp, bkp, Ev, dot, Evp, vt + j0, Sp, dpt, BK, false);
      for (int64_t r = 0; r < bqp; r++) {
        SD_T *srow = st + r * BK, *dprow = dpt + r * BK;
        const SD_T li = r < bq ? lse[i0 + r] : (SD_T)-INFINITY;
        if (li == (SD_T)-INFINITY) { /* every key hidden (or a padding row): no gradient */
          for (int64_t c = 0; c < bkp; c++) srow[c] = dprow[c] = 0;
        } else {
          SD_FN(mask_row)(hd, srow, i0 + r, j0, bkp);
          for (int64_t c = 0; c < bkp; c++) srow[c] = SD_EXP(srow[c] - li); /* P */
          if (hd->dropout) {
            SD_FN(keep_row)(hd, z, i0 + r, j0, bkp);
            for (int64_t c = 0; c < bkp; c++) dprow[c] *= z[c];
          }
          const SD_T di = dd[r];
          for (int64_t c = 0; c < bkp; c++) { /* dprow: P z; srow: dS * scale */
            const SD_T p = srow[c];
            srow[c] = p * (dprow[c] - di) * scale;
            dprow[c] = hd->dropout ? p * z[c] : p;
          }
        }
        for (int64_t c = 0; c < bkp; c++) {
          pdt[c * BQ + r] = dprow[c];
          dst[c * BQ + r] = srow[c];
        }
      }
      if (gv) SD_FN(mm)(bkp, Evp, bqp, pdt, BQ, dot, Evp, dv + j0 * Evp, Evp, true);
      if (gk) SD_FN(mm)(bkp, Ep, bqp, dst, BQ, qt, Ep, dk + j0 * Ep, Ep, true);
      if (gq) SD_FN(mm)(bqp, Ep, bkp, st, BK, kk + j0 * Ep, Ep, dq, Ep, true);
    }
    for (int64_t r = 0; gq && r < bq; r++)
      for (int64_t e = 0; e < E; e++) gq[(i0 + r) * E + e] = dq[r * Ep + e];
  }
  for (int64_t j = 0; gk && j < S; j++)
    for (int64_t e = 0; e < E; e++) gk[j * E + e] = dk[j * Ep + e];
  for (int64_t j = 0; gv && j < S; j++)
    for (int64_t d = 0; d < Ev; d++) gv[j * Ev + d] = dv[j * Evp + d];
}
