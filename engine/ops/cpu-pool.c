/* cpu-pool.c: the CPU backend's 2-D pooling kernels (the pool2d_forward
 * and pool2d_backward entries of em-backend.h), f32 and f64. The op
 * front-end is pool2d.c.
 *
 * f32 runs the fast path, plane by plane (one (n, c) image channel),
 * planes split over the thread pool. Max pool records, for each output,
 * the position of its maximum in the plane (int32: the entries' idx, or
 * scratch when no backward will read it), and backward scatters the
 * gradient there; for the common 2x2 stride-2 pool the input gradient is
 * written window by window in one pass instead of zeroing it first; its
 * rows come from the CPU kernel table (pool-fast.c, one version per
 * instruction set). f64 runs the loop reference
 * (engine/device/kernels/pool-ref.c), which the tests compare the fast
 * path against; the _ref kernels run it for either dtype
 * (em_max_pool2d_ref, em_avg_pool2d_ref). */
#include "cpu-kernels.h"

#include "em-pool.h"

#include <math.h>
#include <string.h>

typedef struct {
  const em_pool_geom *g;
  const float *x;   /* (N, C, H, W) */
  float *y;         /* (N, C, OH, OW) */
  int32_t *idx;     /* (N, C, OH, OW) max positions in the plane */
  const float *gy;  /* (N, C, OH, OW) */
  float *gx;        /* (N, C, H, W), written (the entries write, not accumulate) */
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


static void max_fwd_planes(void *vctx, int64_t p0, int64_t p1) {
  pool_ctx *c = vctx;
  const em_cpu_kernels *k = em_cpu_kernels_get();
  const em_pool_geom *g = c->g;
  const int64_t W = g->W, HW = g->H * g->W, OW = g->OW, OHW = g->OH * g->OW;
  for (int64_t pl = p0; pl < p1; pl++) {
    const float *x = c->x + pl * HW; /* (H, W) */
    float *y = c->y + pl * OHW;       /* (OH, OW) */
    int32_t *idx = c->idx + pl * OHW;
    if (is_2x2(g)) {
      for (int64_t oy = 0; oy < g->OH; oy++) {
        const float *r0 = x + 2 * oy * W, *r1 = r0 + W;
        k->max2x2_fwd_row(r0, r1, OW, (int32_t)W, (int32_t)(2 * oy * W), y + oy * OW,
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
  const em_cpu_kernels *k = em_cpu_kernels_get();
  const em_pool_geom *g = c->g;
  const int64_t W = g->W, HW = g->H * g->W, OW = g->OW, OHW = g->OH * g->OW;
  for (int64_t pl = p0; pl < p1; pl++) {
    const float *gy = c->gy + pl * OHW; /* (OH, OW) */
    const int32_t *idx = c->idx + pl * OHW;
    float *gx = c->gx + pl * HW; /* (H, W) */
    if (is_2x2(g)) { /* windows tile the plane: write each once */
      for (int64_t oy = 0; oy < g->OH; oy++) {
        float *r0 = gx + 2 * oy * W, *r1 = r0 + W;
        k->max2x2_bwd_row(gy + oy * OW, idx + oy * OW, OW, (int32_t)W, (int32_t)(2 * oy * W), r0,
                       r1);
        if (W > 2 * OW) r0[W - 1] = r1[W - 1] = 0.f; /* odd width: last column */
      }
      if (g->H > 2 * g->OH) memset(gx + 2 * g->OH * W, 0, sizeof(float) * (size_t)W);
      continue;
    }
    memset(gx, 0, sizeof(float) * (size_t)HW);
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
    memset(gx, 0, sizeof(float) * (size_t)HW);
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

/* ---- the kernel entries ------------------------------------------------------------ */

em_status em_cpu_pool2d_forward(bool max, em_tensor *y, em_tensor *idx, const em_tensor *x,
                                const em_pool2d_params *p) {
  EM_ASSERT(EM_IS_FLOAT(x) && y->dtype == x->dtype);
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
  em_pool_geom g;
  em_pool_geom_init(&g, x, p);
  if (x->dtype != EM_DTYPE_F32) {
    if (max) em_max_pool2d_ref_forward(&g, x, y);
    else em_avg_pool2d_ref_forward(&g, x, y);
    return EM_OK;
  }
  EM_ASSERT(g.H * g.W <= INT32_MAX);
  pool_ctx c = {.g = &g, .x = em_f32(x), .y = em_f32(y)};
  if (max) {
    EM_ASSERT(!idx || (idx->dtype == EM_DTYPE_I32 && em_tensor_is_contiguous(idx)));
    c.idx = idx ? (int32_t *)em_tensor_ptr(idx)
                : em_scratch(sizeof(int32_t) * (size_t)(em_tensor_numel(y) + 1));
  }
  em_parallel_for(g.N * g.C, plane_grain(&g), max ? max_fwd_planes : avg_fwd_planes, &c);
  return EM_OK;
}

em_status em_cpu_pool2d_backward(bool max, em_tensor *gx, const em_tensor *g, const em_tensor *x,
                                 const em_tensor *y, const em_tensor *idx,
                                 const em_pool2d_params *p) {
  (void)y;
  EM_ASSERT(EM_IS_FLOAT(x) && gx->dtype == x->dtype && g->dtype == x->dtype);
  EM_ASSERT(em_tensor_is_contiguous(gx) && em_tensor_is_contiguous(g) &&
            em_tensor_is_contiguous(x));
  em_pool_geom q;
  em_pool_geom_init(&q, x, p);
  if (x->dtype != EM_DTYPE_F32) {
    if (max) em_max_pool2d_ref_backward(&q, x, g, gx, true);
    else em_avg_pool2d_ref_backward(&q, g, gx, true);
    return EM_OK;
  }
  /* max: the positions its forward wrote */
  EM_ASSERT(!max || (idx && idx->dtype == EM_DTYPE_I32 && em_tensor_is_contiguous(idx)));
  pool_ctx c = {.g = &q, .idx = max ? (int32_t *)em_tensor_ptr(idx) : NULL, .gy = em_f32(g),
                .gx = em_f32(gx)};
  em_parallel_for(q.N * q.C, plane_grain(&q), max ? max_bwd_planes : avg_bwd_planes, &c);
  return EM_OK;
}

em_status em_cpu_pool2d_ref_forward(bool max, em_tensor *y, em_tensor *idx, const em_tensor *x,
                                    const em_pool2d_params *p) {
  (void)idx;
  em_pool_geom g;
  em_pool_geom_init(&g, x, p);
  if (max) em_max_pool2d_ref_forward(&g, x, y);
  else em_avg_pool2d_ref_forward(&g, x, y);
  return EM_OK;
}

em_status em_cpu_pool2d_ref_backward(bool max, em_tensor *gx, const em_tensor *g,
                                     const em_tensor *x, const em_tensor *y, const em_tensor *idx,
                                     const em_pool2d_params *p) {
  (void)y;
  (void)idx;
  em_pool_geom q;
  em_pool_geom_init(&q, x, p);
  if (max) em_max_pool2d_ref_backward(&q, x, g, gx, true);
  else em_avg_pool2d_ref_backward(&q, g, gx, true);
  return EM_OK;
}
