/* em-backend.h: the backend interface: the table of memory, copies and
 * kernels that each device kind fills (the reference device in
 * engine/device/ref-*.c, CUDA in engine/cuda/), and device memory through
 * it. Engine code that reaches data on a device (core, ops, optim, amp,
 * dist) includes this header, never a backend folder's private one.
 *
 * A backend is memory (a caching allocator with the CPU's statistics),
 * copies, and the kernels the op front-end (engine/ops/op-frontend.h)
 * calls. The op layer does everything else once for every device: shapes,
 * checks, allocation of outputs (on the inputs' device), the autograd
 * tape and backward. Kernels only compute.
 *
 * Kernel conventions:
 *  - Tensors are em_tensor structs whose data is device memory; shape,
 *    strides (elements) and offset are as everywhere. Outputs are
 *    contiguous unless said otherwise; inputs may have any strides
 *    (broadcast strides 0 included) unless said otherwise.
 *  - All tensors of one call live on the same device (the op layer has
 *    checked). A tensor whose data is NULL (an allocation that failed,
 *    see em-device.h) never reaches a kernel.
 *  - Float kernels take F32 (and F64 where the backend's f64 says so);
 *    copy and fill take every dtype. Index
 *    tensors (targets, argmax, embedding indices) are I64.
 *  - `acc`: add into the output instead of overwriting it.
 *  - Kernels are queued on the device's stream in call order; only the
 *    host copies (memcpy_d2h) and `synchronize` wait.
 *  - amp (em_amp_mode, em-amp.h): EM_AMP_BF16 / EM_AMP_F16 compute the
 *    GEMM / convolution with operands rounded to that type and f32
 *    accumulation and output; tensors stay f32 in memory. */
#pragma once

#include "em-device.h"
#include "em-ops.h"

/* em_kbin, em_kun, em_kred: the op codes (shared with the kernel bodies). */
#include "em-kernel-ops.h"

/* The kernels of a device kind, as function types: a backend declares
 * its kernels with them (em_k_gemm em_ref_gemm;) and fills the table.
 * Each returns EM_OK, or a failure (a CUDA or cuDNN call that failed)
 * whose message the backend recorded with em_kernel_fail; callers go
 * through EM_KCALL (below), which makes it the thread's device error. */
/* y = v (y any strides, any dtype). */
typedef em_status em_k_fill(em_tensor *y, double v);
/* y = x, x broadcastable to y's shape, any strides for both, with dtype
 * conversion (float -> integer truncates like C). */
typedef em_status em_k_copy(em_tensor *y, const em_tensor *x);
/* y (=|+=) a OP b, a and b broadcastable to y's shape. */
typedef em_status em_k_binary(em_kbin op, bool acc, em_tensor *y, const em_tensor *a,
                              const em_tensor *b);
/* y = f(x), same shape; y may be x itself (in place: em_conv2d_relu). */
typedef em_status em_k_unary(em_kun op, em_tensor *y, const em_tensor *x, double p0, double p1);
/* gx (=|+=) g * f'(x) (y = f(x) is given too: exp, sqrt, sigmoid and
 * tanh use it), same shapes. */
typedef em_status em_k_unary_backward(em_kun op, bool acc, em_tensor *gx, const em_tensor *g,
                                      const em_tensor *x, const em_tensor *y, double p0, double p1);
/* y = sum or max of x over dim; y has x's shape with size 1 at dim (and
 * y's strides need not be contiguous). For MAX, idx (same shape as y,
 * I64, or NULL) gets the first index of the maximum; NaN wins. */
typedef em_status em_k_reduce(em_kred op, em_tensor *y, em_tensor *idx, const em_tensor *x, int dim);
/* y (=|+=) x summed over the dims where y (whose shape x broadcasts
 * from, same ndim, sizes 1 where reduced) is broadcast; y any strides
 * (not broadcast itself). With nothing reduced it is y (=|+=) x. */
typedef em_status em_k_sum_to(bool acc, em_tensor *y, const em_tensor *x);
/* For b in [0, batch): C_b (m, n, ldc) = alpha * op(A_b) (m, k) @
 * op(B_b) (k, n) + beta * C_b, row-major, X_b = X + b * strideX
 * (elements; 0 broadcasts), in dt (F32; F64 where the backend's f64 says
 * so; amp applies to F32 only). Pointers are device addresses of the
 * first elements. */
typedef em_status em_k_gemm(int amp, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            float alpha, const void *a, int64_t lda, int64_t stride_a, const void *b,
                            int64_t ldb, int64_t stride_b, float beta, void *c, int64_t ldc,
                            int64_t stride_c, int64_t batch);
/* Optional (NULL: em_linear runs copy and gemm, em_linear_relu a linear
 * then a relu): a linear layer's GEMM with its epilogue, C (m, n, ldc) =
 * op(A) (m, k) @ op(B) (k, n) + bias (n contiguous values added to every
 * row, or NULL), then max(C, 0) when relu (NaN and -0 kept, as em_relu;
 * never under amp). */
typedef em_status em_k_gemm_bias(int amp, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                                 int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                                 const void *bias, bool relu, void *c, int64_t ldc);
/* Optional (NULL: sum_to, and em_linear_relu unfused): a linear layer's
 * bias gradient, gb (K, contiguous; or NULL) (=|+=) the column sums of
 * g (N, K) contiguous. With y (N, K, the ReLU's output; or NULL) g is
 * first masked where y is not above 0 (em_relu's backward) into gm
 * (N, K), and the sums are of gm. */
typedef em_status em_k_bias_backward(bool acc, em_tensor *gb, em_tensor *gm, const em_tensor *g,
                                     const em_tensor *y);
/* Convolution, NCHW, contiguous x, w, y, g. y = conv(x, w) + b (b may
 * be NULL). Backward writes (not accumulates) each non-NULL of gx, gw,
 * gb. The CPU's computes in f32 under every amp mode (em-amp.h: its
 * autocast leaves convolution in f32). */
typedef em_status em_k_conv2d_forward(int amp, em_tensor *y, const em_tensor *x, const em_tensor *w,
                                      const em_tensor *b, const em_conv2d_params *p);
typedef em_status em_k_conv2d_backward(int amp, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                       const em_tensor *g, const em_tensor *x, const em_tensor *w,
                                       const em_conv2d_params *p);
/* Pooling, NCHW, contiguous. max: PyTorch's (first maximum, NaN wins,
 * padding never chosen); avg: count_include_pad as in p. Backward
 * writes gx (x's shape) from g (y's shape); x and y are those of the
 * forward. idx (max only; NULL, or I32 of y's shape, contiguous) is the
 * backend's to use: a forward may write there the position iy * W + ix
 * of each window's maximum in its plane, and backward gets the same idx
 * (the CPU's scatters the gradient through it; ref and CUDA find each
 * maximum again from x and leave it untouched). */
typedef em_status em_k_pool2d_forward(bool max, em_tensor *y, em_tensor *idx, const em_tensor *x,
                                      const em_pool2d_params *p);
typedef em_status em_k_pool2d_backward(bool max, em_tensor *gx, const em_tensor *g, const em_tensor *x,
                                       const em_tensor *y, const em_tensor *idx,
                                       const em_pool2d_params *p);
/* Batch norm over x (N, C, *) contiguous, per channel C. Training: batch
 * statistics, save_mean / save_invstd (C; f64 on a backend whose f64 is
 * set, else f32, as layer norm's mean and rstd) written, running stats
 * (may be NULL) updated with momentum and the unbiased variance. Eval:
 * running stats used (save_* unused, may be NULL). w, b (C) may be NULL. */
typedef em_status em_k_batch_norm_forward(bool training, em_tensor *y, em_tensor *save_mean,
                                          em_tensor *save_invstd, const em_tensor *x, const em_tensor *w,
                                          const em_tensor *b, em_tensor *running_mean,
                                          em_tensor *running_var, double momentum, double eps);
/* Training-mode backward: writes each non-NULL of gx, gw, gb. */
typedef em_status em_k_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                           const em_tensor *g, const em_tensor *x, const em_tensor *w,
                                           const em_tensor *save_mean, const em_tensor *save_invstd);
/* Eval-mode backward (the statistics are running_mean and running_var as
 * the forward read them): writes each non-NULL of gx, gw, gb. Optional:
 * without it the op front-end composes it from binary and sum_to. */
typedef em_status em_k_batch_norm_backward_eval(em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                                const em_tensor *g, const em_tensor *x,
                                                const em_tensor *w, const em_tensor *running_mean,
                                                const em_tensor *running_var, double eps);
/* Layer norm of contiguous x viewed as (rows, cols): mean, rstd (rows)
 * written; w, b (cols) may be NULL. Backward writes each non-NULL of
 * gx, gw, gb. */
typedef em_status em_k_layer_norm_forward(em_tensor *y, em_tensor *mean, em_tensor *rstd,
                                          const em_tensor *x, const em_tensor *w, const em_tensor *b,
                                          int64_t rows, int64_t cols, double eps);
typedef em_status em_k_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                           const em_tensor *g, const em_tensor *x, const em_tensor *w,
                                           const em_tensor *mean, const em_tensor *rstd, int64_t rows,
                                           int64_t cols);
/* (Log-)softmax over dim of contiguous x (viewed as outer, dim, inner).
 * Backward: gx = g - exp(y) * sum(g) (log) or y * (g - sum(g * y)). */
typedef em_status em_k_softmax_forward(bool log, em_tensor *y, const em_tensor *x, int dim);
typedef em_status em_k_softmax_backward(bool log, em_tensor *gx, const em_tensor *g, const em_tensor *y,
                                        int dim);
/* Cross-entropy of contiguous logits (N, C) against I64 targets (N),
 * PyTorch's label smoothing, mean over N: loss (a one-element tensor)
 * written, lse (N) keeps the row log-sum-exps for backward. A target
 * outside [0, C) is a broken invariant (the op layer checks on the
 * host). Backward: gx (N, C) = gscale * d loss / d logits, gscale a
 * one-element device tensor (the incoming gradient). */
typedef em_status em_k_cross_entropy_forward(em_tensor *loss, em_tensor *lse, const em_tensor *logits,
                                             const em_tensor *target, double smoothing);
typedef em_status em_k_cross_entropy_backward(em_tensor *gx, const em_tensor *gscale,
                                              const em_tensor *logits, const em_tensor *target,
                                              const em_tensor *lse, double smoothing);
/* y (idx's shape, D) = w[idx] for w (V, D); backward: gw (zeroed by the
 * caller) += g rows at idx (duplicates add up). */
typedef em_status em_k_embedding_forward(em_tensor *y, const em_tensor *w, const em_tensor *idx);
typedef em_status em_k_embedding_backward(em_tensor *gw, const em_tensor *g, const em_tensor *idx);
/* mask (contiguous) = 1 / (1 - p) with probability 1 - p, else 0 (all 0
 * for p = 1), from the counter-based generator (seed, counter) of
 * engine/device/kernels/kern-random.h: the same (seed, counter) gives the
 * same mask on every device kind, the CPU included. */
typedef em_status em_k_dropout_mask(em_tensor *mask, double p, uint64_t seed, uint64_t counter);
/* y (=|+=) (mask ? v : x), x and mask (U8, nonzero = set) broadcastable
 * to y's shape. masked_fill's forward (acc false, v the fill value) and
 * its backward (x = g, v = 0) are this one kernel. */
typedef em_status em_k_masked_fill(bool acc, em_tensor *y, const em_tensor *x, const em_tensor *mask,
                                   double v);
/* Fused scaled dot-product attention (em_sdpa and em_sdpa_packed of
 * em-ops.h; the formulas are engine/device/kernels/kern-attention.h's):
 * q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev), any strides; kpm (N,
 * S) U8 (nonzero: the key is hidden), any strides, or NULL. Forward
 * writes o (N, H, L, Ev; any strides, not overlapping: em_sdpa_packed's
 * is a view of its (N, L, H Ev) output) and lse (N, H, L, contiguous), of
 * q's dtype: one log-sum-exp per query row, -inf for a row whose every
 * key is hidden (its o is 0), and nothing of size L x S is kept. Backward
 * writes (does not accumulate) each non-NULL of gq, gk, gv (the shapes of
 * q, k, v; any strides, not overlapping: em_sdpa_packed's are views of
 * one packed gradient) from g (o's shape, any strides), o and lse of the
 * forward: the weights are recomputed from q, k and lse, the dropout mask
 * from its stream. */
typedef struct em_sdpa_args {
  bool causal;      /* key j hidden from query i when j > i + S - L */
  double scale;     /* > 0 */
  double dropout_p; /* on the weights; 0: none */
  /* The dropout stream (kern-random.h): weight (n, h, i, j) is element
   * ((n H + h) L + i) S + j, so the mask is em_dropout's over the (N, H,
   * L, S) weights for the same (seed, counter), on every device. */
  uint64_t seed, counter;
} em_sdpa_args;
typedef em_status em_k_sdpa_forward(em_tensor *o, em_tensor *lse, const em_tensor *q,
                                    const em_tensor *k, const em_tensor *v, const em_tensor *kpm,
                                    const em_sdpa_args *a);
typedef em_status em_k_sdpa_backward(em_tensor *gq, em_tensor *gk, em_tensor *gv,
                                     const em_tensor *g, const em_tensor *q, const em_tensor *k,
                                     const em_tensor *v, const em_tensor *o, const em_tensor *lse,
                                     const em_tensor *kpm, const em_sdpa_args *a);
/* Optimiser steps over contiguous p, g, state of one parameter (the
 * formulas of engine/optim/sgd.c and adam.c). buf may be NULL (no
 * momentum). first: the momentum buffer starts as a copy of d. */
typedef em_status em_k_sgd_step(em_tensor *p, const em_tensor *g, em_tensor *buf, double lr, double wd,
                                double momentum, double dampening, bool nesterov, bool first);
/* step is the 1-based step count after this update; decoupled: AdamW's
 * weight decay. */
typedef em_status em_k_adam_step(em_tensor *p, const em_tensor *g, em_tensor *m, em_tensor *v,
                                 int64_t step, double lr, double beta1, double beta2, double eps,
                                 double wd, bool decoupled);
/* out (one element of x's dtype) (=|+=) sum of squares of x (contiguous). */
typedef em_status em_k_sumsq(bool acc, em_tensor *out, const em_tensor *x);
/* The gradient scaler: x *= inv_scale in place (contiguous), and
 * found (one f32 element, not reset) set to 1 when any value of x is
 * not finite. */
typedef em_status em_k_unscale(em_tensor *x, float inv_scale, em_tensor *found);

/* One kernel table per device kind; each entry's type above says what
 * it does. */
typedef struct em_kernels {
  em_k_fill *fill;
  em_k_copy *copy;
  em_k_binary *binary;
  em_k_unary *unary;
  em_k_unary_backward *unary_backward;
  em_k_reduce *reduce;
  em_k_sum_to *sum_to;
  em_k_gemm *gemm;
  em_k_gemm_bias *gemm_bias;
  em_k_bias_backward *bias_backward;
  em_k_conv2d_forward *conv2d_forward;
  em_k_conv2d_backward *conv2d_backward;
  em_k_pool2d_forward *pool2d_forward;
  em_k_pool2d_backward *pool2d_backward;
  em_k_batch_norm_forward *batch_norm_forward;
  em_k_batch_norm_backward *batch_norm_backward;
  em_k_batch_norm_backward_eval *batch_norm_backward_eval;
  em_k_layer_norm_forward *layer_norm_forward;
  em_k_layer_norm_backward *layer_norm_backward;
  em_k_softmax_forward *softmax_forward;
  em_k_softmax_backward *softmax_backward;
  em_k_cross_entropy_forward *cross_entropy_forward;
  em_k_cross_entropy_backward *cross_entropy_backward;
  em_k_embedding_forward *embedding_forward;
  em_k_embedding_backward *embedding_backward;
  em_k_dropout_mask *dropout_mask;
  em_k_masked_fill *masked_fill;
  em_k_sdpa_forward *sdpa_forward;
  em_k_sdpa_backward *sdpa_backward;
  em_k_sgd_step *sgd_step;
  em_k_adam_step *adam_step;
  em_k_sumsq *sumsq;
  em_k_unscale *unscale;
} em_kernels;

typedef struct em_backend {
  const char *name; /* "cpu", "cuda", "ref" */
  /* Whether float kernels take f64 as well as f32 (the CPU's do: f64 is
   * for gradient checks); the op front-end checks it. */
  bool f64;
  int (*count)(void);
  /* Explains why a device of this kind cannot be used (no driver, none
   * present); called only when count() is 0. */
  void (*why_none)(em_error *err);
  em_status (*info)(int index, em_device_info *out, em_error *err);
  /* 256-byte aligned device memory from the caching allocator, NULL when
   * exhausted (the caller then raises the device error). */
  void *(*alloc)(int index, size_t nbytes);
  void (*free)(int index, void *p, size_t nbytes);
  void (*stats)(int index, em_memory_stats *out);
  void (*reset_peak)(int index);
  void (*release_cached)(int index);
  /* Copies of n bytes, queued in order with the kernels. h2d: on return
   * the caller may reuse src, except pinned memory (em_host_pinned_alloc),
   * whose copy may still be in flight until the stream passes it (CUDA
   * stages pageable memory through pinned buffers instead of waiting).
   * d2h waits for the copy (and so for everything queued before it). */
  void (*memcpy_h2d)(int index, void *dst, const void *src, size_t n);
  void (*memcpy_d2h)(int index, void *dst, const void *src, size_t n);
  void (*memcpy_d2d)(int index, void *dst, const void *src, size_t n);
  void (*synchronize)(int index);
  /* The queue kernels and copies go on (a cudaStream_t), for a library
   * that queues work in their order (NCCL in engine/dist); NULL entry or
   * result: none, the caller synchronizes instead. */
  void *(*stream)(int index);
  /* Page-locked host memory (NULL members: plain host memory). */
  void *(*host_alloc)(size_t nbytes);
  void (*host_free)(void *p);
  const em_kernels *k;
} em_backend;

/* The backend of a device kind (NULL for a kind this build lacks and for
 * a value out of range). Each is defined by its folder: the CPU's in
 * engine/ops/cpu-backend.c (its kernels are the tuned CPU ones), the
 * reference device's in engine/device/ref-*.c, CUDA's in engine/cuda/
 * (or cuda-none.c). A kernel entry may be NULL: the op front-end then
 * reports that the device lacks it. */
const em_backend *em_backend_of_kind(em_device_kind k);
const em_backend *em_cpu_backend(void);
const em_backend *em_ref_backend(void);
const em_backend *em_cuda_backend(void); /* NULL when built without CUDA */
static inline const em_backend *em_backend_of(const em_tensor *t) {
  return em_backend_of_kind((em_device_kind)t->device.kind);
}
static inline const em_kernels *em_kernels_of(const em_tensor *t) { return em_backend_of(t)->k; }

/* ---- kernel status ----------------------------------------------------- */
/* Records msg (printf-style) as the message of the failing kernel on this
 * thread and returns st: a backend's kernel returns through it. */
em_status em_kernel_fail(em_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True for EM_OK. Otherwise raises the thread's device error (unless one
 * is pending), naming the op of em_device_set_op, the kernel entry and the
 * backend's message ("linear: kernel gemm failed: cuBLAS call failed in
 * em_cuda_gemm (engine/cuda, line 120): ... -> ..."), and returns false.
 * From then on ops skip their kernels as after an out-of-memory error
 * (em-device.h); kernels the failing op queues after the failure still
 * run, harmlessly, on its device buffers. */
bool em_kernel_done(const char *entry, em_status st);
/* Calls kernel `entry` of table k and checks its status: the one way
 * engine code calls a kernel. */
#define EM_KCALL(k, entry, ...) em_kernel_done(#entry, (k)->entry(__VA_ARGS__))

/* Device memory through the backend, recording the device error (with
 * `what`, the op's name, and the allocator's state) when it fails.
 * em_device_free also takes CPU memory (em_alloc's, given to em_free), so
 * that callers free a tensor's data wherever it lives with one call. */
void *em_device_alloc(em_device d, size_t nbytes, const char *what);
void em_device_free(em_device d, void *p, size_t nbytes);
/* Makes e the thread's pending device error (unless one is pending). */
void em_device_error_raise(const em_error *e);
/* Names the op whose allocations follow on this thread (for the
 * out-of-memory message); returns the previous name. */
const char *em_device_set_op(const char *op);
