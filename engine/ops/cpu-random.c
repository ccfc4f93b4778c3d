/* cpu-random.c: the CPU backend's dropout mask (the dropout_mask entry of
 * em-backend.h), f32 and f64, from the counter-based generator the
 * reference and CUDA backends use (engine/device/kernels/kern-random.h).
 * Element i's keep decision is a pure function of (seed, counter, i), so
 * the CPU's mask is the other backends' bit for bit, and splitting the
 * work over the pool changes nothing. Each Philox block gives the draws
 * of four elements. */
#include "ops-private.h"

#include "em-pool.h"

#include "../device/kernels/kern-random.h"

typedef struct {
  void *mask; /* (n) contiguous, f32 or f64 */
  bool f64;
  int64_t n;
  uint64_t threshold, seed, counter;
  float scale32;
  double scale64;
} mask_job;

/* The mask values of Philox blocks [b0, b1). */
static void mask_blocks(void *ctx, int64_t b0, int64_t b1) {
  const mask_job *j = ctx;
  for (int64_t b = b0; b < b1; b++) {
    uint32_t r[4];
    em_krandom_block(j->seed, j->counter, (uint64_t)b, r);
    const int64_t i0 = 4 * b, m = j->n - i0 < 4 ? j->n - i0 : 4;
    if (j->f64) {
      double *ms = (double *)j->mask + i0;
      for (int64_t q = 0; q < m; q++) ms[q] = (uint64_t)r[q] >= j->threshold ? j->scale64 : 0.0;
    } else {
      float *ms = (float *)j->mask + i0;
      for (int64_t q = 0; q < m; q++) ms[q] = (uint64_t)r[q] >= j->threshold ? j->scale32 : 0.f;
    }
  }
}

em_status em_cpu_dropout_mask(em_tensor *mask, double p, uint64_t seed, uint64_t counter) {
  EM_ASSERT(EM_IS_FLOAT(mask) && em_tensor_is_contiguous(mask));
  mask_job j = {
      .mask = em_tensor_ptr(mask),
      .f64 = mask->dtype == EM_DTYPE_F64,
      .n = em_tensor_numel(mask),
      .threshold = em_kdropout_threshold(p),
      .seed = seed,
      .counter = counter,
      .scale32 = em_kdropout_scale(p),
      .scale64 = p < 1 ? 1.0 / (1.0 - p) : 0.0,
  };
  const int64_t blocks = (j.n + 3) / 4;
  if (j.n >= EM_PAR_MIN) em_parallel_for(blocks, EM_PAR_GRAIN / 4, mask_blocks, &j);
  else mask_blocks(&j, 0, blocks);
  return EM_OK;
}
