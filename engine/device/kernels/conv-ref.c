/* conv-ref.c: the plain loop reference of conv2d, forward and backward
 * (conv-ref.h), and the convolution geometry (conv-geom.h).
 *
 * Written to be obviously right rather than fast: every output element is
 * one loop nest over its inputs, summed in double, reading tensors of any
 * strides. The reference device's convolution runs here, and the CPU's
 * for f64 (gradient checks); the tests compare the CPU's f32 fast path
 * (engine/ops/conv-fast.c) against it. */
#include "conv-ref.h"

#include "em-tensor.h"

void em_conv_geom_init(em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                       const em_conv2d_params *p) {
  g->N = x->shape[0];
  g->C = x->shape[1];
  g->H = x->shape[2];
  g->W = x->shape[3];
  g->K = w->shape[0];
  g->kh = w->shape[2];
  g->kw = w->shape[3];
  g->sh = p->stride[0];
  g->sw = p->stride[1];
  g->ph = p->padding[0];
  g->pw = p->padding[1];
  g->dh = p->dilation[0];
  g->dw = p->dilation[1];
  g->G = p->groups;
  EM_ASSERT(g->sh >= 1 && g->sw >= 1 && g->dh >= 1 && g->dw >= 1 && g->ph >= 0 && g->pw >= 0);
  EM_ASSERT(g->G >= 1 && g->C % g->G == 0 && g->K % g->G == 0);
  g->Cg = g->C / g->G;
  g->Kg = g->K / g->G;
  EM_ASSERT(w->shape[1] == g->Cg);
  int64_t eh = g->H + 2 * g->ph - g->dh * (g->kh - 1), ew = g->W + 2 * g->pw - g->dw * (g->kw - 1);
  EM_ASSERT(eh >= 1 && ew >= 1 && "conv2d: kernel larger than the padded input");
  g->OH = (eh - 1) / g->sh + 1;
  g->OW = (ew - 1) / g->sw + 1;
}

/* Element at element offset i of t's storage, as a double. */
static inline double ld(const em_tensor *t, int64_t i) {
  return t->dtype == EM_DTYPE_F32 ? (double)((const float *)t->data)[i]
                                  : ((const double *)t->data)[i];
}

/* Stores or adds v at element i of a contiguous result buffer. */
static inline void st(em_tensor *t, int64_t i, double v, bool add) {
  if (t->dtype == EM_DTYPE_F32) {
    float *p = (float *)t->data + t->offset + i;
    *p = add ? (float)(*p + v) : (float)v;
  } else {
    double *p = (double *)t->data + t->offset + i;
    *p = add ? *p + v : v;
  }
}

/* Storage offsets of x (n, c, iy, ix) and w (k, c, ky, kx). */
#define XOFF(n, c, iy, ix) \
  (x->offset + (n) * x->stride[0] + (c) * x->stride[1] + (iy) * x->stride[2] + (ix) * x->stride[3])
#define WOFF(k, c, ky, kx) \
  (w->offset + (k) * w->stride[0] + (c) * w->stride[1] + (ky) * w->stride[2] + (kx) * w->stride[3])

void em_conv2d_ref_forward(const em_conv_geom *g, const em_tensor *x /* (N, C, H, W) */,
                           const em_tensor *w /* (K, C/G, kh, kw) */,
                           const em_tensor *b /* (K) or NULL */,
                           em_tensor *y /* (N, K, OH, OW) contiguous */) {
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t k = 0; k < g->K; k++) {
      int64_t c0 = (k / g->Kg) * g->Cg; /* first input channel of k's group */
      for (int64_t oy = 0; oy < g->OH; oy++)
        for (int64_t ox = 0; ox < g->OW; ox++) {
          double acc = b ? ld(b, b->offset + k * b->stride[0]) : 0.0;
          for (int64_t c = 0; c < g->Cg; c++)
            for (int64_t ky = 0; ky < g->kh; ky++) {
              int64_t iy = oy * g->sh - g->ph + ky * g->dh;
              if (iy < 0 || iy >= g->H) continue;
              for (int64_t kx = 0; kx < g->kw; kx++) {
                int64_t ix = ox * g->sw - g->pw + kx * g->dw;
                if (ix < 0 || ix >= g->W) continue;
                acc += ld(x, XOFF(n, c0 + c, iy, ix)) * ld(w, WOFF(k, c, ky, kx));
              }
            }
          st(y, ((n * g->K + k) * g->OH + oy) * g->OW + ox, acc, false);
        }
    }
}

/* The output row (or column) that input row iy meets through kernel row ky,
 * or -1 when there is none. */
static int64_t out_index(int64_t i, int64_t kk, int64_t s, int64_t pad, int64_t dil,
                         int64_t n_out) {
  int64_t t = i + pad - kk * dil;
  if (t < 0 || t % s != 0 || t / s >= n_out) return -1;
  return t / s;
}

void em_conv2d_ref_backward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                            const em_tensor *gy /* (N, K, OH, OW) contiguous */,
                            const em_conv_grads *out) {
  const int64_t OHW = g->OH * g->OW;
#define GY(n, k, oy, ox) ld(gy, gy->offset + ((n) * g->K + (k)) * OHW + (oy) * g->OW + (ox))
  if (out->gx) /* dx (n, c, iy, ix) = sum over k, ky, kx of gy * w */
    for (int64_t n = 0; n < g->N; n++)
      for (int64_t c = 0; c < g->C; c++) {
        int64_t grp = c / g->Cg, cg = c % g->Cg;
        for (int64_t iy = 0; iy < g->H; iy++)
          for (int64_t ix = 0; ix < g->W; ix++) {
            double acc = 0;
            for (int64_t kg = 0; kg < g->Kg; kg++) {
              int64_t k = grp * g->Kg + kg;
              for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t oy = out_index(iy, ky, g->sh, g->ph, g->dh, g->OH);
                if (oy < 0) continue;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                  int64_t ox = out_index(ix, kx, g->sw, g->pw, g->dw, g->OW);
                  if (ox < 0) continue;
                  acc += GY(n, k, oy, ox) * ld(w, WOFF(k, cg, ky, kx));
                }
              }
            }
            st(out->gx, ((n * g->C + c) * g->H + iy) * g->W + ix, acc, !out->gx_fresh);
          }
      }
  if (out->gw) /* dw (k, c, ky, kx) = sum over n, oy, ox of gy * x */
    for (int64_t k = 0; k < g->K; k++) {
      int64_t c0 = (k / g->Kg) * g->Cg;
      for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t ky = 0; ky < g->kh; ky++)
          for (int64_t kx = 0; kx < g->kw; kx++) {
            double acc = 0;
            for (int64_t n = 0; n < g->N; n++)
              for (int64_t oy = 0; oy < g->OH; oy++) {
                int64_t iy = oy * g->sh - g->ph + ky * g->dh;
                if (iy < 0 || iy >= g->H) continue;
                for (int64_t ox = 0; ox < g->OW; ox++) {
                  int64_t ix = ox * g->sw - g->pw + kx * g->dw;
                  if (ix < 0 || ix >= g->W) continue;
                  acc += GY(n, k, oy, ox) * ld(x, XOFF(n, c0 + c, iy, ix));
                }
              }
            st(out->gw, ((k * g->Cg + c) * g->kh + ky) * g->kw + kx, acc, !out->gw_fresh);
          }
    }
  if (out->gb) /* db (k) = sum over n, oy, ox of gy */
    for (int64_t k = 0; k < g->K; k++) {
      double acc = 0;
      for (int64_t n = 0; n < g->N; n++)
        for (int64_t oy = 0; oy < g->OH; oy++)
          for (int64_t ox = 0; ox < g->OW; ox++) acc += GY(n, k, oy, ox);
      st(out->gb, k, acc, !out->gb_fresh);
    }
#undef GY
}
