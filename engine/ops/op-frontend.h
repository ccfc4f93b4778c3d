/* op-frontend.h: the one op front-end of libember (issue 24, item 1).
 *
 * An op is written once for every device. Its front-end function (one
 * file per op family in engine/ops/) does, in this order:
 *
 *   OP_BEGIN(name, n, inputs...)   every input on one device (a mismatch
 *                                  names the op and both devices), float
 *                                  inputs of a dtype that device's backend
 *                                  takes (f32 everywhere, f64 on the CPU),
 *                                  the profiler span, the op's name for
 *                                  the out-of-memory message
 *   y = op_empty(x, ...)           outputs on the inputs' device
 *   k = OP_KERNEL(x, entry)        the backend's kernel, or the error
 *                                  "em_relu: ref:0 has no kernel 'unary'"
 *   if (op_live(...))              the out-of-memory rule (em-device.h)
 *     op_check(k(...), "entry")    a kernel's status: a failure becomes
 *                                  the thread's sticky device error,
 *                                  naming the op and the failed call
 *     em_record(...)               the tape node, and its backward,
 *                                  written once, in kernels and ops
 *   return OP_END(y)
 *
 * Every device kind, the CPU included, is a backend: a table of memory,
 * copies and kernels (em-backend.h), em_backend_of_kind(kind). The CPU's
 * table holds its tuned kernels (the AVX-512/AVX2/AMX GEMM, Winograd,
 * the fused linear+ReLU pass, the vectorised element rows), chosen at
 * start-up (cpu-kernels.h); the reference device's holds host loops over
 * the shared kernel bodies (engine/device/kernels/), CUDA's its .cu files.
 * A backend may leave an entry NULL: the op then reports which kernel the
 * device lacks instead of crashing. Kernels only compute and return a
 * status; they never allocate outputs, check user input or touch the
 * tape.
 *
 * What a new op touches: its declaration in em-ops.h; its front-end
 * function in the family's file here (checks, outputs, tape, backward);
 * one kernel entry in em-backend.h when no existing entry fits; one
 * kernel per backend that has it (engine/ops/cpu-<family>.c,
 * engine/device/ref-*.c, engine/cuda/cuda-*.cu, the body shared by ref
 * and CUDA in engine/device/kernels/); its tests. CONTRIBUTING.md has
 * the list.
 *
 * Where the tree stands. On the front-end, one function per op for every
 * device, the backward once:
 *   - the one-input element-wise family (neg, the scalar maps, pow, exp,
 *     log, sqrt, abs, clamp, the activations): unary.c over cpu-unary.c;
 *   - the broadcasting binary ops (add, sub, mul, div): elementwise.c
 *     over cpu-binary.c;
 *   - dropout: dropout.c over the dropout_mask kernel (the CPU's in
 *     cpu-random.c) and binary; every backend draws its mask from the one
 *     counter-based generator (engine/device/kernels/kern-random.h), so a
 *     seed gives the same mask on the CPU and on every device;
 *   - embedding: embedding.c over cpu-embedding.c;
 *   - masked_fill: masked-fill.c over cpu-masked-fill.c (the op added
 *     through CONTRIBUTING.md's recipe, with a kernel entry of its own);
 *   - sdpa: sdpa.c over the sdpa_forward / sdpa_backward entries (the
 *     CPU's tiled FlashAttention-2 kernel, cpu-sdpa.c; the reference
 *     device's and CUDA's rows over kernels/kern-attention.h): the fused
 *     attention, which keeps one log-sum-exp per query row for backward
 *     instead of the (N, H, L, S) weights and regenerates its dropout
 *     mask from the counter-based generator; em_sdpa_packed runs the
 *     same entries over strided views of a packed (N, L, 3 H E)
 *     projection, its output and qkv's gradient, so that attention
 *     layers copy no head apart or together;
 *   - the reductions (sum, mean, sum_all, mean_all, max, argmax):
 *     reduce.c over cpu-reduce.c's reduce (and max's backward over the
 *     embedding_backward scatter);
 *   - softmax and log_softmax: softmax.c over cpu-softmax.c;
 *   - the views, contiguous, concat and cast: views.c (the views change
 *     metadata only; the rest copies through the copy kernel, the CPU's
 *     in cpu-copy.c);
 *   - conv2d and conv2d_relu: conv2d.c over cpu-conv.c (the fast paths of
 *     cpu-kernels.h, Winograd among them, for f32; the loop reference for
 *     f64), the fused ReLU in place through the unary kernel;
 *   - max_pool2d and avg_pool2d: pool2d.c over cpu-pool.c (the plane
 *     loops and pool-fast.c's 2x2 rows; the positions of the maxima go
 *     from forward to backward in the entries' idx tensor);
 *   - batch_norm and layer_norm: norm.c over cpu-norm.c (the vectorised
 *     per-channel and per-row passes; the statistics saved in f64 on a
 *     backend that takes f64, so the CPU's backward reads the doubles its
 *     forward computed). Eval-mode batch norm backward is the optional
 *     batch_norm_backward_eval (the CPU's), else composed from binary and
 *     sum_to kernels (ref, CUDA).
 * The geometry of convolutions and pools (em_conv_geom, em_pool_geom) is
 * engine/device/kernels/conv-geom.h, and their loop references, which
 * the reference device and the CPU's f64 share, kernels/conv-ref.c and
 * pool-ref.c (conv-ref.h).
 *   - matmul, linear and linear_relu: matmul.c and linear.c over the
 *     batched gemm kernel (which takes the dtype: f64 on the CPU) and two
 *     optional entries, gemm_bias (the bias, and the ReLU, in the GEMM's
 *     epilogue) and bias_backward (the column sums, with the ReLU's mask
 *     for linear_relu): without them linear is copy + gemm and sum_to,
 *     and linear_relu is relu(linear). The CPU's (cpu-linalg.c) are
 *     gemm.c's products: gemv-fast.c for one row, gemm-fast.c's AVX-512 /
 *     AVX2 kernels, the bf16 GEMM (AMX, AVX512-BF16) under autocast,
 *     OpenBLAS otherwise. The front-end opens the profiler's "gemm" span
 *     around each call, for every device;
 *   - cross_entropy and mse_loss: loss.c over the cross_entropy kernels
 *     (the CPU's in cpu-loss.c) and, for mse, binary, sumsq and unary.
 *     The cross_entropy entries keep one log-sum-exp per row and
 *     backward takes exp(x - lse). The CPU used to keep the pair
 *     (shift c, ls = log sum exp(x - c)) and take exp((x - c) - ls); it
 *     now stores lse = c + ls, one more rounding (half an ulp of lse in
 *     the exponent: a relative error of about |lse| * 6e-8 in each f32
 *     gradient entry), so that one form serves every backend and the ref
 *     and CUDA kernels keep theirs; its forward (the blocked, vectorised
 *     rows) is unchanged. Every existing test passes with it unchanged in
 *     what it asserts; f64 (the gradient checks) stores lse in f64. mse on the CPU now writes d = a - b once and sums its
 *     squares (64 fixed parts in double, as before); the loss is that
 *     sum, rounded to f32, times 1 / n, where it was rounded once.
 * The gradient copies and adds every backward uses (em_grad_add,
 * em_reduce_to_shape, em_add_into, the gradient buffers of kernels that
 * write, ...) serve every device from engine/core/grad-accumulate.c
 * through the copy, binary and sum_to kernels (the CPU's in cpu-copy.c,
 * cpu-binary.c, cpu-reduce.c); shapes, broadcasting, reshaped views and
 * GEMM operands (em_blas_operand_of) are engine/core/shape.c, the
 * convolution and pooling parameters of a tape node
 * engine/core/node-params.c.
 *
 * Still to convert: nothing. Every op family is on the front-end; the
 * device-generic op layer (engine/device/dev-*.c, dev-ops.h, with each
 * backward written a second time) is gone.
 *
 * No folder of the engine includes another folder's private header:
 * what one module shows another is a header of its own (engine/nn's
 * nn-spec.h for export and the plugin host, engine/quant's quant-layer.h
 * for the model and export), and the reference device runs its GEMM
 * through the CPU backend's table. */
#pragma once

#include "em-backend.h"
#include "em-ops.h"
#include "em-profile.h"

#include <stdbool.h>

/* Checks the tensors of op `name` (NULL entries skipped): all on the
 * device of the first ("em_add: inputs on ref:0 and cpu: move one with
 * em_to_device"), and float ones of a dtype that device's backend takes
 * ("em_relu on ref:0 supports f32, got f64"). Both are broken invariants
 * (the layer and trainer code moves and casts data explicitly). Integer
 * inputs are the op's to check. */
void em_op_check(const char *name, int n, em_tensor *const *ts);
/* The device half of em_op_check, for ops of any dtype (copies, casts,
 * concat). */
void em_op_check_device(const char *name, int n, em_tensor *const *ts);
/* False when kernels must be skipped: the device error is pending, or a
 * tensor (NULL entries skipped) has no data (em-device.h). */
bool em_op_live(int n, em_tensor *const *ts);
/* False, with the device error raised ("em_relu: ref:0 has no kernel
 * 'unary'"), when the backend of t left kernel `entry` NULL. */
bool em_op_has_(const void *kernel, const char *entry, const char *op, const em_tensor *t);

#define OP_TS(...) (int)(sizeof((em_tensor *const[]){__VA_ARGS__}) / sizeof(em_tensor *)), \
                   (em_tensor *const[]){__VA_ARGS__}
#define op_live(...) em_op_live(OP_TS(__VA_ARGS__))
/* Whether t's backend has kernel `entry` (k: its table). */
#define OP_HAS(k, entry, op, t) em_op_has_((const void *)(k)->entry, #entry, (op), (t))

#define OP_BEGIN(name, n, ...)                                                  \
  em_op_check((name), (n), (em_tensor *const[]){__VA_ARGS__});                  \
  EM_OP_BEGIN((name), (n), __VA_ARGS__);                                        \
  const char *const op_prev_name_ = em_device_set_op(name)
/* OP_BEGIN for ops of any dtype: the device check only. */
#define OP_BEGIN_ANY(name, n, ...)                                              \
  em_op_check_device((name), (n), (em_tensor *const[]){__VA_ARGS__});           \
  EM_OP_BEGIN((name), (n), __VA_ARGS__);                                        \
  const char *const op_prev_name_ = em_device_set_op(name)
#define OP_END(y) (em_device_set_op(op_prev_name_), EM_OP_END(y))

/* The kernel table of t's device. */
static inline const em_kernels *op_k(const em_tensor *t) { return em_kernels_of(t); }
/* Scoped outputs on like's device. */
static inline em_tensor *op_empty_like(const em_tensor *t) {
  return em_empty_on(t->device, t->dtype, t->ndim, t->shape);
}
/* Names the op of a backward function for the device error; returns the
 * previous name for em_device_set_op. */
static inline const char *op_backward_begin(const em_node *n) { return em_device_set_op(n->op); }
