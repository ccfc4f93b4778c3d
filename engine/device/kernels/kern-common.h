/* kern-common.h: what every kernel body shares: the EM_HD qualifier, the
 * strided view of an operand (em_kview) with its index math, and the
 * bf16 / f16 rounding that amp applies to GEMM and convolution operands.
 *
 * The headers of engine/device/kernels/ hold the per-element and per-row
 * math of the device kernels. They compile as C11 (the reference device,
 * engine/device/ref-*.c, calls them from host loops) and as CUDA C++ (the
 * CUDA kernels, engine/cuda/, call them from grid-stride loops), so that
 * both devices compute the same values the same way. Rules for them: no
 * `restrict`, designated initialisers, compound literals, VLAs or
 * implicit void * conversions; no engine header; float math with the
 * C names (expf, logf, erff, ...), which CUDA provides on the device.
 *
 * Bit-identity between host and device needs the same operation order
 * and no contraction: nvcc fuses a * b + c into an FMA by default, so the
 * CUDA build compiles these with -fmad=false (or accepts a last-bit
 * difference); gcc with -std=c11 does not contract. The transcendental
 * functions (expf, erff, ...) may differ by an ulp between libm and CUDA. */
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define EM_HD __host__ __device__ __forceinline__
#else
#define EM_HD static inline
#endif

#define EM_KMAX_DIMS 8

/* An operand as a kernel iterates it: the iteration shape (the output's)
 * and the operand's strides in elements over that shape (0 where the
 * operand is broadcast), plus its offset in elements from the base
 * pointer. A plain struct, passed by value to CUDA kernels. */
typedef struct em_kview {
  int ndim;
  int64_t shape[EM_KMAX_DIMS];
  int64_t stride[EM_KMAX_DIMS];
  int64_t offset;
} em_kview;

/* The view of an operand (xndim, xshape, xstride, xoffset) broadcast into
 * the iteration shape (ndim, shape), numpy's rule: trailing dimensions
 * line up; an operand dimension of size 1, or a missing leading one, gets
 * stride 0. The caller has checked that the shapes broadcast. */
EM_HD void em_kview_bcast(em_kview *v, int ndim, const int64_t *shape, int xndim,
                          const int64_t *xshape, const int64_t *xstride, int64_t xoffset) {
  v->ndim = ndim;
  v->offset = xoffset;
  for (int d = 0; d < EM_KMAX_DIMS; d++) {
    v->shape[d] = 1;
    v->stride[d] = 0;
  }
  for (int d = 0; d < ndim; d++) {
    int xd = d - (ndim - xndim);
    v->shape[d] = shape[d];
    v->stride[d] = (xd >= 0 && xshape[xd] != 1) ? xstride[xd] : 0;
  }
}

/* The element offset (from the base pointer, offset included) of linear
 * index i (row-major over v's shape) of the iteration. */
EM_HD int64_t em_kview_at(const em_kview *v, int64_t i) {
  int64_t off = v->offset;
  for (int d = v->ndim - 1; d >= 0; d--) {
    int64_t n = v->shape[d];
    int64_t q = i / n;
    off += (i - q * n) * v->stride[d];
    i = q;
  }
  return off;
}

/* The number of elements of v's iteration shape. */
EM_HD int64_t em_kview_numel(const em_kview *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
  return n;
}

/* True when v walks its elements at unit stride from its offset (so
 * em_kview_at(v, i) == v->offset + i). */
EM_HD int em_kview_is_contig(const em_kview *v) {
  int64_t want = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->shape[d] != 1 && v->stride[d] != want) return 0;
    want *= v->shape[d];
  }
  return 1;
}

/* ---- bit casts ----------------------------------------------------------- */
EM_HD uint32_t em_kf32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}
EM_HD float em_kf32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}
/* +infinity, from its bits (max reductions and pools start from -em_kinf()). */
EM_HD float em_kinf(void) { return em_kf32_from_bits(0x7f800000u); }

/* ---- amp operand rounding (f32 -> bf16 / f16 -> f32) ---------------------- */
/* bf16 with round-to-nearest-even, NaN -> quiet NaN: em_bf16_from_f32 of
 * em-amp.h (c10::BFloat16's rule), and CUDA's __float2bfloat16_rn. */
EM_HD float em_kround_bf16(float f) {
  if (f != f) return em_kf32_from_bits(0x7fc00000u);
  uint32_t u = em_kf32_bits(f);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return em_kf32_from_bits(u);
}

/* IEEE binary16 with round-to-nearest-even (CUDA's __float2half_rn):
 * overflow to infinity, subnormal halves kept, NaN stays NaN. Returns the
 * rounded value as a float. */
EM_HD float em_kround_f16(float f) {
  if (f != f) return f;
  uint32_t u = em_kf32_bits(f);
  uint32_t sign = u & 0x80000000u;
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x477ff000u) /* >= 65520 rounds to infinity (inf included) */
    return em_kf32_from_bits(sign | 0x7f800000u);
  if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24 */
    /* Adding 0.5 (2^-1) puts the sum's last mantissa bit at 2^-24, so
     * the float addition rounds to a multiple of 2^-24, nearest-even. */
    float m = em_kf32_from_bits(a) + 0.5f;
    float r = m - 0.5f;
    return em_kf32_from_bits(sign | em_kf32_bits(r));
  }
  /* Normal half: keep 10 of the 23 mantissa bits, nearest-even. */
  a = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
  return em_kf32_from_bits(sign | a);
}

/* The amp mode's operand rounding (0 off, 1 bf16, 2 f16: em_amp_mode). */
EM_HD float em_kround_amp(int amp, float f) {
  return amp == 1 ? em_kround_bf16(f) : amp == 2 ? em_kround_f16(f) : f;
}

/* The max rule of reductions (engine/ops/reduce.c): v replaces the best b
 * when larger, or when v is the first NaN (so the first maximum and the
 * first NaN win). */
EM_HD int em_kmax_takes(float v, float b) { return v > b || (v != v && b == b); }
