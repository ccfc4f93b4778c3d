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

/* C (m, n; ldc) (+)= op(A) (m, k) B (k, n; ldb), op(A) = A (m, k; lda),
 * or A^T for A (k, m; lda) when ta; m a multiple of 8 and n of 16: 8 x 16
 * blocks of C kept in registers over the reduction (eight independent
 * fma chains, enough to cover the fma latency at one zmm per row), every
 * element summed in k order. */
#define SD_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static inline __attribute__((always_inline)) void SD_FN(mm)(bool ta, int64_t m, int64_t n,
                                                            int64_t k, const SD_T *a,
                                                            int64_t lda, const SD_T *b,
                                                            int64_t ldb, SD_T *c, int64_t ldc,
                                                            bool acc) {
  const int64_t ar = ta ? 1 : lda, ak = ta ? lda : 1; /* A's strides along m and k */
  for (int64_t i = 0; i < m; i += 8)
    for (int64_t j = 0; j < n; j += 16) {
#define SD_DECL(r) SD_T s##r[16];
      SD_ROWS(SD_DECL)
#undef SD_DECL
      for (int q = 0; q < 16; q++) {
#define SD_INIT(r) s##r[q] = acc ? c[(i + r) * ldc + j + q] : 0;
        SD_ROWS(SD_INIT)
#undef SD_INIT
      }
      const SD_T *ai = a + i * ar;
      for (int64_t p = 0; p < k; p++) {
        const SD_T *br = b + p * ldb + j, *ap = ai + p * ak;
#define SD_LOAD(r) const SD_T x##r = ap[r * ar];
        SD_ROWS(SD_LOAD)
#undef SD_LOAD
        for (int q = 0; q < 16; q++) {
#define SD_STEP(r) s##r[q] = SD_FMA(x##r, br[q], s##r[q]);
          SD_ROWS(SD_STEP)
#undef SD_STEP
        }
      }
      for (int q = 0; q < 16; q++) {
#define SD_STORE(r) c[(i + r) * ldc + j + q] = s##r[q];
        SD_ROWS(SD_STORE)
#undef SD_STORE
      }
    }
}
#undef SD_ROWS

/* The rows a pack asks the cache for ahead of the one it copies: a
 * head's rows are short runs (E features) far apart (the width of a
 * packed projection), which the hardware prefetcher does not follow. */
#define SD_PREFETCH 8

/* The start and end of row r + SD_PREFETCH of a pack's source. */
static inline void SD_FN(prefetch_row)(const SD_T *src, int64_t r, int64_t rows, int64_t cols,
                                       int64_t rs, int64_t cs) {
  if (r + SD_PREFETCH >= rows) return;
  const SD_T *p = src + (r + SD_PREFETCH) * rs;
  __builtin_prefetch(p);
  __builtin_prefetch(p + (cols - 1) * cs);
}

/* dst (rows_p, cols_p; ldd) = src (rows, cols) with strides (rs, cs),
 * zero beyond it; transposed (dst (cols_p, rows_p; ldd), dst[c][r]) when
 * tr. */
static inline void SD_FN(pack)(SD_T *dst, int64_t ldd, int64_t rows_p, int64_t cols_p,
                               const SD_T *src, int64_t rows, int64_t cols, int64_t rs,
                               int64_t cs, bool tr) {
  if (tr) {
    for (int64_t c = 0; c < cols_p; c++) {
      SD_T *d = dst + c * ldd;
      for (int64_t r = c < cols ? rows : 0; r < rows_p; r++) d[r] = 0;
    }
    for (int64_t r = 0; r < rows; r++) {
      const SD_T *sr = src + r * rs;
      SD_FN(prefetch_row)(src, r, rows, cols, rs, cs);
      for (int64_t c = 0; c < cols; c++) dst[c * ldd + r] = sr[c * cs];
    }
    return;
  }
  for (int64_t r = 0; r < rows_p; r++) {
    SD_T *d = dst + r * ldd;
    const SD_T *sr = src + r * rs;
    SD_FN(prefetch_row)(src, r, rows, cols, rs, cs);
    const int64_t n = r < rows ? cols : 0;
    if (cs == 1)
      for (int64_t c = 0; c < n; c++) d[c] = sr[c];
    else
      for (int64_t c = 0; c < n; c++) d[c] = sr[c * cs];
    for (int64_t c = n; c < cols_p; c++) d[c] = 0;
  }
}

/* Row r of a score tile: s = scale * raw for the keys query i sees, -inf
 * for the others; returns the row's maximum. */
static inline SD_T SD_FN(mask_row)(const sd_head *hd, SD_T *row, int64_t i, int64_t j0,
                                   int64_t bkp) {
  const int64_t last = hd->causal ? i + hd->S - hd->L : hd->S - 1; /* the last key i sees */
  const SD_T scale = (SD_T)hd->scale, ninf = (SD_T)-INFINITY;
  SD_T mx[16]; /* 16 lanes (bkp is a multiple of 16), so that it vectorises */
  for (int q = 0; q < 16; q++) mx[q] = ninf;
  for (int64_t c = 0; c < bkp; c += 16)
    for (int q = 0; q < 16; q++) {
      const int64_t j = j0 + c + q;
      const SD_T s = ((j > last) | hd->hidden[j]) ? ninf : row[c + q] * scale; /* branch-free */
      row[c + q] = s;
      mx[q] = s > mx[q] ? s : mx[q];
    }
  SD_T m = ninf;
  for (int q = 0; q < 16; q++) m = mx[q] > m ? mx[q] : m;
  return m;
}

/* The sum of row[0, bkp) in double, in 8 lanes (bkp is a multiple of 16)
 * added in a fixed order: the same number at every vector width. */
static inline double SD_FN(row_sum)(const SD_T *row, int64_t bkp) {
  double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t c = 0; c < bkp; c += 8)
    for (int q = 0; q < 8; q++) l[q] += (double)row[c + q];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
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

/* a . b over n values: 16 lanes (a GCC vector, which every clone splits
 * into the registers it has: the compiler does not vectorise a lane
 * array whose end is a sum) of products and adds, then a fixed tree, so
 * the same number at every vector width. */
typedef SD_T SD_FN(v16) __attribute__((vector_size(16 * sizeof(SD_T))));
static inline SD_T SD_FN(dot)(const SD_T *a, const SD_T *b, int64_t bs, int64_t n) {
  SD_FN(v16) l = {0}, x, y;
  SD_T t = 0;
  int64_t e = 0;
  if (bs == 1)
    for (; e + 16 <= n; e += 16) {
      memcpy(&x, a + e, sizeof x);
      memcpy(&y, b + e, sizeof y);
      l += x * y;
    }
  for (; e < n; e++) t += a[e] * b[e * bs]; /* the rest, in order */
  SD_T h[8];
  for (int q = 0; q < 8; q++) h[q] = l[q] + l[q + 8];
  for (int q = 0; q < 4; q++) h[q] += h[q + 4];
  return ((h[0] + h[2]) + (h[1] + h[3])) + t;
}

/* a . b over n values in double: 8 lanes (blocks of 8 values; the rest
 * into the first lanes, in order), then a fixed tree, so the same number
 * at every vector width; 8 chains instead of one keep the adds' latency
 * out of backward's per-row D. */
static inline double SD_FN(dot_d)(const SD_T *a, const SD_T *b, int64_t bs, int64_t n) {
  double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t e = 0;
  if (bs == 1)
    for (; e + 8 <= n; e += 8)
      for (int q = 0; q < 8; q++) l[q] += (double)a[e + q] * (double)b[e + q];
  else
    for (; e + 8 <= n; e += 8)
      for (int q = 0; q < 8; q++) l[q] += (double)a[e + q] * (double)b[(e + q) * bs];
  for (int q = 0; e < n; e++, q++) l[q] += (double)a[e] * (double)b[e * bs];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* Forward of one (batch, head) with fewer than 8 queries (a KV-cache
 * step): K and V read where they lie, nothing packed; each score is a
 * dot of 16 lanes, each output row accumulates P V key by key, with the
 * tiles' online softmax over blocks of BK keys. */
EM_CPU_CLONES static void SD_FN(fwd_rows)(const sd_head *hd, const sd_work *w, SD_T *lse) {
  const int64_t E = hd->E, Ev = hd->Ev, oc = hd->os[1];
  const SD_T *Q = hd->q, *K = hd->k, *V = hd->v;
  SD_T *qv = w->qt, *row = w->st, *acc = w->ot, *z = w->z;
  for (int64_t i = 0; i < hd->L; i++) {
    SD_FN(pack)(qv, w->Ep, 1, w->Ep, Q + i * hd->qs[0], 1, E, 0, hd->qs[1], false);
    const int64_t jend = key_end(hd, i);
    SD_T m = (SD_T)-INFINITY;
    double l = 0;
    for (int64_t d = 0; d < Ev; d++) acc[d] = 0;
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      const int64_t bk = jend - j0 < BK ? jend - j0 : BK, bkp = RUP(bk, 16);
      for (int64_t c = 0; c < bkp; c++)
        row[c] = c < bk ? SD_FN(dot)(qv, K + (j0 + c) * hd->ks[0], hd->ks[1], E) : 0;
      const SD_T mt = SD_FN(mask_row)(hd, row, i, j0, bkp), mn = mt > m ? mt : m;
      if (mn == (SD_T)-INFINITY) continue;
      const SD_T alpha = SD_EXP(m - mn);
      for (int64_t c = 0; c < bkp; c++) row[c] = SD_EXP(row[c] - mn);
      l = l * (double)alpha + SD_FN(row_sum)(row, bkp);
      m = mn;
      if (hd->dropout) {
        SD_FN(keep_row)(hd, z, i, j0, bkp);
        for (int64_t c = 0; c < bkp; c++) row[c] *= z[c];
      }
      if (alpha != 1)
        for (int64_t d = 0; d < Ev; d++) acc[d] *= alpha;
      for (int64_t c = 0; c < bk; c++) {
        const SD_T p = row[c], *vr = V + (j0 + c) * hd->vs[0];
        if (p == 0) continue;
        if (hd->vs[1] == 1)
          for (int64_t d = 0; d < Ev; d++) acc[d] = SD_FMA(p, vr[d], acc[d]);
        else
          for (int64_t d = 0; d < Ev; d++) acc[d] = SD_FMA(p, vr[d * hd->vs[1]], acc[d]);
      }
    }
    SD_T *orow = (SD_T *)hd->o + i * hd->os[0];
    if (l == 0) { /* every key hidden: zeros */
      for (int64_t d = 0; d < Ev; d++) orow[d * oc] = 0;
      lse[i] = (SD_T)-INFINITY;
      continue;
    }
    const SD_T inv = (SD_T)(1.0 / l);
    for (int64_t d = 0; d < Ev; d++) orow[d * oc] = acc[d] * inv;
    lse[i] = m + (SD_T)log(l);
  }
}

/* Forward of one (batch, head): its o rows (L, Ev) and lse (L). */
EM_CPU_CLONES static void SD_FN(fwd_head)(const sd_head *hd, const sd_work *w, SD_T *lse) {
  const int64_t L = hd->L, S = hd->S, E = hd->E, Ev = hd->Ev, Sp = w->Sp, Evp = w->Evp;
  const int64_t oc = hd->os[1];
  const SD_T *Q = hd->q, *K = hd->k, *V = hd->v;
  SD_T *kt = w->kt, *vv = w->vv, *qt = w->qt, *st = w->st, *ot = w->ot, *z = w->z, *m = w->m;
  double *l = w->l;
  SD_FN(pack)(kt, Sp, Sp, E, K, S, E, hd->ks[0], hd->ks[1], true);      /* (E, Sp) */
  SD_FN(pack)(vv, Evp, Sp, Evp, V, S, Ev, hd->vs[0], hd->vs[1], false); /* (Sp, Evp) */
  for (int64_t i0 = 0; i0 < L; i0 += BQ) {
    const int64_t bq = L - i0 < BQ ? L - i0 : BQ, bqp = RUP(bq, 8);
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
      SD_FN(mm)(false, bqp, bkp, E, qt, E, kt + j0, Sp, st, BK, false);
      for (int64_t r = 0; r < bqp; r++) {
        SD_T *row = st + r * BK;
        const SD_T mt = r < bq ? SD_FN(mask_row)(hd, row, i0 + r, j0, bkp) : (SD_T)-INFINITY;
        const SD_T mn = mt > m[r] ? mt : m[r];
        if (mn == (SD_T)-INFINITY) { /* nothing seen yet on this row */
          for (int64_t c = 0; c < bkp; c++) row[c] = 0;
          continue;
        }
        const SD_T alpha = SD_EXP(m[r] - mn);
        for (int64_t c = 0; c < bkp; c++) row[c] = SD_EXP(row[c] - mn);
        l[r] = l[r] * (double)alpha + SD_FN(row_sum)(row, bkp);
        m[r] = mn;
        if (hd->dropout) {
          SD_FN(keep_row)(hd, z, i0 + r, j0, bkp);
          for (int64_t c = 0; c < bkp; c++) row[c] *= z[c];
        }
        if (alpha != 1)
          for (int64_t d = 0; d < Evp; d++) ot[r * Evp + d] *= alpha;
      }
      SD_FN(mm)(false, bqp, Evp, bkp, st, BK, vv + j0 * Evp, Evp, ot, Evp, true);
    }
    for (int64_t r = 0; r < bq; r++) {
      SD_T *orow = (SD_T *)hd->o + (i0 + r) * hd->os[0];
      if (l[r] == 0) { /* every key hidden: zeros */
        for (int64_t d = 0; d < Ev; d++) orow[d * oc] = 0;
        lse[i0 + r] = (SD_T)-INFINITY;
        continue;
      }
      const SD_T inv = (SD_T)(1.0 / l[r]);
      for (int64_t d = 0; d < Ev; d++) orow[d * oc] = ot[r * Evp + d] * inv;
      lse[i0 + r] = m[r] + (SD_T)log(l[r]);
    }
  }
}

/* Backward of one (batch, head): the rows of gq (L, E), gk (S, E) and gv
 * (S, Ev) that are not NULL, from the forward's o rows and lse (L). */
EM_CPU_CLONES static void SD_FN(bwd_head)(const sd_head *hd, const sd_work *w, const SD_T *lse) {
  const SD_T *o = hd->o;
  SD_T *gq = hd->gq, *gk = hd->gk, *gv = hd->gv;
  const int64_t L = hd->L, S = hd->S, E = hd->E, Ev = hd->Ev;
  const int64_t Sp = w->Sp, Ep = w->Ep, Evp = w->Evp;
  SD_T *kt = w->kt, *kk = w->kk, *vt = w->vt, *qt = w->qt, *dot = w->dot, *st = w->st;
  SD_T *dpt = w->dpt, *dq = w->dq, *dk = w->dk, *dv = w->dv;
  SD_T *z = w->z, *dd = w->m;
  const SD_T *Q = hd->q, *K = hd->k, *V = hd->v, *G = hd->g;
  const SD_T scale = (SD_T)hd->scale;
  SD_FN(pack)(kt, Sp, Sp, E, K, S, E, hd->ks[0], hd->ks[1], true);   /* (E, Sp) */
  SD_FN(pack)(kk, Ep, Sp, Ep, K, S, E, hd->ks[0], hd->ks[1], false); /* (Sp, Ep) */
  SD_FN(pack)(vt, Sp, Sp, Ev, V, S, Ev, hd->vs[0], hd->vs[1], true); /* (Ev, Sp) */
  if (gk) memset(dk, 0, sizeof(SD_T) * (size_t)(Sp * Ep));
  if (gv) memset(dv, 0, sizeof(SD_T) * (size_t)(Sp * Evp));
  for (int64_t i0 = 0; i0 < L; i0 += BQ) {
    const int64_t bq = L - i0 < BQ ? L - i0 : BQ, bqp = RUP(bq, 8);
    const int64_t jend = key_end(hd, i0 + bq - 1);
    memset(dq, 0, sizeof(SD_T) * (size_t)(bqp * Ep));
    if (jend > 0) {
      SD_FN(pack)(qt, Ep, bqp, Ep, Q + i0 * hd->qs[0], bq, E, hd->qs[0], hd->qs[1], false);
      SD_FN(pack)(dot, Evp, bqp, Evp, G + i0 * hd->gs[0], bq, Ev, hd->gs[0], hd->gs[1], false);
      for (int64_t r = 0; r < bq; r++) /* D_i = g_i . o_i */
        dd[r] = (SD_T)SD_FN(dot_d)(dot + r * Evp, o + (i0 + r) * hd->os[0], hd->os[1], Ev);
    }
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      const int64_t bkp = RUP(jend - j0 < BK ? jend - j0 : BK, 16);
      SD_FN(mm)(false, bqp, bkp, E, qt, Ep, kt + j0, Sp, st, BK, false);
      SD_FN(mm)(false, bqp, bkp, Ev, dot, Evp, vt + j0, Sp, dpt, BK, false);
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
      }
      /* dV += (P z)^T dO, dK += dS^T Q, dQ += dS K (dS with the scale) */
      if (gv) SD_FN(mm)(true, bkp, Evp, bqp, dpt, BK, dot, Evp, dv + j0 * Evp, Evp, true);
      if (gk) SD_FN(mm)(true, bkp, Ep, bqp, st, BK, qt, Ep, dk + j0 * Ep, Ep, true);
      if (gq) SD_FN(mm)(false, bqp, Ep, bkp, st, BK, kk + j0 * Ep, Ep, dq, Ep, true);
    }
    for (int64_t r = 0; gq && r < bq; r++)
      for (int64_t e = 0; e < E; e++) gq[(i0 + r) * hd->gqs[0] + e * hd->gqs[1]] = dq[r * Ep + e];
  }
  for (int64_t j = 0; gk && j < S; j++)
    for (int64_t e = 0; e < E; e++) gk[j * hd->gks[0] + e * hd->gks[1]] = dk[j * Ep + e];
  for (int64_t j = 0; gv && j < S; j++)
    for (int64_t d = 0; d < Ev; d++) gv[j * hd->gvs[0] + d * hd->gvs[1]] = dv[j * Evp + d];
}
