/* cpu-backend.c: the CPU's backend table (em-backend.h): host memory
 * through the engine's caching allocator (em_alloc), plain copies, and
 * the CPU's kernels. Each kernel is in the file of its family
 * (cpu-copy.c, cpu-binary.c, cpu-unary.c, cpu-reduce.c, cpu-random.c, cpu-embedding.c, cpu-softmax.c,
 * cpu-conv.c, cpu-pool.c, cpu-norm.c, cpu-linalg.c, cpu-loss.c, cpu-sdpa.c), tuned per
 * instruction set where it matters (cpu-kernels.h). Entries still NULL belong to the op families that
 * have not moved to the front-end yet (op-frontend.h): their CPU ops
 * compute directly and never reach this table. */
#include "ops-private.h"

#include "em-backend.h"

#include <string.h>

static int cpu_count(void) { return 1; }

static em_status cpu_info(int index, em_device_info *out, em_error *err) {
  (void)index;
  return em_device_info_get(em_device_cpu(), out, err);
}

static void *cpu_alloc(int index, size_t nbytes) {
  (void)index;
  return em_alloc(nbytes);
}

static void cpu_free(int index, void *p, size_t nbytes) {
  (void)index;
  em_free(p, nbytes);
}

static void cpu_stats(int index, em_memory_stats *out) {
  (void)index;
  em_memory_stats_get(out);
}

static void cpu_reset_peak(int index) {
  (void)index;
  em_memory_reset_peak();
}

static void cpu_release_cached(int index) {
  (void)index;
  em_memory_release_cached();
}

static void cpu_memcpy(int index, void *dst, const void *src, size_t n) {
  (void)index;
  if (n) memcpy(dst, src, n);
}

static void cpu_synchronize(int index) { (void)index; }

static const em_kernels cpu_kernels = {
  .fill = em_cpu_fill,
  .copy = em_cpu_copy,
  .binary = em_cpu_binary,
  .unary = em_cpu_unary,
  .unary_backward = em_cpu_unary_backward,
  .reduce = em_cpu_reduce,
  .sum_to = em_cpu_sum_to,
  .conv2d_forward = em_cpu_conv2d_forward,
  .conv2d_backward = em_cpu_conv2d_backward,
  .pool2d_forward = em_cpu_pool2d_forward,
  .pool2d_backward = em_cpu_pool2d_backward,
  .batch_norm_forward = em_cpu_batch_norm_forward,
  .batch_norm_backward = em_cpu_batch_norm_backward,
  .batch_norm_backward_eval = em_cpu_batch_norm_backward_eval,
  .layer_norm_forward = em_cpu_layer_norm_forward,
  .layer_norm_backward = em_cpu_layer_norm_backward,
  .gemm = em_cpu_gemm,
  .gemm_bias = em_cpu_gemm_bias,
  .bias_backward = em_cpu_bias_backward,
  .softmax_forward = em_cpu_softmax_forward,
  .softmax_backward = em_cpu_softmax_backward,
  .cross_entropy_forward = em_cpu_cross_entropy_forward,
  .cross_entropy_backward = em_cpu_cross_entropy_backward,
  .embedding_forward = em_cpu_embedding_forward,
  .embedding_backward = em_cpu_embedding_backward,
  .dropout_mask = em_cpu_dropout_mask,
  .masked_fill = em_cpu_masked_fill,
  .sdpa_forward = em_cpu_sdpa_forward,
  .sdpa_backward = em_cpu_sdpa_backward,
  .sumsq = em_cpu_sumsq,
};

const em_backend *em_cpu_backend(void) {
  static const em_backend backend = {
    .name = "cpu",
    .f64 = true,
    .count = cpu_count,
    .info = cpu_info,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .stats = cpu_stats,
    .reset_peak = cpu_reset_peak,
    .release_cached = cpu_release_cached,
    .memcpy_h2d = cpu_memcpy,
    .memcpy_d2h = cpu_memcpy,
    .memcpy_d2d = cpu_memcpy,
    .synchronize = cpu_synchronize,
    .k = &cpu_kernels,
  };
  return &backend;
}
