/* kern-pool.h: the 2-D pools of the device kernels, one element at a
 * time: forward one output element, backward one input element (a
 * gather over the windows that cover it, so that no two threads write
 * one element and the result does not depend on the launch).
 *
 * Geometry as kernels/pool-ref.c: no dilation, no ceil mode; a window
 * is clipped to the padded input; max pool takes the first maximum of
 * the window in row-major order, a NaN wins (the last one, as the CPU
 * and PyTorch's `v > m || isnan(v)` pick), padding is never chosen; avg
 * pool divides by the padded window size (count_include_pad) or by the
 * number of input elements in it. Max pool's backward finds each
 * window's maximum again from x. Planes are contiguous (H, W) of a
 * contiguous (N, C, H, W) tensor. */
#pragma once

#include "kern-common.h"

typedef struct em_kpool_geom {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw;
  int include_pad;
} em_kpool_geom;

/* The geometry of x (N, C, H, W) under the pool's kernel, stride and
 * padding (the caller has checked them). */
EM_HD void em_kpool_geom_init(em_kpool_geom *g, int64_t N, int64_t C, int64_t H, int64_t W,
                              int kh, int kw, int sh, int sw, int ph, int pw, int include_pad) {
  g->N = N;
  g->C = C;
  g->H = H;
  g->W = W;
  g->kh = kh;
  g->kw = kw;
  g->sh = sh;
  g->sw = sw;
  g->ph = ph;
  g->pw = pw;
  g->include_pad = include_pad;
  g->OH = (H + 2 * ph - kh) / sh + 1;
  g->OW = (W + 2 * pw - kw) / sw + 1;
}

/* Window (oy, ox) clipped to the input: rows [h0, h1), columns [w0, w1);
 * returns avg pool's divisor. */
EM_HD int64_t em_kpool_window(const em_kpool_geom *g, int64_t oy, int64_t ox, int64_t *h0,
                              int64_t *h1, int64_t *w0, int64_t *w1) {
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

/* Position iy * W + ix of window (oy, ox)'s maximum in plane x (H, W);
 * its value in *val. */
EM_HD int64_t em_kpool_argmax(const em_kpool_geom *g, const float *x, int64_t oy, int64_t ox,
                              float *val) {
  int64_t h0, h1, w0, w1;
  em_kpool_window(g, oy, ox, &h0, &h1, &w0, &w1);
  float m = -em_kinf();
  int64_t at = h0 * g->W + w0;
  for (int64_t iy = h0; iy < h1; iy++)
    for (int64_t ix = w0; ix < w1; ix++) {
      float v = x[iy * g->W + ix];
      if (v > m || v != v) {
        m = v;
        at = iy * g->W + ix;
      }
    }
  *val = m;
  return at;
}

/* Output element o (linear over (N, C, OH, OW)) of max or avg pool. */
EM_HD float em_kpool_forward(int is_max, const em_kpool_geom *g, const float *x, int64_t o) {
  int64_t ox = o % g->OW, oy = (o / g->OW) % g->OH, plane = o / (g->OW * g->OH);
  const float *xp = x + plane * g->H * g->W; /* (H, W) */
  if (is_max) {
    float m;
    em_kpool_argmax(g, xp, oy, ox, &m);
    return m;
  }
  int64_t h0, h1, w0, w1;
  int64_t div = em_kpool_window(g, oy, ox, &h0, &h1, &w0, &w1);
  double acc = 0;
  for (int64_t iy = h0; iy < h1; iy++)
    for (int64_t ix = w0; ix < w1; ix++) acc += (double)xp[iy * g->W + ix];
  return (float)(acc / (double)div);
}

/* The output windows that cover input row iy (columns likewise): oy in
 * [*o0, *o1). */
EM_HD void em_kpool_cover(int64_t i, int64_t k, int64_t s, int64_t p, int64_t O, int64_t *o0,
                          int64_t *o1) {
  /* oy s - p <= i < oy s - p + k  <=>  (i + p - k) / s < oy <= (i + p) / s */
  int64_t lo = i + p - k + 1; /* oy s >= lo */
  int64_t a = lo <= 0 ? 0 : (lo + s - 1) / s;
  int64_t b = (i + p) / s + 1;
  *o0 = a;
  *o1 = b < O ? b : O;
}

/* The gradient of input element i (linear over (N, C, H, W)) from g
 * (N, C, OH, OW); x is the forward input (max pool only). */
EM_HD float em_kpool_backward(int is_max, const em_kpool_geom *g, const float *gy,
                              const float *x, int64_t i) {
  int64_t ix = i % g->W, iy = (i / g->W) % g->H, plane = i / (g->W * g->H);
  const float *xp = x ? x + plane * g->H * g->W : 0; /* (H, W) */
  const float *gp = gy + plane * g->OH * g->OW;      /* (OH, OW) */
  int64_t oy0, oy1, ox0, ox1;
  em_kpool_cover(iy, g->kh, g->sh, g->ph, g->OH, &oy0, &oy1);
  em_kpool_cover(ix, g->kw, g->sw, g->pw, g->OW, &ox0, &ox1);
  double acc = 0;
  for (int64_t oy = oy0; oy < oy1; oy++)
    for (int64_t ox = ox0; ox < ox1; ox++) {
      if (is_max) {
        float m;
        if (em_kpool_argmax(g, xp, oy, ox, &m) == iy * g->W + ix) acc += (double)gp[oy * g->OW + ox];
      } else {
        int64_t h0, h1, w0, w1;
        int64_t div = em_kpool_window(g, oy, ox, &h0, &h1, &w0, &w1);
        acc += (double)gp[oy * g->OW + ox] / (double)div;
      }
    }
  return (float)acc;
}
