/* em-kernel-ops.h: the operation codes of the backend kernels (em_kernels
 * in em-backend.h): binary, unary and reduction ops. Kept apart so that
 * the kernel bodies (engine/device/kernels/), which compile as C11 and as
 * CUDA C++, need no other engine header. */
#pragma once

typedef enum { EM_KB_ADD, EM_KB_SUB, EM_KB_MUL, EM_KB_DIV, EM_KB_COUNT } em_kbin;

typedef enum {
  EM_KU_NEG,
  EM_KU_EXP,
  EM_KU_LOG,
  EM_KU_SQRT,
  EM_KU_ABS,
  EM_KU_CLAMP, /* p0 = lo, p1 = hi (+-INFINITY: none) */
  EM_KU_RELU,
  EM_KU_GELU,  /* exact (erf) form */
  EM_KU_SILU,
  EM_KU_SIGMOID,
  EM_KU_TANH,
  EM_KU_ADDS,  /* x + p0 */
  EM_KU_MULS,  /* x * p0 */
  EM_KU_POWS,  /* x ^ p0 */
  EM_KU_GELU_TANH, /* the tanh approximation (GPT-2's, PyTorch's approximate="tanh") */
  EM_KU_COUNT
} em_kun;

typedef enum { EM_KR_SUM, EM_KR_MAX, EM_KR_COUNT } em_kred;
