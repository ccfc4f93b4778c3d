/* embedding.c: em_embedding, a row gather from weight (V, D) by i64
 * indices of any shape S into (S..., D); backward scatter-adds the rows
 * of the output gradient into the weight gradient (an index that occurs
 * twice receives both rows).
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
  void *out;               /* (L, D): y forward, gw backward */
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

static void embedding_backward(em_node *n) {
  bool fresh;
  em_tensor *w = n->in[0];
  em_tensor *gw = em_grad_acquire(w, &fresh); /* (V, D) contiguous */
  if (!gw) return;
  if (fresh) memset(em_tensor_ptr(gw), 0, em_tensor_nbytes(gw));
  emb_job j = {.weight = w, .idx = em_i64(n->saved[0]), .out = em_tensor_ptr(gw),
               .gy = em_tensor_ptr(n->out->grad), .L = n->i[0], .D = n->i[1]};
  if (j.L * j.D >= PARALLEL_MIN && j.D > 1)
    em_parallel_for(j.D, PARALLEL_GRAIN / j.L + 1, scatter_add_cols, &j);
  else scatter_add_cols(&j, 0, j.D);
}

em_tensor *em_embedding(em_tensor *weight, em_tensor *idx) {
  if (EM_ON_DEVICE(weight, idx)) return em_dev_embedding(weight, idx);
  EM_ASSERT(EM_IS_FLOAT(weight) && weight->ndim == 2);
  EM_ASSERT(idx->dtype == EM_DTYPE_I64 && idx->ndim < EM_MAX_DIMS);
  EM_OP_BEGIN("embedding", 2, weight, idx);
  int64_t V = weight->shape[0], D = weight->shape[1], L = em_tensor_numel(idx);
  em_tensor *ic = em_contiguous_nograd(idx);
  const int64_t *iv = em_i64(ic);
  for (int64_t i = 0; i < L; i++) EM_ASSERT(iv[i] >= 0 && iv[i] < V && "embedding index out of range");
  int64_t shape[EM_MAX_DIMS];
  for (int d = 0; d < idx->ndim; d++) shape[d] = idx->shape[d];
  shape[idx->ndim] = D;
  em_tensor *y = em_empty(weight->dtype, idx->ndim + 1, shape);
  emb_job j = {.weight = weight, .idx = iv, .out = em_tensor_ptr(y), .L = L, .D = D};
  if (L * D >= PARALLEL_MIN) em_parallel_for(L, PARALLEL_GRAIN / (D ? D : 1) + 1, gather_rows, &j);
  else gather_rows(&j, 0, L);
  if (em_needs_grad(1, &weight)) {
    em_node *nd = em_record("embedding", embedding_backward, y, 1, &weight);
    nd->saved[0] = ic;
    nd->i[0] = L;
    nd->i[1] = D;
  }
  return EM_OP_END(y);
}
