/* ref-private.h: what the files of the reference device (ref-*.c) share:
 * its kernel table and the host loops its kernels are made of. */
#pragma once

#include "device-private.h"
#include "kernels/kern-common.h"

_Static_assert(EM_KMAX_DIMS == EM_MAX_DIMS, "em_kview holds every tensor's dimensions");

/* The reference device's kernels (ref-kernels.c). */
extern const em_kernels em_ref_kernels;

/* t's view over its own shape (its strides, its offset). */
static inline em_kview em_ref_view(const em_tensor *t) {
  em_kview v;
  em_kview_bcast(&v, t->ndim, t->shape, t->ndim, t->shape, t->stride, t->offset);
  return v;
}
/* t's view broadcast into the shape of `to`. */
static inline em_kview em_ref_view_into(const em_tensor *t, const em_tensor *to) {
  em_kview v;
  em_kview_bcast(&v, to->ndim, to->shape, t->ndim, t->shape, t->stride, t->offset);
  return v;
}

/* The kernels of the table, one file per family. ref-kernels.c holds the
 * table and the element-wise family (fill, copy, binary, unary, reduce,
 * sum_to). */
/* ref-linalg.c */
em_k_gemm em_ref_gemm;
em_k_conv2d_forward em_ref_conv2d_forward;
em_k_conv2d_backward em_ref_conv2d_backward;
/* ref-pool.c */
em_k_pool2d_forward em_ref_pool2d_forward;
em_k_pool2d_backward em_ref_pool2d_backward;
/* ref-norm.c */
em_k_batch_norm_forward em_ref_batch_norm_forward;
em_k_batch_norm_backward em_ref_batch_norm_backward;
em_k_layer_norm_forward em_ref_layer_norm_forward;
em_k_layer_norm_backward em_ref_layer_norm_backward;
/* ref-softmax-loss.c */
em_k_softmax_forward em_ref_softmax_forward;
em_k_softmax_backward em_ref_softmax_backward;
em_k_cross_entropy_forward em_ref_cross_entropy_forward;
em_k_cross_entropy_backward em_ref_cross_entropy_backward;
/* ref-attention.c */
em_k_sdpa_forward em_ref_sdpa_forward;
em_k_sdpa_backward em_ref_sdpa_backward;
/* ref-misc.c: embedding, dropout, optimisers, sumsq, unscale */
em_k_embedding_forward em_ref_embedding_forward;
em_k_embedding_backward em_ref_embedding_backward;
em_k_dropout_mask em_ref_dropout_mask;
em_k_sgd_step em_ref_sgd_step;
em_k_adam_step em_ref_adam_step;
em_k_sumsq em_ref_sumsq;
em_k_unscale em_ref_unscale;
