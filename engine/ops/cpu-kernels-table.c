/* cpu-kernels-table.c: one variant's table of the CPU's f32 kernels,
 * compiled once per instruction set like the kernels it names
 * (cpu-kernels.h). */
#include "cpu-kernels.h"

#define EM_STR2(x) #x
#define EM_STR(x) EM_STR2(x)

const em_cpu_kernels EM_ISA_FN(em_cpu_kernels_table) = {
    .name = EM_STR(EM_ISA),
    .gemm_f32 = em_gemm_f32_fast,
    .gemv_f32 = em_gemv_f32,
    .conv2d_forward = em_conv2d_fast_forward,
    .conv2d_backward = em_conv2d_fast_backward,
    .max2x2_fwd_row = em_max2x2_fwd_row,
    .max2x2_bwd_row = em_max2x2_bwd_row,
};
