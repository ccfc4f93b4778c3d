/* quant-isa.h: engine/quant's files compiled once per instruction set.
 *
 * quant-pmadd.c (the int16-pair GEMM kernel) and quant-rows.c (the
 * activation quantisation of rows) are in engine/meson.build's
 * cpu_variant_sources: built with -DEM_ISA=generic|avx2|avx512 and
 * -march=x86-64 / x86-64-v3 / x86-64-v4, each body written once over the
 * vector layer of quant-vec.h. They include this header first, which
 * gives their shared symbols the variant's suffix (em-cpu-variant.h):
 *
 *   em_qgemm_pmadd     _generic "sse2", _avx2 "avx2", _avx512 "avx512bw"
 *   em_quant_rows_isa  _generic (SSE2), _avx2, _avx512
 *
 * The rest of engine/quant names them by those suffixed names (below);
 * quant-gemm.c's table holds the kernels, quant-linear.c picks the rows
 * function of the active level. x86-64 only (meson builds the three
 * variants exactly there). */
#pragma once

#include "em-cpu-variant.h"

#ifdef EM_ISA
#define em_qgemm_pmadd EM_ISA_FN(em_qgemm_pmadd)
#define em_quant_rows_isa EM_ISA_FN(em_quant_rows_isa)
#endif

#include "quant-private.h"

#if defined(__x86_64__)
/* The pmaddwd kernel of each variant (quant-private.h: em_qgemm_kernel). */
extern const em_qgemm_kernel em_qgemm_pmadd_generic, em_qgemm_pmadd_avx2,
    em_qgemm_pmadd_avx512;

/* em_quant_rows's contract, uint8 into a (a16 NULL) or int16 into a16
 * (a NULL), for each variant. */
void em_quant_rows_isa_generic(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a,
                               int16_t *a16, float *sx, int32_t *zp);
void em_quant_rows_isa_avx2(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a,
                            int16_t *a16, float *sx, int32_t *zp);
void em_quant_rows_isa_avx512(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a,
                              int16_t *a16, float *sx, int32_t *zp);
#endif
