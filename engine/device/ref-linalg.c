/* ref-linalg.c: the reference device's GEMM and 2-D convolution.
 *
 * GEMM calls the engine's f32 GEMM (em_gemm: OpenBLAS or the AVX-512
 * kernel) once per batch entry: the reference device's memory is host
 * memory. Under amp the operands are first rounded to bf16 or f16
 * (em_kround_amp), so every product is exact in f32 and the sums are f32,
 * as cuBLAS computes with bf16 / f16 inputs and f32 compute.
 *
 * Convolution is the plain loop over PyTorch's definition (groups,
 * stride, padding, dilation), accumulated in double; under amp x, w (and
 * the incoming gradient in backward) are rounded first. Backward
 * scatters each output gradient into gx and gw, in index order. */
#include "ref-private.h"

#include "../ops/ops-private.h"

#include <stdlib.h>

/* A copy of the (rows, cols, ld) matrix p with each value rounded to the
 * amp type, packed (ld = cols); NULL when out of host memory. */
static float *rounded_copy(int amp, const float *p, int64_t rows, int64_t cols, int64_t ld) {
  float *out = malloc(sizeof(float) * (size_t)(rows * cols > 0 ? rows * cols : 1));
  if (!out) return NULL;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[r * cols + c] = em_kround_amp(amp, p[r * ld + c]);
  return out;
}

void em_ref_gemm(int amp, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                 int64_t stride_b, float beta, float *c, int64_t ldc, int64_t stride_c,
                 int64_t batch) {
  for (int64_t i = 0; i < batch; i++) {
    const float *ai = a + i * stride_a, *bi = b + i * stride_b; /* op(A) (m, k), op(B) (k, n) */
    float *ci = c + i * stride_c;                               /* (m, n) */
    if (m == 0 || n == 0) continue;
    if (k == 0) { /* an empty sum: C = beta C (beta 0 overwrites) */
      for (int64_t r = 0; r < m; r++)
        for (int64_t q = 0; q < n; q++) ci[r * ldc + q] = beta == 0 ? 0.f : beta * ci[r * ldc + q];
      continue;
    }
    if (amp) {
      /* A is stored (m, k) or, transposed, (k, m); B (k, n) or (n, k). */
      float *ra = rounded_copy(amp, ai, ta ? k : m, ta ? m : k, lda);
      float *rb = rounded_copy(amp, bi, tb ? n : k, tb ? k : n, ldb);
      EM_ASSERT(ra && rb && "ref device: out of host memory in gemm");
      em_gemm_unprofiled(EM_DTYPE_F32, ta, tb, m, n, k, alpha, ra, ta ? m : k, rb, tb ? k : n, beta, ci, ldc);
      free(ra);
      free(rb);
    } else {
      em_gemm_unprofiled(EM_DTYPE_F32, ta, tb, m, n, k, alpha, ai, lda, bi, ldb, beta, ci, ldc);
    }
  }
}

/* ---- convolution ------------------------------------------------------------------ */

typedef struct {
  int64_t N, C, H, W, K, kh, kw, OH, OW, G, Cg, Kg; /* Cg, Kg: channels per group */
  int64_t sh, sw, ph, pw, dh, dw;
} conv_geom;

static conv_geom conv_geom_of(const em_tensor *x, const em_tensor *w, const em_conv2d_params *p) {
  conv_geom g;
  g.N = x->shape[0];
  g.C = x->shape[1];
  g.H = x->shape[2];
  g.W = x->shape[3];
  g.K = w->shape[0];
  g.kh = w->shape[2];
  g.kw = w->shape[3];
  g.G = p->groups > 0 ? p->groups : 1;
  g.Cg = g.C / g.G;
  g.Kg = g.K / g.G;
  g.sh = p->stride[0];
  g.sw = p->stride[1];
  g.ph = p->padding[0];
  g.pw = p->padding[1];
  g.dh = p->dilation[0];
  g.dw = p->dilation[1];
  g.OH = (g.H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.OW = (g.W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  EM_ASSERT(w->shape[1] == g.Cg && g.Cg * g.G == g.C && g.Kg * g.G == g.K);
  return g;
}

/* The values of contiguous t, rounded to the amp type when amp is on
 * (a copy the caller frees), else t's own memory. */
static const float *amp_values(int amp, const em_tensor *t, float **owned) {
  *owned = NULL;
  if (!amp) return em_f32(t);
  int64_t n = em_tensor_numel(t);
  *owned = rounded_copy(amp, em_f32(t), 1, n, n);
  EM_ASSERT(*owned && "ref device: out of host memory in conv2d");
  return *owned;
}

void em_ref_conv2d_forward(int amp, em_tensor *y, const em_tensor *x, const em_tensor *w,
                           const em_tensor *b, const em_conv2d_params *p) {
  conv_geom g = conv_geom_of(x, w, p);
  float *fx, *fw;
  const float *xs = amp_values(amp, x, &fx); /* (N, C, H, W) */
  const float *ws = amp_values(amp, w, &fw); /* (K, Cg, kh, kw) */
  const float *bs = b ? em_f32(b) : NULL;    /* (K) */
  float *ys = em_f32(y);                     /* (N, K, OH, OW) */
  for (int64_t n = 0; n < g.N; n++)
    for (int64_t k = 0; k < g.K; k++) {
      int64_t c0 = k / g.Kg * g.Cg;
      for (int64_t oy = 0; oy < g.OH; oy++)
        for (int64_t ox = 0; ox < g.OW; ox++) {
          double acc = bs ? (double)bs[k] : 0.0;
          for (int64_t c = 0; c < g.Cg; c++)
            for (int64_t ky = 0; ky < g.kh; ky++) {
              int64_t iy = oy * g.sh - g.ph + ky * g.dh;
              if (iy < 0 || iy >= g.H) continue;
              for (int64_t kx = 0; kx < g.kw; kx++) {
                int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                if (ix < 0 || ix >= g.W) continue;
                acc += (double)xs[((n * g.C + c0 + c) * g.H + iy) * g.W + ix] *
                       (double)ws[((k * g.Cg + c) * g.kh + ky) * g.kw + kx];
              }
            }
          ys[((n * g.K + k) * g.OH + oy) * g.OW + ox] = (float)acc;
        }
    }
  free(fx);
  free(fw);
}

void em_ref_conv2d_backward(int amp, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                            const em_tensor *g, const em_tensor *x, const em_tensor *w,
                            const em_conv2d_params *p) {
  conv_geom q = conv_geom_of(x, w, p);
  float *fx, *fw, *fg;
  const float *xs = amp_values(amp, x, &fx); /* (N, C, H, W) */
  const float *ws = amp_values(amp, w, &fw); /* (K, Cg, kh, kw) */
  const float *gs = amp_values(amp, g, &fg); /* (N, K, OH, OW) */
  int64_t nx = gx ? em_tensor_numel(gx) : 0, nw = gw ? em_tensor_numel(gw) : 0;
  double *ax = calloc((size_t)(nx + nw + 1), sizeof *ax), *aw = ax + nx; /* sums */
  EM_ASSERT(ax && "ref device: out of host memory in conv2d backward");
  for (int64_t n = 0; n < q.N; n++)
    for (int64_t k = 0; k < q.K; k++) {
      int64_t c0 = k / q.Kg * q.Cg;
      for (int64_t oy = 0; oy < q.OH; oy++)
        for (int64_t ox = 0; ox < q.OW; ox++) {
          double gv = gs[((n * q.K + k) * q.OH + oy) * q.OW + ox];
          for (int64_t c = 0; c < q.Cg; c++)
            for (int64_t ky = 0; ky < q.kh; ky++) {
              int64_t iy = oy * q.sh - q.ph + ky * q.dh;
              if (iy < 0 || iy >= q.H) continue;
              for (int64_t kx = 0; kx < q.kw; kx++) {
                int64_t ix = ox * q.sw - q.pw + kx * q.dw;
                if (ix < 0 || ix >= q.W) continue;
                int64_t xa = ((n * q.C + c0 + c) * q.H + iy) * q.W + ix;
                int64_t wa = ((k * q.Cg + c) * q.kh + ky) * q.kw + kx;
                if (gx) ax[xa] += gv * (double)ws[wa];
                if (gw) aw[wa] += gv * (double)xs[xa];
              }
            }
        }
    }
  for (int64_t i = 0; i < nx; i++) em_f32(gx)[i] = (float)ax[i];
  for (int64_t i = 0; i < nw; i++) em_f32(gw)[i] = (float)aw[i];
  if (gb) { /* the bias gradient sums the unrounded g, as cuDNN's does */
    const float *g32 = em_f32(g);
    for (int64_t k = 0; k < q.K; k++) {
      double s = 0;
      for (int64_t n = 0; n < q.N; n++)
        for (int64_t i = 0; i < q.OH * q.OW; i++) s += (double)g32[(n * q.K + k) * q.OH * q.OW + i];
      em_f32(gb)[k] = (float)s;
    }
  }
  free(ax);
  free(fx);
  free(fw);
  free(fg);
}
