/* quant-private.h: what the files of engine/quant share (what engine/nn
 * and engine/export see of a quantised model is quant-layer.h).
 *
 * A quantised Linear layer y = x W^T + b, W (K, D), computes for each row
 * x_m of its input (a sample, or one position of an (N, L, D) input):
 *
 *   lo_m = min(0, min_d x_md)   hi_m = max(0, max_d x_md)
 *   sx_m = max((hi_m * 0.5 - lo_m * 0.5) / 127.5, FLT_MIN) + nf_m
 *   zp_m = clamp(rint(-lo_m / sx_m), 0, 255)                   (NaN -> 0)
 *   qa_md = clamp(rint(x_md * (1 / sx_m)) + zp_m, 0, 255)      uint8
 *   acc_mk = sum_d qa_md qw_kd - zp_m wsum_k                   int32
 *   y_mk = (float)acc_mk * (sx_m * sw_k) + b_k                 f32
 *
 * with qw_kd = clamp(rint(w_kd / sw_k), -127, 127) (int8), sw_k =
 * max_d |w_kd| / 127 (1 for an all-zero row) and wsum_k = sum_d qw_kd.
 * The halves give (hi - lo) / 255 bit for bit (halving is exact, short of
 * ranges so small that FLT_MIN takes over) without overflowing for a row
 * that spans more than +-1.7e38 (whose f32 difference was infinite, and
 * the layer's answer that of zero inputs). nf_m = sum_d x_md * 0 is 0, or
 * NaN when the row holds a NaN or an infinity: such a row's outputs are
 * NaN, as in f32, rather than those of its values quantised to zero.
 * Every step is one IEEE operation in f32 (rint: ties to even), in this
 * order, so the ONNX form (onnx-quant.c) computes the very same numbers.
 * (x * (1 / sx) rather than x / sx: a division per value cost as much as
 * the VNNI product itself.)
 * The integer product is exact while D <= EM_QUANT_MAX_FEATURES (no
 * int32 overflow: 255 * 127 * 65536 < 2^31); wider layers stay f32. */
#pragma once

#include "quant-layer.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "em-cpu.h"
#include "em-quant.h"

#define EM_QUANT_MAX_FEATURES EM_QUANT_MAX_INPUTS
/* Rows of the quantised activations are padded with zeros to a multiple
 * of this (the VNNI kernel's step of 4 bytes; the others' divide it). */
#define EM_QUANT_K_ALIGN 4


/* Columns [n0, n1) of A (M, Dp) @ wq^T (Dp, K), raw (no zero-point
 * correction), column n of row m at c[m * ldc + (n - n0)]. A holds the
 * uint8 activations, as uint8 or (a_width 2) widened to int16; lda is in
 * elements. n0 is a multiple of the kernel's n_block. */
typedef void (*em_qgemm_fn)(const em_quant_layer *L, const void *a, int64_t lda, int64_t M,
                            int64_t n0, int64_t n1, int32_t *c, int64_t ldc);

struct em_qgemm_kernel {
  const char *name; /* "avx512-vnni", "avx512bw", "avx2", "sse2", "scalar" */
  int n_block;      /* columns per packed panel */
  int a_width;      /* bytes per activation it reads: 1 (uint8) or 2 (int16) */
  bool (*supported)(void); /* this CPU runs it */
  /* Bytes of the packed weights (0: none) and the packing itself. */
  size_t (*packed_size)(int64_t K, int64_t Dp);
  void (*pack)(const int8_t *wq /* (K, D) */, int64_t K, int64_t D, int64_t Dp, void *packed);
  em_qgemm_fn gemm;
};

/* The kernels this build has, best first (scalar last, always there). */
int em_qgemm_kernel_count(void);
const em_qgemm_kernel *em_qgemm_kernel_at(int i);
const em_qgemm_kernel *em_qgemm_kernel_find(const char *name);
/* The best one this CPU supports. */
const em_qgemm_kernel *em_qgemm_kernel_best(void);

/* The reference, and the VNNI kernel (quant-gemm-x86.c, x86 only); the
 * int16-pair kernels "avx512bw", "avx2" and "sse2" are one body compiled
 * per instruction set (quant-isa.h: em_qgemm_pmadd_avx512, _avx2,
 * _generic). */
extern const em_qgemm_kernel em_qgemm_scalar, em_qgemm_vnni;


/* Quantises one layer's weights w (K, D) f32 and bias (K) (may be NULL)
 * into L and packs them for kernel k. Fails on NaN/inf weights or
 * memory. */
em_status em_quant_layer_init(em_quant_layer *L, int node, const float *w, const float *bias,
                              int64_t K, int64_t D, const em_qgemm_kernel *k, const char *what,
                              em_error *err);
void em_quant_layer_clear(em_quant_layer *L);

/* A row's scale from its range lo <= 0 <= hi (above): (hi - lo) / 255 by
 * halves, FLT_MIN for an all-zero row; NaN for a row that holds a NaN or
 * an infinity (finite false). */
static inline float em_quant_row_scale(float lo, float hi, bool finite) {
  float s = (hi * 0.5f - lo * 0.5f) / 127.5f;
  s = s >= FLT_MIN ? s : FLT_MIN;
  return finite ? s : NAN;
}
/* The zero point of a row of minimum lo and scale s, as a float in
 * [0, 255] (0 for a NaN scale). */
static inline float em_quant_row_zero(float lo, float s) {
  float z = rintf(-lo / s);
  z = z > 0.f ? z : 0.f; /* NaN (a row holding a NaN or an infinity) -> 0 */
  return z < 255.f ? z : 255.f;
}

/* Per-row activation quantisation of x (M, D) into a (M, Dp) (zeros
 * past D), with sx (M) and zp (M): the active level's vector loop
 * (quant-rows.c: AVX-512, AVX2 or SSE2) on x86-64, else the plain loop
 * em_quant_rows_ref (the same bytes). */
void em_quant_rows(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a, float *sx,
                   int32_t *zp);
void em_quant_rows_ref(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a, float *sx,
                       int32_t *zp);
/* The same bytes widened to int16 into a16 (M, Dp), for kernels with
 * a_width 2, in one pass on x86-64 (tmp (M, Dp): scratch for the plain
 * loop's bytes, used only elsewhere). */
void em_quant_rows16(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *tmp,
                     int16_t *a16, float *sx, int32_t *zp);
/* em_quant_rows (a16 NULL) and em_quant_rows16 (a NULL) as one level's
 * vector loop computes them, or NULL when this build lacks it or the
 * processor cannot run it (for tests that run every width). */
typedef void (*em_quant_rows_fn)(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a,
                                 int16_t *a16, float *sx, int32_t *zp);
em_quant_rows_fn em_quant_rows_for(em_cpu_isa isa);
/* out (n) = a (n) as int16, for kernels with a_width 2. */
void em_quant_widen(const uint8_t *a, int64_t n, int16_t *out);
/* y (M, K) = x (M, D) through layer L with kernel k, threaded over rows
 * for large batches (each row's numbers never depend on the others). */
void em_quant_linear_run(const em_quant_layer *L, const em_qgemm_kernel *k, const float *x,
                         int64_t M, float *y);
/* The same, then em_relu's rule (x < 0 ? 0 : x) in the same pass when
 * relu: a quantised Linear followed by a ReLU that alone reads it. */
void em_quant_linear_run_relu(const em_quant_layer *L, const em_qgemm_kernel *k, const float *x,
                              int64_t M, bool relu, float *y);

