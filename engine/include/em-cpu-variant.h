/* em-cpu-variant.h: naming the symbols of a file compiled once per
 * instruction set (engine/meson.build: cpu_variant_sources, built with
 * -DEM_ISA=generic|avx2|avx512 and that level's -march).
 *
 * EM_ISA_FN(name) is name with the variant's suffix (em_gemv_f32 becomes
 * em_gemv_f32_avx2), so the copies link side by side; each kernel family
 * keeps its own list of renames in its own header (engine/ops:
 * cpu-kernels.h, engine/quant: quant-isa.h), which includes this one.
 * It lives here, the one folder on every engine file's include path, so
 * that neither family includes the other's private headers. */
#pragma once

#ifdef EM_ISA
#define EM_ISA_CAT2(a, b) a##_##b
#define EM_ISA_CAT(a, b) EM_ISA_CAT2(a, b)
#define EM_ISA_FN(name) EM_ISA_CAT(name, EM_ISA)
#endif
