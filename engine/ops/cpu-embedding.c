/* cpu-embedding.c: the CPU backend's embedding kernels (the
 * embedding_forward and embedding_backward entries of em-backend.h), f32
 * and f64. The op front-end is embedding.c.
 *
 * Forward copies whole rows; big gathers split the rows over threads.
 * Backward stays race-free on threads by splitting the D columns, so
 * every thread walks all indices but owns its columns. */
#include "ops-private.h"

#include "em-pool.h"

#include <string.h>

#define PARALLEL_MIN (1 << 16)   /* elements before threads are worth waking */
#define PARALLEL_GRAIN (1 << 15) /* elements per thread chunk, at least */

typedef struct {
  const em_tensor *weight; /* (V, D), any strides */
  const int64_t *idx;      /* (L) */
  void *out;               /* (L, D): y forward, gw (V, D) backward */
  const void *gy;          /* (L, D) backward */
  int64_t L, D;
} emb_job;

static void gather_rows(void *ctx, int64_t begin, int64_t end) {
  const emb_job *j = ctx;
  const em_tensor *w = j->weight;
  size_t es = em_dtype_size(w->dtype);
  const char *base = em_tensor_ptr(w);
  char *out = j->out;
  for (int64_t i = begin; i < end; i++) {
    const char *row = base + (size_t)(j->idx[i] * w->stride[0]) * es;
    char *dst = out + (size_t)(i * j->D) * es;
    if (w->stride[1] == 1 || j->D == 1) memcpy(dst, row, (size_t)j->D * es);
    else
      for (int64_t d = 0; d < j->D; d++)
        memcpy(dst + (size_t)d * es, row + (size_t)(d * w->stride[1]) * es, es);
  }
}

/* gw[idx[i], d] += gy[i, d] for d in [d0, d1). */
static void scatter_add_cols(void *ctx, int64_t d0, int64_t d1) {
  const emb_job *j = ctx;
  int64_t D = j->D;
  if (j->weight->dtype == EM_DTYPE_F32) {
    float *gw = j->out;
    const float *gy = j->gy;
    for (int64_t i = 0; i < j->L; i++) {
      float *dst = gw + j->idx[i] * D;
      const float *src = gy + i * D;
      for (int64_t d = d0; d < d1; d++) dst[d] += src[d];
    }
  } else {
    double *gw = j->out;
    const double *gy = j->gy;
    for (int64_t i = 0; i < j->L; i++) {
      double *dst = gw + j->idx[i] * D;
      const double *src = gy + i * D;
      for (int64_t d = d0; d < d1; d++) dst[d] += src[d];
    }
  }
}

em_status em_cpu_embedding_forward(em_tensor *y, const em_tensor *w, const em_tensor *idx) {
  EM_ASSERT(EM_IS_FLOAT(w) && w->ndim == 2 && y->dtype == w->dtype);
  EM_ASSERT(idx->dtype == EM_DTYPE_I64 && em_tensor_is_contiguous(idx) &&
            em_tensor_is_contiguous(y));
  emb_job j = {.weight = w, .idx = em_tensor_ptr(idx), .out = em_tensor_ptr(y),
               .L = em_tensor_numel(idx), .D = w->shape[1]};
  if (j.L * j.D >= PARALLEL_MIN)
    em_parallel_for(j.L, PARALLEL_GRAIN / (j.D ? j.D : 1) + 1, gather_rows, &j);
  else gather_rows(&j, 0, j.L);
  return EM_OK;
}

em_status em_cpu_embedding_backward(em_tensor *gw, const em_tensor *g, const em_tensor *idx) {
  EM_ASSERT(EM_IS_FLOAT(gw) && gw->ndim == 2 && g->dtype == gw->dtype);
  EM_ASSERT(em_tensor_is_contiguous(gw) && em_tensor_is_contiguous(g) &&
            idx->dtype == EM_DTYPE_I64 && em_tensor_is_contiguous(idx));
  emb_job j = {.weight = gw, .idx = em_tensor_ptr(idx), .out = em_tensor_ptr(gw),
               .gy = em_tensor_ptr(g), .L = em_tensor_numel(idx), .D = gw->shape[1]};
  if (j.L * j.D >= PARALLEL_MIN && j.D > 1)
    em_parallel_for(j.D, PARALLEL_GRAIN / j.L + 1, scatter_add_cols, &j);
  else scatter_add_cols(&j, 0, j.D);
  return EM_OK;
}
