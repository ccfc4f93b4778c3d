/* cpu-isa.c: what the processor runs (cpuid, and XGETBV for the register
 * state the OS saves), and the level in force under EMBER_CPU_ISA.
 * See em-cpu.h. */
#include "em-cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-error.h"
#include "em-pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define EM_X86 1
#else
#define EM_X86 0
#endif

static const char *const isa_names[EM_CPU_ISA_COUNT] = {"generic", "avx2", "avx512",
                                                        "avx512_bf16", "amx"};

static struct {
  em_cpu_isa detected, active;
  bool feature[4]; /* em_cpu_feature: the processor has it */
} cpu;

#if EM_X86
static unsigned long long xgetbv0(void) {
  unsigned int lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
}

static void detect(void) {
  unsigned int a, b, c, d;
  cpu.detected = EM_CPU_ISA_GENERIC;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12),
       f16c = c & (1u << 29);
  if (!osxsave || !avx) return;
  unsigned long long xcr0 = xgetbv0();
  bool ymm_state = (xcr0 & 0x6) == 0x6;       /* SSE and AVX state */
  bool zmm_state = (xcr0 & 0xE0) == 0xE0;     /* opmask, ZMM_Hi256, Hi16_ZMM */
  bool tile_state = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
  if (!ymm_state || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  bool avx2 = b & (1u << 5);
  bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  bool vnni = c & (1u << 11);
  bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  unsigned int a1 = 0, b1, c1, d1;
  if (a >= 1) __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
  bool bf16 = a1 & (1u << 5);
  if (!(avx2 && fma && f16c)) return;
  cpu.detected = EM_CPU_ISA_AVX2;
  if (!(zmm_state && f && dq && bw && vl)) return;
  cpu.detected = EM_CPU_ISA_AVX512;
  cpu.feature[EM_CPU_AVX512_VNNI] = vnni;
  cpu.feature[EM_CPU_AVX512_BF16] = bf16;
  if (!(vnni || bf16)) return;
  cpu.detected = EM_CPU_ISA_AVX512_BF16;
  if (!(tile_state && amx_tile && (amx_bf16 || amx_int8))) return;
  cpu.detected = EM_CPU_ISA_AMX;
  cpu.feature[EM_CPU_AMX_BF16] = amx_bf16;
  cpu.feature[EM_CPU_AMX_INT8] = amx_int8;
}
#else
static void detect(void) { cpu.detected = EM_CPU_ISA_GENERIC; }
#endif

static void detect_once(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, detect);
}

static void apply_cap(void) {
  detect_once();
  cpu.active = cpu.detected;
  const char *cap = getenv("EMBER_CPU_ISA");
  if (!cap || !cap[0]) return;
  em_cpu_isa want;
  if (!em_cpu_isa_parse(cap, &want)) {
    em_log_msg(EM_LOG_WARNING,
               "EMBER_CPU_ISA is '%s': it takes generic, avx2, avx512, avx512_bf16 or amx (a "
               "cap on the CPU kernels); using this processor's best, %s",
               cap, isa_names[cpu.detected]);
    return;
  }
  if (want > cpu.detected) {
    em_log_msg(EM_LOG_WARNING,
               "EMBER_CPU_ISA=%s: this processor runs at most %s; using %s", cap,
               isa_names[cpu.detected], isa_names[cpu.detected]);
    return;
  }
  cpu.active = want;
}

static void ensure(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, apply_cap);
}

em_cpu_isa em_cpu_isa_detected(void) {
  detect_once();
  return cpu.detected;
}

em_cpu_isa em_cpu_isa_active(void) {
  ensure();
  return cpu.active;
}

bool em_cpu_has(em_cpu_feature f) {
  ensure();
  static const em_cpu_isa level[] = {
      [EM_CPU_AVX512_VNNI] = EM_CPU_ISA_AVX512_BF16,
      [EM_CPU_AVX512_BF16] = EM_CPU_ISA_AVX512_BF16,
      [EM_CPU_AMX_BF16] = EM_CPU_ISA_AMX,
      [EM_CPU_AMX_INT8] = EM_CPU_ISA_AMX,
  };
  if ((unsigned)f >= sizeof level / sizeof level[0]) return false;
  return cpu.feature[f] && cpu.active >= level[f];
}

const char *em_cpu_isa_name(em_cpu_isa isa) {
  return (unsigned)isa < EM_CPU_ISA_COUNT ? isa_names[isa] : "?";
}

bool em_cpu_isa_parse(const char *name, em_cpu_isa *out) {
  for (int i = 0; i < EM_CPU_ISA_COUNT; i++)
    if (name && strcmp(name, isa_names[i]) == 0) {
      *out = (em_cpu_isa)i;
      return true;
    }
  return false;
}

const char *em_cpu_kernels_name(em_cpu_isa isa) {
  if (!EM_X86 || isa <= EM_CPU_ISA_GENERIC) return "generic";
  return isa == EM_CPU_ISA_AVX2 ? "avx2" : "avx512";
}

const char *em_cpu_kernels_active(void) { return em_cpu_kernels_name(em_cpu_isa_active()); }

const char *em_cpu_isa_blas_core(em_cpu_isa isa) {
  if (isa <= EM_CPU_ISA_GENERIC) return "Prescott";
  return isa == EM_CPU_ISA_AVX2 ? "Haswell" : "SkylakeX";
}

void em_cpu_kernels_describe(char *buf, size_t cap) {
  em_cpu_isa active = em_cpu_isa_active(), detected = em_cpu_isa_detected();
  char capped[96] = "";
  if (active < detected)
    snprintf(capped, sizeof capped, ", capped by EMBER_CPU_ISA=%s", isa_names[active]);
  snprintf(buf, cap, "%s kernels (processor %s%s), OpenBLAS %s", em_cpu_kernels_name(active),
           isa_names[detected], capped, em_blas_core());
}
