/* quant-rows.c: the activation quantisation of rows (em_quant_rows and
 * em_quant_rows16, quant-private.h), written once over quant-vec.h and
 * compiled per instruction set (quant-isa.h): AVX-512, AVX2 and SSE2.
 *
 * The same IEEE operations as the plain loop em_quant_rows_ref, so the
 * same bytes: min / max are exact and keep the accumulator on a NaN, as
 * the loop's comparisons do (lanes past D load as 0, which the range
 * holds anyway, and 0 * 0 adds nothing to the NaN test); the lanes are
 * then folded in any order (a minimum is exact). The scaled values are
 * rounded by cvtps2dq, which rounds as rint does (to nearest, ties to
 * even, under the default rounding mode that rintf follows too), and the
 * zero point is added as an integer: exact, since |x / s| <= 255 and a
 * little; the clamp to [0, 255] is integer too (a NaN row's INT32_MIN
 * lands on 0, as the loop's NaN does). */
#include "quant-isa.h"

#if defined(__x86_64__)
#include "quant-vec.h"

void em_quant_rows_isa(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a,
                       int16_t *a16, float *sx, int32_t *zp) {
  const qvf zero = qvf_zero();
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D; /* (D) */
    uint8_t *ar = a16 ? NULL : a + m * Dp; /* (Dp) */
    int16_t *ar16 = a16 ? a16 + m * Dp : NULL;
    /* two chains of each: min / max latency */
    qvf lo = zero, hi = zero, lo2 = zero, hi2 = zero, nf = zero, nf2 = zero;
    int64_t d = 0;
    for (; d + 2 * QV_LANES <= D; d += 2 * QV_LANES) {
      qvf v = qvf_load(xr + d), v2 = qvf_load(xr + d + QV_LANES);
      lo = qvf_min(v, lo); /* a NaN keeps lo */
      hi = qvf_max(v, hi);
      lo2 = qvf_min(v2, lo2);
      hi2 = qvf_max(v2, hi2);
      nf = qvf_add(qvf_mul(v, zero), nf); /* NaN once a NaN or an infinity passed */
      nf2 = qvf_add(qvf_mul(v2, zero), nf2);
    }
    lo = qvf_min(lo2, lo);
    hi = qvf_max(hi2, hi);
    nf = qvf_add(nf2, nf);
    for (; d < D; d += QV_LANES) {
      qvf v = D - d >= QV_LANES ? qvf_load(xr + d) : qvf_load_part(xr + d, (int)(D - d));
      lo = qvf_min(v, lo);
      hi = qvf_max(v, hi);
      nf = qvf_add(qvf_mul(v, zero), nf);
    }
    float ll[QV_LANES], hh[QV_LANES], nn[QV_LANES];
    qvf_lanes(lo, ll);
    qvf_lanes(hi, hh);
    qvf_lanes(nf, nn);
    float l = 0.f, h = 0.f, nsum = 0.f;
    for (int i = 0; i < QV_LANES; i++) {
      l = ll[i] < l ? ll[i] : l;
      h = hh[i] > h ? hh[i] : h;
      nsum += nn[i];
    }
    float s = em_quant_row_scale(l, h, nsum == 0.f);
    float z = em_quant_row_zero(l, s);
    const qvf inv = qvf_set1(1.f / s);
    const qvi zv = qvi_set1((int32_t)z);
    for (d = 0; d + 2 * QV_LANES <= D; d += 2 * QV_LANES) {
      qvi q0 = qvi_add(qvf_rint(qvf_mul(qvf_load(xr + d), inv)), zv);
      qvi q1 = qvi_add(qvf_rint(qvf_mul(qvf_load(xr + d + QV_LANES), inv)), zv);
      if (ar16) qv_store2_i16(ar16 + d, q0, q1);
      else qv_store2_u8(ar + d, q0, q1);
    }
    for (; d < D; d += QV_LANES) {
      int n = D - d >= QV_LANES ? QV_LANES : (int)(D - d);
      qvf v = n == QV_LANES ? qvf_load(xr + d) : qvf_load_part(xr + d, n);
      qvi q = qvi_add(qvf_rint(qvf_mul(v, inv)), zv);
      if (ar16) qv_store_i16(ar16 + d, q, n);
      else qv_store_u8(ar + d, q, n);
    }
    if (Dp > D && ar16) memset(ar16 + D, 0, (size_t)(Dp - D) * sizeof *ar16);
    else if (Dp > D) memset(ar + D, 0, (size_t)(Dp - D));
    sx[m] = s;
    zp[m] = (int32_t)z;
  }
}

#endif /* x86-64 */
