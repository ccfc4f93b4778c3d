/* pool-ref.c: the plain loop reference of the 2-D pools, forward and
 * backward (conv-ref.h), for any strides and f32 or f64 (the CPU's f64
 * always runs here), and the pooling geometry (conv-geom.h). Max pool's
 * backward finds each window's maximum again from x. */
#include "conv-ref.h"

#include "em-tensor.h"

#include <math.h>

void em_pool_geom_init(em_pool_geom *g, const em_tensor *x, const em_pool2d_params *p) {
  EM_ASSERT(x->ndim == 4);
  g->N = x->shape[0];
  g->C = x->shape[1];
  g->H = x->shape[2];
  g->W = x->shape[3];
  g->kh = p->kernel[0];
  g->kw = p->kernel[1];
  g->sh = p->stride[0];
  g->sw = p->stride[1];
  g->ph = p->padding[0];
  g->pw = p->padding[1];
  g->include_pad = p->count_include_pad;
  EM_ASSERT(g->kh >= 1 && g->kw >= 1 && g->sh >= 1 && g->sw >= 1);
  EM_ASSERT(g->ph >= 0 && g->pw >= 0 && 2 * g->ph <= g->kh && 2 * g->pw <= g->kw);
  EM_ASSERT(g->H + 2 * g->ph >= g->kh && g->W + 2 * g->pw >= g->kw && "pool: window too large");
  g->OH = (g->H + 2 * g->ph - g->kh) / g->sh + 1;
  g->OW = (g->W + 2 * g->pw - g->kw) / g->sw + 1;
}

static inline double ld(const em_tensor *t, int64_t i) {
  return t->dtype == EM_DTYPE_F32 ? (double)((const float *)t->data)[i]
                                  : ((const double *)t->data)[i];
}

static inline void st(em_tensor *t, int64_t i, double v, bool add) {
  if (t->dtype == EM_DTYPE_F32) {
    float *p = (float *)t->data + t->offset + i;
    *p = add ? (float)(*p + v) : (float)v;
  } else {
    double *p = (double *)t->data + t->offset + i;
    *p = add ? *p + v : v;
  }
}

#define XOFF(n, c, iy, ix) \
  (x->offset + (n) * x->stride[0] + (c) * x->stride[1] + (iy) * x->stride[2] + (ix) * x->stride[3])

int64_t em_pool_window(const em_pool_geom *g, int64_t oy, int64_t ox, int64_t *h0, int64_t *h1,
                       int64_t *w0, int64_t *w1) {
  int64_t hs = oy * g->sh - g->ph, ws = ox * g->sw - g->pw;
  int64_t he = hs + g->kh, we = ws + g->kw;
  if (he > g->H + g->ph) he = g->H + g->ph;
  if (we > g->W + g->pw) we = g->W + g->pw;
  int64_t padded = (he - hs) * (we - ws);
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = he > g->H ? g->H : he;
  *w1 = we > g->W ? g->W : we;
  return g->include_pad ? padded : (*h1 - *h0) * (*w1 - *w0);
}

/* Position (iy * W + ix) of the maximum of a window of plane (n, c). */
static int64_t argmax(const em_pool_geom *g, const em_tensor *x, int64_t n, int64_t c, int64_t h0,
                      int64_t h1, int64_t w0, int64_t w1, double *val) {
  double m = -INFINITY;
  int64_t at = h0 * g->W + w0;
  for (int64_t iy = h0; iy < h1; iy++)
    for (int64_t ix = w0; ix < w1; ix++) {
      double v = ld(x, XOFF(n, c, iy, ix));
      if (v > m || isnan(v)) {
        m = v;
        at = iy * g->W + ix;
      }
    }
  *val = m;
  return at;
}

void em_max_pool2d_ref_forward(const em_pool_geom *g, const em_tensor *x /* (N, C, H, W) */,
                               em_tensor *y /* (N, C, OH, OW) */) {
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t c = 0; c < g->C; c++)
      for (int64_t oy = 0; oy < g->OH; oy++)
        for (int64_t ox = 0; ox < g->OW; ox++) {
          int64_t h0, h1, w0, w1;
          double m;
          em_pool_window(g, oy, ox, &h0, &h1, &w0, &w1);
          argmax(g, x, n, c, h0, h1, w0, w1, &m);
          st(y, ((n * g->C + c) * g->OH + oy) * g->OW + ox, m, false);
        }
}

void em_max_pool2d_ref_backward(const em_pool_geom *g, const em_tensor *x,
                                const em_tensor *gy /* (N, C, OH, OW) */,
                                em_tensor *gx /* (N, C, H, W) */, bool fresh) {
  if (fresh) em_tensor_fill_(gx, 0.0);
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t c = 0; c < g->C; c++)
      for (int64_t oy = 0; oy < g->OH; oy++)
        for (int64_t ox = 0; ox < g->OW; ox++) {
          int64_t h0, h1, w0, w1;
          double m;
          em_pool_window(g, oy, ox, &h0, &h1, &w0, &w1);
          int64_t at = argmax(g, x, n, c, h0, h1, w0, w1, &m);
          double gv = ld(gy, gy->offset + ((n * g->C + c) * g->OH + oy) * g->OW + ox);
          st(gx, (n * g->C + c) * g->H * g->W + at, gv, true);
        }
}

void em_avg_pool2d_ref_forward(const em_pool_geom *g, const em_tensor *x /* (N, C, H, W) */,
                               em_tensor *y /* (N, C, OH, OW) */) {
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t c = 0; c < g->C; c++)
      for (int64_t oy = 0; oy < g->OH; oy++)
        for (int64_t ox = 0; ox < g->OW; ox++) {
          int64_t h0, h1, w0, w1;
          int64_t div = em_pool_window(g, oy, ox, &h0, &h1, &w0, &w1);
          double acc = 0;
          for (int64_t iy = h0; iy < h1; iy++)
            for (int64_t ix = w0; ix < w1; ix++) acc += ld(x, XOFF(n, c, iy, ix));
          st(y, ((n * g->C + c) * g->OH + oy) * g->OW + ox, acc / (double)div, false);
        }
}

void em_avg_pool2d_ref_backward(const em_pool_geom *g, const em_tensor *gy /* (N, C, OH, OW) */,
                                em_tensor *gx /* (N, C, H, W) */, bool fresh) {
  if (fresh) em_tensor_fill_(gx, 0.0);
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t c = 0; c < g->C; c++)
      for (int64_t oy = 0; oy < g->OH; oy++)
        for (int64_t ox = 0; ox < g->OW; ox++) {
          int64_t h0, h1, w0, w1;
          int64_t div = em_pool_window(g, oy, ox, &h0, &h1, &w0, &w1);
          double gv = ld(gy, gy->offset + ((n * g->C + c) * g->OH + oy) * g->OW + ox) / (double)div;
          for (int64_t iy = h0; iy < h1; iy++)
            for (int64_t ix = w0; ix < w1; ix++)
              st(gx, (n * g->C + c) * g->H * g->W + iy * g->W + ix, gv, true);
        }
}
