/* embedding.c: em_embedding, rows of a weight (V, D) gathered at integer
 * indices of any shape S into (S..., D), one front-end for every device
 * (op-frontend.h); backward scatter-adds the rows of the output gradient
 * into the weight gradient (an index that occurs twice receives both
 * rows). The CPU's kernels are in cpu-embedding.c.
 *
 * Indices are checked on the host first (on a device, one copy of the
 * index tensor): an index out of range is a broken invariant, and a
 * kernel cannot say so. The tape node: in[0] = weight, saved[0] = the
 * indices (contiguous). */
#include "op-frontend.h"
#include "ops-private.h"

#include <stdio.h>

static void embedding_backward(em_node *n) {
  em_tensor *w = n->in[0], *idx = n->saved[0], *g = n->out->grad;
  const char *prev = op_backward_begin(n);
  bool fresh;
  em_tensor *gw = em_grad_acquire(w, &fresh); /* (V, D) contiguous */
  em_tensor *gc = em_contiguous_nograd(g);
  if (gw && op_live(gw, gc, idx) && em_tensor_numel(gw) > 0) {
    const em_kernels *k = op_k(g);
    if (fresh) EM_KCALL(k, fill, gw, 0.0);
    if (em_tensor_numel(idx) > 0) EM_KCALL(k, embedding_backward, gw, gc, idx);
  }
  em_device_set_op(prev);
}

/* Asserts that every index of ic (L, contiguous) is in [0, V). */
static void check_indices(const em_tensor *ic, int64_t L, int64_t V) {
  const int64_t *iv = em_i64(ic);
  if (em_on_device(ic)) {
    int64_t *host = em_scratch(sizeof(int64_t) * (size_t)L);
    em_tensor_download(ic, host);
    iv = host;
  }
  for (int64_t i = 0; i < L; i++) {
    if (iv[i] >= 0 && iv[i] < V) continue;
    char msg[160];
    snprintf(msg, sizeof msg, "em_embedding: index out of range: %lld at %lld, not in [0, %lld)",
             (long long)iv[i], (long long)i, (long long)V);
    em_assert_fail(msg, __FILE__, __LINE__, __func__);
  }
}

em_tensor *em_embedding(em_tensor *weight, em_tensor *idx) {
  EM_ASSERT(em_dtype_is_float(weight->dtype) && weight->ndim == 2);
  OP_BEGIN("embedding", 2, weight, idx);
  EM_ASSERT(idx->dtype == EM_DTYPE_I64 && "embedding: the indices must be i64");
  EM_ASSERT(idx->ndim < EM_MAX_DIMS);
  int64_t V = weight->shape[0], D = weight->shape[1], L = em_tensor_numel(idx);
  em_tensor *ic = em_contiguous_nograd(idx), *wc = em_contiguous_nograd(weight);
  int64_t shape[EM_MAX_DIMS];
  for (int d = 0; d < idx->ndim; d++) shape[d] = idx->shape[d];
  shape[idx->ndim] = D;
  em_tensor *y = em_empty_on(weight->device, weight->dtype, idx->ndim + 1, shape); /* (S..., D) */
  const em_kernels *k = op_k(weight);
  bool live = op_live(ic, wc, y) && OP_HAS(k, embedding_forward, "embedding", weight) &&
              OP_HAS(k, embedding_backward, "embedding", weight);
  if (live && L > 0) {
    check_indices(ic, L, V);
    if (D > 0) EM_KCALL(k, embedding_forward, y, wc, ic);
  }
  if (live && em_needs_grad(1, &weight)) {
    em_node *nd = em_record("embedding", embedding_backward, y, 1, &weight);
    nd->saved[0] = ic;
  }
  return OP_END(y);
}
