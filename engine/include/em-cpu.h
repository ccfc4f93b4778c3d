/* em-cpu.h: the processor's instruction sets, and which of the CPU's
 * kernel sets runs.
 *
 * One build runs on every x86-64 processor: each tuned kernel family is
 * compiled once per instruction set it has a path for and chosen once,
 * at first use, from cpuid (and what the OS saves on a context switch,
 * XGETBV), the way oneDNN, OpenBLAS's DYNAMIC_ARCH and ggml's CPU
 * variants do. The levels are ordered; each includes the ones below:
 *
 *   generic      x86-64 baseline (SSE2): the portable C loops, OpenBLAS
 *   avx2         AVX2 + FMA (Haswell, Zen 1-3)
 *   avx512       AVX-512 F, BW, DQ, VL (SkylakeX, Zen 4-5)
 *   avx512_bf16  + AVX512-BF16 and AVX512-VNNI where the CPU has them
 *                (Cooper Lake, Zen 4-5; Cascade and Ice Lake: VNNI)
 *   amx          + AMX tiles (Sapphire Rapids)
 *
 * EMBER_CPU_ISA=LEVEL caps the selection (as ONEDNN_MAX_CPU_ISA does), so
 * one machine runs every path it can: asking for more than the processor
 * has says so (a warning) and uses what it has. The f32 kernel table
 * (GEMM, convolution, pooling) has generic, avx2 and avx512 versions; the
 * bf16 (engine/amp) and int8 (engine/quant) kernels ask em_cpu_has for
 * their extension, which the cap limits the same way. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef enum {
  EM_CPU_ISA_GENERIC,
  EM_CPU_ISA_AVX2,
  EM_CPU_ISA_AVX512,
  EM_CPU_ISA_AVX512_BF16,
  EM_CPU_ISA_AMX,
  EM_CPU_ISA_COUNT
} em_cpu_isa;

/* Instruction-set extensions past a level's own, and the level that
 * brings each (em_cpu_has is false under a cap below it). */
typedef enum {
  EM_CPU_AVX512_VNNI, /* avx512_bf16 */
  EM_CPU_AVX512_BF16, /* avx512_bf16 */
  EM_CPU_AMX_BF16,    /* amx */
  EM_CPU_AMX_INT8,    /* amx */
} em_cpu_feature;

/* The highest level the processor and OS run (reads no environment). */
em_cpu_isa em_cpu_isa_detected(void);
/* The level in force: the detected one, capped by EMBER_CPU_ISA (read
 * once, at the first call; a bad or too-high value is warned of through
 * em_log_msg then). */
em_cpu_isa em_cpu_isa_active(void);
/* Whether the processor has the extension and the active level allows it. */
bool em_cpu_has(em_cpu_feature f);
/* "generic", "avx2", "avx512", "avx512_bf16", "amx". */
const char *em_cpu_isa_name(em_cpu_isa isa);
/* Parses a level's name; false when it names none. */
bool em_cpu_isa_parse(const char *name, em_cpu_isa *out);
/* The f32 kernel set that runs at a level: "generic", "avx2" or "avx512"
 * (the levels above avx512 add no f32 kernels). */
const char *em_cpu_kernels_name(em_cpu_isa isa);
/* The kernel set in force: em_cpu_kernels_name(em_cpu_isa_active()). */
const char *em_cpu_kernels_active(void);
/* The OpenBLAS kernel family that matches a level ("Prescott", "Haswell",
 * "SkylakeX"), for a cap to hold OpenBLAS to as well. */
const char *em_cpu_isa_blas_core(em_cpu_isa isa);
/* What runs, for a person and the registry: "avx512 kernels (processor
 * avx512_bf16), OpenBLAS Haswell", with ", capped by EMBER_CPU_ISA=avx512"
 * inside the parentheses under a cap. */
void em_cpu_kernels_describe(char *buf, size_t cap);

/* For the engine's element-wise and per-lane loops outside the kernel
 * tables (an optimiser's update, a bias gradient's column sums, pixel
 * conversion): GCC compiles the function for x86-64-v4, x86-64-v3 and the
 * baseline and picks one from cpuid when the program loads, so the
 * portable build vectorises them as a -march=native one would. Only for
 * loops whose numbers do not depend on the vector width (each element or
 * lane computed alone, no sum across lanes; ISO C mode contracts no
 * a * b + c into an FMA): EMBER_CPU_ISA does not cap this choice, and
 * need not. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define EM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EM_CPU_CLONES
#endif
