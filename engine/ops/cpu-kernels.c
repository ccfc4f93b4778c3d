/* cpu-kernels.c: which variant of the CPU's f32 kernels runs
 * (cpu-kernels.h): the one of the active level (em-cpu.h), found once.
 * EMBER_HAVE_CPU_AVX2 / _AVX512 say which variants this build compiled
 * (every x86-64 build has all three; other processors have generic). */
#include "cpu-kernels.h"

#include <pthread.h>

extern const em_cpu_kernels em_cpu_kernels_table_generic;
#ifdef EMBER_HAVE_CPU_AVX2
extern const em_cpu_kernels em_cpu_kernels_table_avx2;
#endif
#ifdef EMBER_HAVE_CPU_AVX512
extern const em_cpu_kernels em_cpu_kernels_table_avx512;
#endif

const em_cpu_kernels *em_cpu_kernels_for(em_cpu_isa isa) {
  if (isa > em_cpu_isa_detected()) return NULL;
#ifdef EMBER_HAVE_CPU_AVX512
  if (isa >= EM_CPU_ISA_AVX512) return &em_cpu_kernels_table_avx512;
#endif
#ifdef EMBER_HAVE_CPU_AVX2
  if (isa >= EM_CPU_ISA_AVX2) return &em_cpu_kernels_table_avx2;
#endif
  return &em_cpu_kernels_table_generic;
}

static const em_cpu_kernels *active;

static void pick(void) { active = em_cpu_kernels_for(em_cpu_isa_active()); }

const em_cpu_kernels *em_cpu_kernels_get(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, pick);
  return active;
}
