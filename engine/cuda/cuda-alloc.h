/* cuda-alloc.h: the caching allocator of the CUDA backend (cuda-alloc.cu),
 * in C: its entry points (the backend table's memory members) and the
 * driver it takes segments from. The driver is cudaMalloc / cudaFree on
 * the device's stream; tests/gpu/test-cuda-alloc-host swaps in host memory
 * so that the allocator's logic (rounding, best fit, splitting, merging,
 * statistics, release, the retry after a failure, threads) is tested on
 * machines without a GPU. */
#pragma once

#include <stddef.h>

#include "em-tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_cuda_alloc_driver {
  /* A segment of n bytes (256-byte aligned) for device index, or NULL. */
  void *(*malloc)(int index, size_t n);
  void (*free)(int index, void *p);
  /* Waits for the work queued on the device (before segments go back). */
  void (*sync)(int index);
} em_cuda_alloc_driver;

/* NULL: the CUDA driver (the default). Set before any allocation. */
void em_cuda_alloc_set_driver(const em_cuda_alloc_driver *d);

void *em_cuda_alloc(int index, size_t nbytes);
void em_cuda_free(int index, void *p, size_t nbytes);
void em_cuda_stats(int index, em_memory_stats *out);
void em_cuda_reset_peak(int index);
void em_cuda_release_cached(int index);

#ifdef __cplusplus
}
#endif
