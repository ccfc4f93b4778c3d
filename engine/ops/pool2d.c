/* pool2d.c: em_max_pool2d and em_avg_pool2d, their autograd nodes and
 * their f32 fast path.
 *
 * The fast path works plane by plane (one (n, c) image channel), planes
 * split over the thread pool. Max pool records, for each output, the
 * position of its maximum in the plane (int32), and backward scatters the
 * gradient there; for the common 2x2 stride-2 pool a fresh input
 * gradient is written window by window in one pass instead of zeroing
 * it first; its rows come from the CPU kernel table (pool-fast.c, one
 * version per instruction set). f64 runs the loop reference (pool-ref.c), which the tests
 * compare the fast path against. */
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
    if (c->fresh && is_2x2(g)) { /* windows tile the plane: write each once */
      for (int64_t oy = 0; oy < g->OH; oy++) {
        float *r0 = gx + 2 * oy * W, *r1 = r0 + W;
        k->max2x2_bwd_row(gy + oy * OW, idx + oy * OW, OW, (int32_t)W, (int32_t)(2 * oy * W), r0,
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
