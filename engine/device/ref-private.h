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
void em_ref_gemm(int amp, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                 int64_t stride_b, float beta, float *c, int64_t ldc, int64_t stride_c,
                 int64_t batch);
void em_ref_conv2d_forward(int amp, em_tensor *y, const em_tensor *x, const em_tensor *w,
                           const em_tensor *b, const em_conv2d_params *p);
void em_ref_conv2d_backward(int amp, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                            const em_tensor *g, const em_tensor *x, const em_tensor *w,
                            const em_conv2d_params *p);
/* ref-pool.c */
void em_ref_pool2d_forward(bool max, em_tensor *y, const em_tensor *x, const em_pool2d_params *p);
void em_ref_pool2d_backward(bool max, em_tensor *gx, const em_tensor *g, const em_tensor *x,
                            const em_tensor *y, const em_pool2d_params *p);
/* ref-norm.c */
void em_ref_batch_norm_forward(bool training, em_tensor *y, em_tensor *save_mean,
                               em_tensor *save_invstd, const em_tensor *x, const em_tensor *w,
                               const em_tensor *b, em_tensor *running_mean,
                               em_tensor *running_var, double momentum, double eps);
void em_ref_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *g,
                                const em_tensor *x, const em_tensor *w, const em_tensor *save_mean,
                                const em_tensor *save_invstd);
void em_ref_layer_norm_forward(em_tensor *y, em_tensor *mean, em_tensor *rstd, const em_tensor *x,
                               const em_tensor *w, const em_tensor *b, int64_t rows, int64_t cols,
                               double eps);
void em_ref_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *g,
                                const em_tensor *x, const em_tensor *w, const em_tensor *mean,
                                const em_tensor *rstd, int64_t rows, int64_t cols);
/* ref-softmax-loss.c */
void em_ref_softmax_forward(bool log, em_tensor *y, const em_tensor *x, int dim);
void em_ref_softmax_backward(bool log, em_tensor *gx, const em_tensor *g, const em_tensor *y,
                             int dim);
void em_ref_cross_entropy_forward(em_tensor *loss, em_tensor *lse, const em_tensor *logits,
                                  const em_tensor *target, double smoothing);
void em_ref_cross_entropy_backward(em_tensor *gx, const em_tensor *gscale,
                                   const em_tensor *logits, const em_tensor *target,
                                   const em_tensor *lse, double smoothing);
/* ref-misc.c: embedding, dropout, optimisers, sumsq, unscale */
void em_ref_embedding_forward(em_tensor *y, const em_tensor *w, const em_tensor *idx);
void em_ref_embedding_backward(em_tensor *gw, const em_tensor *g, const em_tensor *idx);
void em_ref_dropout_mask(em_tensor *mask, double p, uint64_t seed, uint64_t counter);
void em_ref_sgd_step(em_tensor *p, const em_tensor *g, em_tensor *buf, double lr, double wd,
                     double momentum, double dampening, bool nesterov, bool first);
void em_ref_adam_step(em_tensor *p, const em_tensor *g, em_tensor *m, em_tensor *v, int64_t step,
                      double lr, double beta1, double beta2, double eps, double wd,
                      bool decoupled);
void em_ref_sumsq(bool acc, em_tensor *out, const em_tensor *x);
void em_ref_unscale(em_tensor *x, float inv_scale, em_tensor *found);
