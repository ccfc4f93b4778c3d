/* ref-linalg.c: the reference device's GEMM and 2-D convolution.
 *
 * GEMM calls the engine's f32 GEMM (em_gemm: OpenBLAS or the AVX-512
 * kernel) once per batch entry: the reference device's memory is host
 * memory. Under amp the operands are first rounded to bf16 or f16
 * (em_kround_amp), so every product is exact in f32 and the sums are f32,
 * as cuBLAS computes with bf16 / f16 inputs and f32 compute.
 *
 * Convolution is the plain loop reference (kernels/conv-ref.c, which the
 * CPU runs for f64: PyTorch's definition with groups, stride, padding and
 * dilation, accumulated in double, the host memory read in place); under
 * amp x, w (and the incoming gradient in backward) are rounded first. */
#include "ref-private.h"

#include "kernels/conv-ref.h"

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

/* One f32 product on host memory (the reference device's is the host's):
 * the CPU backend's gemm kernel, through its table (em-backend.h). */
static void host_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc) {
  em_status st = em_cpu_backend()->k->gemm(0, EM_DTYPE_F32, ta, tb, m, n, k, alpha, a, lda, 0, b,
                                           ldb, 0, beta, c, ldc, 0, 1);
  EM_ASSERT(st == EM_OK && "the CPU's gemm kernel cannot fail");
}

em_status em_ref_gemm(int amp, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const void *av, int64_t lda, int64_t stride_a, const void *bv,
                      int64_t ldb, int64_t stride_b, float beta, void *cv, int64_t ldc,
                      int64_t stride_c, int64_t batch) {
  EM_ASSERT(dt == EM_DTYPE_F32 && "ref gemm: f32 only"); /* the op front-end checked */
  const float *a = av, *b = bv;
  float *c = cv;
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
      host_gemm(ta, tb, m, n, k, alpha, ra, ta ? m : k, rb, tb ? k : n, beta, ci, ldc);
      free(ra);
      free(rb);
    } else {
      host_gemm(ta, tb, m, n, k, alpha, ai, lda, bi, ldb, beta, ci, ldc);
    }
  }
  return EM_OK;
}

/* ---- convolution ------------------------------------------------------------------ */

/* t itself, or under amp a host tensor struct over a rounded copy of its
 * values (contiguous t; the copy in *owned, for the caller to free). */
static em_tensor amp_tensor(int amp, const em_tensor *t, float **owned) {
  em_tensor r = *t;
  *owned = NULL;
  if (!amp) return r;
  int64_t n = em_tensor_numel(t);
  *owned = rounded_copy(amp, em_f32(t), 1, n, n);
  EM_ASSERT(*owned && "ref device: out of host memory in conv2d");
  r.data = *owned;
  r.offset = 0;
  return r;
}

em_status em_ref_conv2d_forward(int amp, em_tensor *y, const em_tensor *x, const em_tensor *w,
                           const em_tensor *b, const em_conv2d_params *p) {
  em_conv_geom g;
  em_conv_geom_init(&g, x, w, p);
  float *fx, *fw;
  em_tensor xa = amp_tensor(amp, x, &fx); /* (N, C, H, W) */
  em_tensor wa = amp_tensor(amp, w, &fw); /* (K, Cg, kh, kw) */
  em_conv2d_ref_forward(&g, &xa, &wa, b, y);
  free(fx);
  free(fw);
  return EM_OK;
}

em_status em_ref_conv2d_backward(int amp, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                            const em_tensor *g, const em_tensor *x, const em_tensor *w,
                            const em_conv2d_params *p) {
  em_conv_geom q;
  em_conv_geom_init(&q, x, w, p);
  float *fx, *fw, *fg;
  em_tensor xa = amp_tensor(amp, x, &fx); /* (N, C, H, W) */
  em_tensor wa = amp_tensor(amp, w, &fw); /* (K, Cg, kh, kw) */
  em_tensor ga = amp_tensor(amp, g, &fg); /* (N, K, OH, OW) */
  em_conv2d_ref_backward(&q, &xa, &wa, &ga, &(em_conv_grads){gx, gw, NULL, true, true, true});
  /* the bias gradient sums the unrounded g, as cuDNN's does */
  if (gb) em_conv2d_ref_backward(&q, x, w, g, &(em_conv_grads){NULL, NULL, gb, true, true, true});
  free(fx);
  free(fw);
  free(fg);
  return EM_OK;
}
