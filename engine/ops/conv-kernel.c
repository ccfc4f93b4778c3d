/* conv-kernel.c: the f32 micro-kernels of the conv fast path.
 *
 * Each computes one MR x NR tile of a product with the tile's
 * accumulators in vector registers (GCC vector extensions: AVX-512 with
 * -march=native on this machine, AVX or SSE elsewhere, see
 * conv-private.h). Per step of the reduction a kernel loads two vectors of
 * B, broadcasts MR scalars of A and issues 2 * MR fused multiply-adds, so
 * with MR = 8, NR = 32 it is bound by the FMA ports, not by loads.
 *
 * The plain reference of these tiles is the product itself; the conv
 * tests check the whole fast path against conv-ref.c. */
#include "cpu-kernels.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

typedef float vf __attribute__((vector_size(EM_CONV_VL * sizeof(float))));
/* Unaligned, aliasing loads and stores of a vector. */
typedef float vfu
    __attribute__((vector_size(EM_CONV_VL * sizeof(float)), aligned(4), may_alias));

#define MR EM_CONV_MR
#define VL EM_CONV_VL
#define NR EM_CONV_NR

/* c + a * b in one rounding where the processor has FMA (ISO C mode
 * does not contract a * b + c on its own). */
static inline vf fmadd(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__AVX__) && defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

static inline vf splat(float s) {
#if defined(__AVX512F__)
  return _mm512_set1_ps(s);
#elif defined(__AVX__)
  return _mm256_set1_ps(s);
#else
  return (vf){s, s, s, s};
#endif
}

void em_conv_kernel_rows(int64_t k, const float *a /* (k, MR) */, const float *b,
                         const int64_t *off /* (k) */, float *c /* (MR, NR, ldc) */, int64_t ldc) {
  vf c0[MR], c1[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) c0[r] = c1[r] = splat(0.f);
  for (int64_t kk = 0; kk < k; kk++) {
    const float *bp = b + off[kk];
    vf b0 = *(const vfu *)bp, b1 = *(const vfu *)(bp + VL);
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
      vf av = splat(a[kk * MR + r]);
      c0[r] = fmadd(av, b0, c0[r]);
      c1[r] = fmadd(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
    *(vfu *)(c + r * ldc) = c0[r];
    *(vfu *)(c + r * ldc + VL) = c1[r];
  }
}

void em_conv_kernel_acc(int64_t k, const float *const *arow, const float *b /* (k, NR) */,
                        float *c /* (MR, NR, ldc) */, int64_t ldc) {
  vf c0[MR], c1[MR];
  const float *ap[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
    c0[r] = c1[r] = splat(0.f);
    ap[r] = arow[r];
  }
  for (int64_t kk = 0; kk < k; kk++) {
    vf b0 = *(const vfu *)(b + kk * NR), b1 = *(const vfu *)(b + kk * NR + VL);
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
      vf av = splat(ap[r][kk]);
      c0[r] = fmadd(av, b0, c0[r]);
      c1[r] = fmadd(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
    *(vfu *)(c + r * ldc) += c0[r];
    *(vfu *)(c + r * ldc + VL) += c1[r];
  }
}
