/* pool2d.c: em_max_pool2d and em_avg_pool2d, their autograd nodes and
 * their f32 fast path.
 *
 * The fast path works plane by plane (one (n, c) image channel), planes
 * split over the thread pool. Max pool records, for each output, the
 * position of its maximum in the plane (int32), and backward scatters the
 * gradient there; for the common 2x2 stride-2 pool a fresh input
 * gradient is written window by window in one pass instead of zeroing
 * it first. f64 runs the loop reference (pool-ref.c), which the tests
 * compare the fast path against. */
#include "conv-private.h"

#include "em-pool.h"

#include <math.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef struct {
  const em_pool_geom *g;
  const float *x;   /* (N, C, H, W) */
  float *y;         /* (N, C, OH, OW) */
  int32_t *idx;     /* (N, C, OH, OW) max positions in the plane */
  const float *gy;  /* (N, C, OH, OW) */
  float *gx;        /* (N, C, H, W) */
  bool fresh;
} pool_ctx;

/* Planes per chunk of the pool: about 64k elements. */
static int64_t plane_grain(const em_pool_geom *g) {
  int64_t per = g->H * g->W > 0 ? g->H * g->W : 1;
  return per >= 65536 ? 1 : 65536 / per;
}

static bool is_2x2(const em_pool_geom *g) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0;
}

/* ---- max ---------------------------------------------------------------------- */

#if defined(__AVX512F__)
/* 2x2 stride-2 max pool of one output row from input rows r0, r1, 16
 * outputs a vector: deinterleave even and odd columns, then the same
 * first-max-or-NaN rule as the scalar loop, as lane masks. idx gets
 * positions in the plane; base is the position of r0[0]. */
static void max2x2_fwd_row(const float *r0, const float *r1, int64_t OW, int32_t W, int32_t base,
                           float *y, int32_t *idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i k1 = _mm512_set1_epi32(1), kw = _mm512_set1_epi32(W),
                kw1 = _mm512_set1_epi32(W + 1);
  for (int64_t ox = 0; ox < OW; ox += 16) {
    uint32_t n = (uint32_t)(OW - ox < 16 ? OW - ox : 16);
    __mmask16 mo = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1);
    __mmask16 ml = (__mmask16)(n >= 8 ? 0xFFFFu : (1u << (2 * n)) - 1);
    __mmask16 mh = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
    __m512 l0 = _mm512_maskz_loadu_ps(ml, r0 + 2 * ox);
    __m512 h0 = _mm512_maskz_loadu_ps(mh, r0 + 2 * ox + 16);
    __m512 l1 = _mm512_maskz_loadu_ps(ml, r1 + 2 * ox);
    __m512 h1 = _mm512_maskz_loadu_ps(mh, r1 + 2 * ox + 16);
    __m512 m = _mm512_permutex2var_ps(l0, even, h0), v;
    __m512i k = _mm512_setzero_si512();
    __mmask16 t;
    v = _mm512_permutex2var_ps(l0, odd, h0);
    t = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_mask_mov_ps(m, t, v);
    k = _mm512_mask_mov_epi32(k, t, k1);
    v = _mm512_permutex2var_ps(l1, even, h1);
    t = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_mask_mov_ps(m, t, v);
    k = _mm512_mask_mov_epi32(k, t, kw);
    v = _mm512_permutex2var_ps(l1, odd, h1);
    t = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_mask_mov_ps(m, t, v);
    k = _mm512_mask_mov_epi32(k, t, kw1);
    __m512i at =
        _mm512_add_epi32(_mm512_set1_epi32(base + 2 * (int32_t)ox), _mm512_add_epi32(even, k));
    _mm512_mask_storeu_ps(y + ox, mo, m);
    _mm512_mask_storeu_epi32(idx + ox, mo, at);
  }
}

/* Backward of max2x2_fwd_row into a fresh gradient: each window's four
 * elements are written (gy at the max, zero elsewhere), re-interleaved. */
static void max2x2_bwd_row(const float *gy, const int32_t *idx, int64_t OW, int32_t W,
                           int32_t base, float *r0, float *r1) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  for (int64_t ox = 0; ox < OW; ox += 16) {
    uint32_t n = (uint32_t)(OW - ox < 16 ? OW - ox : 16);
    __mmask16 mo = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1);
    __mmask16 ml = (__mmask16)(n >= 8 ? 0xFFFFu : (1u << (2 * n)) - 1);
    __mmask16 mh = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
    __m512 v = _mm512_maskz_loadu_ps(mo, gy + ox);
    __m512i k = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mo, idx + ox),
                                 _mm512_add_epi32(_mm512_set1_epi32(base + 2 * (int32_t)ox), even));
    __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), v);
    __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(1)), v);
    __m512 e2 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(W)), v);
    __m512 e3 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(W + 1)), v);
    _mm512_mask_storeu_ps(r0 + 2 * ox, ml, _mm512_permutex2var_ps(e0, lo, e1));
    _mm512_mask_storeu_ps(r0 + 2 * ox + 16, mh, _mm512_permutex2var_ps(e0, hi, e1));
    _mm512_mask_storeu_ps(r1 + 2 * ox, ml, _mm512_permutex2var_ps(e2, lo, e3));
    _mm512_mask_storeu_ps(r1 + 2 * ox + 16, mh, _mm512_permutex2var_ps(e2, hi, e3));
  }
}
#else
/* The plain loops of the two row functions above. */
static void max2x2_fwd_row(const float *r0, const float *r1, int64_t OW, int32_t W, int32_t base,
                           float *y, int32_t *idx) {
  for (int64_t ox = 0; ox < OW; ox++) {
    float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
    float m = a;
    int32_t k = 0;
    if (b > m || isnan(b)) m = b, k = 1;
    if (c > m || isnan(c)) m = c, k = W;
    if (d > m || isnan(d)) m = d, k = W + 1;
    y[ox] = m;
    idx[ox] = base + (int32_t)(2 * ox) + k;
  }
}

static void max2x2_bwd_row(const float *gy, const int32_t *idx, int64_t OW, int32_t W,
                           int32_t base, float *r0, float *r1) {
  for (int64_t ox = 0; ox < OW; ox++) {
    float v = gy[ox];
    int32_t k = idx[ox] - base - (int32_t)(2 * ox);
    r0[2 * ox] = k == 0 ? v : 0.f;
    r0[2 * ox + 1] = k == 1 ? v : 0.f;
    r1[2 * ox] = k == W ? v : 0.f;
    r1[2 * ox + 1] = k == W + 1 ? v : 0.f;
  }
}
#endif

static void max_fwd_planes(void *vctx, int64_t p0, int64_t p1) {
  pool_ctx *c = vctx;
  const em_pool_geom *g = c->g;
  const int64_t W = g->W, HW = g->H * g->W, OW = g->OW, OHW = g->OH * g->OW;
  for (int64_t pl = p0; pl < p1; pl++) {
    const float *x = c->x + pl * HW; /* (H, W) */
    float *y = c->y + pl * OHW;       /* (OH, OW) */
    int32_t *idx = c->idx + pl * OHW;
    if (is_2x2(g)) {
      for (int64_t oy = 0; oy < g->OH; oy++) {
        const float *r0 = x + 2 * oy * W, *r1 = r0 + W;
        max2x2_fwd_row(r0, r1, OW, (int32_t)W, (int32_t)(2 * oy * W), y + oy * OW,
                       idx + oy * OW);
      }
      continue;
    }
    for (int64_t oy = 0; oy < g->OH; oy++)
      for (int64_t ox = 0; ox < OW; ox++) {
        int64_t h0, h1, w0, w1;
        em_pool_window(g, oy, ox, &h0, &h1, &w0, &w1);
        float m = -INFINITY;
        int64_t at = h0 * W + w0;
        for (int64_t iy = h0; iy < h1; iy++)
          for (int64_t ix = w0; ix < w1; ix++) {
            float v = x[iy * W + ix];
            if (v > m || isnan(v)) {
              m = v;
              at = iy * W + ix;
            }
          }
        y[oy * OW + ox] = m;
        idx[oy * OW + ox] = (int32_t)at;
      }
  }
}

static void max_bwd_planes(void *vctx, int64_t p0, int64_t p1) {
  pool_ctx *c = vctx;
  const em_pool_geom *g = c->g;
  const int64_t W = g->W, HW = g->H * g->W, OW = g->OW, OHW = g->OH * g->OW;
  for (int64_t pl = p0; pl < p1; pl++) {
    const float *gy = c->gy + pl * OHW; /* (OH, OW) */
    const int32_t *idx = c->idx + pl * OHW;
    float *gx = c->gx + pl * HW; /* (H, W) */
    if (c->fresh && is_2x2(g)) { /* windows tile the plane: write each once */
      for (int64_t oy = 0; oy < g->OH; oy++) {
        float *r0 = gx + 2 * oy * W, *r1 = r0 + W;
        max2x2_bwd_row(gy + oy * OW, idx + oy * OW, OW, (int32_t)W, (int32_t)(2 * oy * W), r0,
                       r1);
        if (W > 2 * OW) r0[W - 1] = r1[W - 1] = 0.f; /* odd width: last column */
      }
      if (g->H > 2 * g->OH) memset(gx + 2 * g->OH * W, 0, sizeof(float) * (size_t)W);
      continue;
    }
    if (c->fresh) memset(gx, 0, sizeof(float) * (size_t)HW);
    for (int64_t o = 0; o < OHW; o++) gx[idx[o]] += gy[o];
  }
}

/* ---- avg ---------------------------------------------------------------------- */

static void avg_fwd_planes(void *vctx, int64_t p0, int64_t p1) {
  pool_ctx *c = vctx;
  const em_pool_geom *g = c->g;
  const int64_t W = g->W, HW = g->H * g->W, OW = g->OW, OHW = g->OH * g->OW;
  for (int64_t pl = p0; pl < p1; pl++) {
    const float *x = c->x + pl * HW;
    float *y = c->y + pl * OHW;
    for (int64_t oy = 0; oy < g->OH; oy++)
      for (int64_t ox = 0; ox < OW; ox++) {
        int64_t h0, h1, w0, w1;
        int64_t div = em_pool_window(g, oy, ox, &h0, &h1, &w0, &w1);
        float acc = 0.f;
        for (int64_t iy = h0; iy < h1; iy++)
          for (int64_t ix = w0; ix < w1; ix++) acc += x[iy * W + ix];
        y[oy * OW + ox] = acc / (float)div;
      }
  }
}

static void avg_bwd_planes(void *vctx, int64_t p0, int64_t p1) {
  pool_ctx *c = vctx;
  const em_pool_geom *g = c->g;
  const int64_t W = g->W, HW = g->H * g->W, OW = g->OW, OHW = g->OH * g->OW;
  for (int64_t pl = p0; pl < p1; pl++) {
    const float *gy = c->gy + pl * OHW;
    float *gx = c->gx + pl * HW;
    if (c->fresh) memset(gx, 0, sizeof(float) * (size_t)HW);
    for (int64_t oy = 0; oy < g->OH; oy++)
      for (int64_t ox = 0; ox < OW; ox++) {
        int64_t h0, h1, w0, w1;
        int64_t div = em_pool_window(g, oy, ox, &h0, &h1, &w0, &w1);
        float v = gy[oy * OW + ox] / (float)div;
        for (int64_t iy = h0; iy < h1; iy++)
          for (int64_t ix = w0; ix < w1; ix++) gx[iy * W + ix] += v;
      }
  }
}

/* ---- ops and autograd ---------------------------------------------------------- */

static void node_geom(const em_node *nd, em_pool_geom *g) {
  em_pool2d_params p = em_pool2d_params_load(nd);
  em_pool_geom_init(g, nd->in[0], &p);
}

/* Fast nodes: ctx holds the max positions (max pool). Reference nodes:
 * saved[0] is x. i[7] tells max (1) from avg (0). */
static void pool_backward_fast(em_node *n) {
  bool fresh;
  em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
  if (!gx) return;
  em_pool_geom g;
  node_geom(n, &g);
  pool_ctx c = {.g = &g, .idx = n->ctx, .gy = em_f32(n->out->grad), .gx = em_f32(gx),
                .fresh = fresh};
  em_parallel_for(g.N * g.C, plane_grain(&g), n->i[7] ? max_bwd_planes : avg_bwd_planes, &c);
}

static void pool_backward_ref(em_node *n) {
  bool fresh;
  em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
  if (!gx) return;
  em_pool_geom g;
  node_geom(n, &g);
  if (n->i[7]) em_max_pool2d_ref_backward(&g, n->saved[0], n->out->grad, gx, fresh);
  else em_avg_pool2d_ref_backward(&g, n->out->grad, gx, fresh);
}

static em_tensor *pool_run(em_tensor *x /* (N, C, H, W) */, const em_pool2d_params *p, bool max,
                           bool ref) {
  if (em_on_device(x)) return max ? em_dev_max_pool2d(x, p) : em_dev_avg_pool2d(x, p);
  EM_ASSERT(p && x->ndim == 4 && EM_IS_FLOAT(x));
  EM_OP_BEGIN(max ? "max_pool2d" : "avg_pool2d", 1, x);
  em_pool_geom g;
  em_pool_geom_init(&g, x, p);
  EM_ASSERT(g.H * g.W <= INT32_MAX);
  ref = ref || x->dtype != EM_DTYPE_F32;
  int64_t shape[4] = {g.N, g.C, g.OH, g.OW};
  em_tensor *y = em_empty(x->dtype, 4, shape); /* (N, C, OH, OW) */
  int32_t *idx = NULL;
  if (ref) {
    if (max) em_max_pool2d_ref_forward(&g, x, y);
    else em_avg_pool2d_ref_forward(&g, x, y);
  } else {
    em_tensor *xc = x;
    if (!em_tensor_is_contiguous(x)) {
      xc = em_empty(x->dtype, 4, x->shape);
      em_tensor_copy_(xc, x);
    }
    pool_ctx c = {.g = &g, .x = em_f32(xc), .y = em_f32(y)};
    if (max) c.idx = idx = em_scratch(sizeof(int32_t) * (size_t)(em_tensor_numel(y) + 1));
    em_parallel_for(g.N * g.C, plane_grain(&g), max ? max_fwd_planes : avg_fwd_planes, &c);
  }
  em_tensor *ins[1] = {x};
  if (em_needs_grad(1, ins)) {
    em_node *nd = em_record(max ? "max_pool2d" : "avg_pool2d",
                            ref ? pool_backward_ref : pool_backward_fast, y, 1, ins);
    em_pool2d_params_save(nd, p);
    nd->i[7] = max;
    nd->ctx = idx;
    if (ref) nd->saved[0] = x;
  }
  return EM_OP_END(y);
}

em_tensor *em_max_pool2d(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, true, false);
}

em_tensor *em_avg_pool2d(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, false, false);
}

em_tensor *em_max_pool2d_ref(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, true, true);
}

em_tensor *em_avg_pool2d_ref(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, false, true);
}
