/* em-amp.h: mixed precision on the CPU: bf16 conversions, the autocast
 * mode, the bf16 GEMM (bf16 operands, f32 accumulation and output) and a
 * dynamic gradient scaler with PyTorch's GradScaler rules.
 *
 * Autocast policy (PyTorch's CPU bf16 list, restricted to what the engine
 * has): em_linear and em_matmul round their inputs and weights to bf16 and
 * multiply with f32 accumulation; their outputs stay f32 (PyTorch returns
 * bf16; ours keeps the f32 sum, so it differs from PyTorch's by at most the
 * final bf16 rounding). Their backward is the same bf16 product on the
 * bf16-rounded output gradient; gradients land f32 in the f32 master
 * weights (a bias gradient is an f32 sum). Convolution, reductions,
 * softmax, losses and norms stay f32. Where the CPU has neither AMX-BF16
 * nor AVX512-BF16, autocast has no effect (f32 throughout);
 * em_bf16_kernel_best and em_bf16_kernel_name say which kernel runs. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-error.h"
#include "em-tensor.h"

typedef enum { EM_AMP_OFF = 0, EM_AMP_BF16, EM_AMP_F16 } em_amp_mode;

const char *em_amp_mode_name(em_amp_mode m); /* "off", "bf16", "f16" */
/* "off" | "bf16" | "f16"; anything else is EM_ERR_INVALID. */
em_status em_amp_mode_parse(const char *s, em_amp_mode *out, em_error *err);

/* ---- bf16 conversions ------------------------------------------------------- */
/* f32 -> bf16 with round-to-nearest-even (c10::BFloat16's rule): any NaN
 * becomes the quiet NaN 0x7fc0, infinities stay, subnormals are rounded,
 * not flushed. */
static inline uint16_t em_bf16_from_f32(float f) {
  union { float f; uint32_t u; } v = {.f = f};
  if (f != f) return 0x7fc0u;
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float em_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
  return v.f;
}
/* dst[i] = f32(bf16(src[i])); dst may be src. */
void em_bf16_round(const float *src, float *dst, int64_t n);

/* ---- the bf16 GEMM ---------------------------------------------------------- */
typedef enum {
  EM_BF16_KERNEL_NONE = 0, /* autocast off by request (EMBER_BF16_KERNEL=none): f32 */
  EM_BF16_KERNEL_SCALAR,   /* the loop reference (tests) */
  EM_BF16_KERNEL_AVX512,   /* vdpbf16ps (AVX512-BF16) */
  EM_BF16_KERNEL_AMX,      /* tdpbf16ps (AMX-BF16 tiles) */
  EM_BF16_KERNEL_EMULATED, /* no bf16 hardware: operands rounded to bf16, the f32 GEMM */
} em_bf16_kernel;

/* The kernel autocast uses on this CPU: AMX when the CPU has AMX-BF16 and
 * Linux grants the tile state, else AVX512 when it has AVX512-BF16, else
 * EMULATED: the same bf16 numbers on every processor (the products of
 * bf16 operands are exact in f32; only the order of the f32 sums
 * differs), at about f32's speed. EMBER_CPU_ISA caps it like the other
 * kernels; EMBER_BF16_KERNEL=avx512-bf16|emulated|none caps it further
 * (none: autocast runs plain f32, for comparisons). */
em_bf16_kernel em_bf16_kernel_best(void);
/* Whether this CPU (and OS) can run kernel k. */
bool em_bf16_kernel_available(em_bf16_kernel k);
/* "amx-bf16", "avx512-bf16", "emulated", "scalar", "none" */
const char *em_bf16_kernel_name(em_bf16_kernel k);

/* C (m, n) = beta * C + bf16(op(A)) (m, k) @ bf16(op(B)) (k, n), every
 * product exact and summed in f32 pairs in the order vdpbf16ps uses (the
 * odd element of each pair, then the even one), subnormal bf16 inputs and
 * results flushed to zero as vdpbf16ps does; AVX512 gives the same bits.
 * AMX sums the pairs in its own order (the same products; the f32 sum
 * may differ by rounding). op(A) = A^T when ta; beta is 0 (C is not
 * read) or 1. kernel is SCALAR, AVX512 or AMX (one that is available).
 * Row-major. */
void em_gemm_bf16(em_bf16_kernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                  int64_t ldc);

/* ---- autocast ----------------------------------------------------------------- */
/* Thread-local, like the no-grad flag. Returns the previous mode. */
em_amp_mode em_autocast_begin(em_amp_mode m);
void em_autocast_restore(em_amp_mode prev);
em_amp_mode em_autocast_mode(void);
/* The kernel the current thread's matmuls use: NONE when autocast is not
 * bf16 or the CPU has no bf16 kernel. */
em_bf16_kernel em_autocast_kernel(void);

/* ---- dynamic gradient scaler (torch.cuda.amp.GradScaler's rules) ---------------- */
typedef struct {
  bool enabled;
  float scale;          /* init 65536 */
  float growth_factor;  /* 2 */
  float backoff_factor; /* 0.5 */
  int growth_interval;  /* 2000 */
  int growth_tracker;   /* clean steps since the last growth or back-off */
  int64_t skipped;      /* steps skipped for Inf/NaN */
} em_grad_scaler;

/* PyTorch's defaults; a disabled scaler has scale 1 and never skips. */
void em_grad_scaler_init(em_grad_scaler *s, bool enabled);
/* The factor to multiply the loss by before backward (1 when disabled). */
float em_grad_scaler_loss_scale(const em_grad_scaler *s);
/* Multiplies each grad by the f32 of 1/scale (computed in double, as
 * torch does) and returns whether any value (before unscaling) was Inf or
 * NaN. NULL grads are skipped. Call before clipping. */
bool em_grad_scaler_unscale(const em_grad_scaler *s, int n, em_tensor *const *grads);
/* After the step (taken only when found_inf is false): backs the scale
 * off on Inf/NaN, else grows it after growth_interval clean steps when
 * the grown scale is finite. */
void em_grad_scaler_update(em_grad_scaler *s, bool found_inf);
