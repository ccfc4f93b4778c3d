/* dev-misc.c: em_embedding on devices, with backward. (Dropout has one
 * front-end for every device, engine/ops/dropout.c.)
 *
 * Embedding gathers rows with its kernel; indices are checked on the host
 * first (one copy of the index tensor), since an index out of range is a
 * broken invariant as on the CPU and a kernel cannot say so. Backward
 * scatter-adds rows into the weight gradient (zeroed when fresh). */
#include "dev-private.h"

#include "../core/grad-accumulate.h"

/* ---- embedding ------------------------------------------------------------------------------ */

/* in: weight; saved[0]: the indices (contiguous). */
static void embedding_backward(em_node *n) {
  em_tensor *w = n->in[0], *idx = n->saved[0], *g = n->out->grad;
  const char *prev = dev_backward_begin(n);
  bool fresh;
  em_tensor *gw = em_grad_acquire(w, &fresh); /* (V, D) contiguous */
  em_tensor *gc = em_contiguous_nograd(g);
  if (gw && dev_live(gw, gc, idx) && em_tensor_numel(gw) > 0) {
    const em_kernels *k = dev_k(g);
    if (fresh) EM_KCALL(k, fill, gw, 0.0);
    if (em_tensor_numel(idx) > 0) EM_KCALL(k, embedding_backward, gw, gc, idx);
  }
  em_device_set_op(prev);
}

em_tensor *em_dev_embedding(em_tensor *weight, em_tensor *idx) {
  DEV_OP_BEGIN("embedding", 2, weight, idx);
  EM_ASSERT(weight->dtype == EM_DTYPE_F32 && weight->ndim == 2);
  em_dev_check_dtype("embedding", idx, EM_DTYPE_I64, "the indices");
  EM_ASSERT(idx->ndim < EM_MAX_DIMS);
  int64_t V = weight->shape[0], D = weight->shape[1], L = em_tensor_numel(idx);
  em_tensor *ic = em_contiguous_nograd(idx), *wc = em_contiguous_nograd(weight);
  int64_t shape[EM_MAX_DIMS];
  for (int d = 0; d < idx->ndim; d++) shape[d] = idx->shape[d];
  shape[idx->ndim] = D;
  em_tensor *y = dev_empty(weight, EM_DTYPE_F32, idx->ndim + 1, shape); /* (S..., D) */
  bool live = dev_live(ic, wc, y);
  if (live && L > 0) {
    int64_t *iv = em_scratch(sizeof(int64_t) * (size_t)L);
    em_tensor_download(ic, iv);
    for (int64_t i = 0; i < L; i++)
      if (iv[i] < 0 || iv[i] >= V)
        dev_fail("em_embedding: index %lld at %lld is out of range [0, %lld)", (long long)iv[i],
                 (long long)i, (long long)V);
    if (D > 0) EM_KCALL(dev_k(weight), embedding_forward, y, wc, ic);
  }
  if (live && em_needs_grad(1, &weight)) {
    em_node *nd = em_record("embedding", embedding_backward, y, 1, &weight);
    nd->saved[0] = ic;
  }
  return DEV_OP_END(y);
}
