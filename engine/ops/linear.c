/* linear.c: em_linear (x @ w^T + b) and em_linear_relu (the same, then
 * max(., 0), as a Linear layer followed by a ReLU), with their backward
 * passes. Backward writes straight into gradient buffers (beta 0 when the
 * buffer is fresh, 1 when accumulating), so a linear layer's backward is
 * two GEMMs and a column sum with no temporaries; em_linear_relu's masks
 * the incoming gradient first, in the same pass as the bias's column sum.
 * Under bf16 autocast (em-amp.h) both ops, and their backward, use the
 * bf16 GEMM. */
#include "ops-private.h"
#include "em-cpu.h"

#include "em-amp.h"
#include "em-pool.h"

#include <string.h>

/* Column sums of gy (N, K) into db, b's gradient (overwritten when fresh,
 * else added to), in row order; with y, gy is first masked where the
 * ReLU's output y is not above 0 (em_relu's backward: NaN outputs pass
 * the gradient) into g, and the sums are of g. The pool splits the columns
 * in blocks of 16, so the numbers do not depend on the thread count. */
typedef struct {
  em_dtype dt;
  int64_t N, K;
  const void *gy, *y; /* y: the ReLU's output, or NULL (no mask) */
  void *g, *db;       /* g: the masked gy (with y); db: or NULL */
  bool fresh;
} cols_job;

#define COLS(T)                                                                        \
  do {                                                                                 \
    const T *gy = j->gy, *y = j->y;                                                    \
    T *g = j->g, *db = j->db;                                                          \
    for (int64_t i = 0; i < j->N; i++) {                                               \
      const T *r = gy + i * j->K;                                                      \
      if (y) {                                                                         \
        const T *yr = y + i * j->K;                                                    \
        T *o = g + i * j->K;                                                           \
        for (int64_t k = j0; k < j1; k++) o[k] = yr[k] <= (T)0 ? (T)0 : r[k];          \
        r = o;                                                                         \
      }                                                                                \
      if (!db) continue;                                                               \
      if (i == 0 && j->fresh)                                                          \
        for (int64_t k = j0; k < j1; k++) db[k] = r[k];                                \
      else                                                                             \
        for (int64_t k = j0; k < j1; k++) db[k] += r[k];                               \
    }                                                                                  \
  } while (0)

/* Blocks [b0, b1) of 16 columns (each column summed down the rows alone:
 * the same numbers at every vector width). */
EM_CPU_CLONES static void cols_blocks(void *ctx, int64_t b0, int64_t b1) {
  const cols_job *j = ctx;
  int64_t j0 = 16 * b0, j1 = 16 * b1 < j->K ? 16 * b1 : j->K;
  if (j->dt == EM_DTYPE_F32) COLS(float);
  else COLS(double);
}

static void run_cols(cols_job *j) {
  if (j->N == 0 && j->db && j->fresh) /* no rows: a fresh gradient sums nothing */
    memset(j->db, 0, em_dtype_size(j->dt) * (size_t)j->K);
  int64_t blocks = (j->K + 15) / 16; /* at least 4 a thread, and 8192 values in all */
  em_parallel_for(blocks, j->N * j->K >= 8192 ? 4 : blocks, cols_blocks, j);
}

/* The gradients of y = x w^T + b given gy = dL/dy (N, K), contiguous, in
 * n's dtype: into x's and w's gradient buffers by two GEMMs; b's column
 * sums are the caller's (gb_done), or here when it passes false. */
static void linear_grads(em_node *n, em_bf16_kernel kern, const void *gy, bool gb_done) {
  em_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
  em_tensor *xs = n->saved[0]; /* x as handed to BLAS */
  int64_t N = n->out->shape[0], K = n->out->shape[1], D = w->shape[1];
  em_dtype dt = n->out->dtype;
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (gx) /* dx (N, D) = gy (N, K) @ w (K, D) */
    em_gemm_amp(kern, dt, false, false, N, D, K, gy, K, em_tensor_ptr(w), w->stride[0],
                fresh ? 0.0 : 1.0, em_tensor_ptr(gx), D);
  em_tensor *gw = em_grad_acquire(w, &fresh);
  if (gw) { /* dw (K, D) = gy^T (K, N) @ x (N, D) */
    em_blas_operand xo;
    EM_ASSERT(em_blas_operand_of(xs, 0, 1, 0, &xo));
    em_gemm_amp(kern, dt, true, xo.trans, K, D, N, gy, K, xo.ptr, xo.ld, fresh ? 0.0 : 1.0,
                em_tensor_ptr(gw), D);
  }
  em_tensor *gb = b && !gb_done ? em_grad_acquire(b, &fresh) : NULL;
  if (gb) { /* db (K) = column sums of gy */
    cols_job j = {.dt = dt, .N = N, .K = K, .gy = gy, .db = em_tensor_ptr(gb), .fresh = fresh};
    run_cols(&j);
  }
}

static void linear_backward(em_node *n) {
  linear_grads(n, EM_BF16_KERNEL_NONE, em_tensor_ptr(n->out->grad), false);
}
static void linear_backward_bf16(em_node *n) {
  linear_grads(n, em_bf16_kernel_best(), em_tensor_ptr(n->out->grad), false);
}

/* The ReLU's mask and b's gradient in one pass (run_cols), then x's and
 * w's gradients from the masked gy. */
static void linear_relu_backward(em_node *n) {
  em_tensor *y = n->out, *b = n->in[2];
  cols_job j = {.dt = y->dtype, .N = y->shape[0], .K = y->shape[1],
                .gy = em_tensor_ptr(n->out->grad), .y = em_tensor_ptr(y)};
  j.g = em_scratch(em_dtype_size(j.dt) * (size_t)(j.N * j.K));
  em_tensor *gb = b ? em_grad_acquire(b, &j.fresh) : NULL;
  j.db = gb ? em_tensor_ptr(gb) : NULL;
  run_cols(&j);
  linear_grads(n, EM_BF16_KERNEL_NONE, j.g, true);
}

/* y = x w^T + b, then max(y, 0) when relu; the autograd node is recorded
 * as `name`. */
static em_tensor *linear_apply(const char *name, em_tensor *x, em_tensor *w, em_tensor *b,
                               bool relu) {
  EM_ASSERT(x->ndim == 2 && w->ndim == 2 && x->shape[1] == w->shape[1]);
  EM_ASSERT(EM_IS_FLOAT(x) && x->dtype == w->dtype);
  EM_ASSERT(w->stride[1] == 1 || w->shape[1] == 1);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0] && b->dtype == x->dtype);
  EM_OP_BEGIN(name, 3, x, w, b);
  int64_t N = x->shape[0], D = x->shape[1], K = w->shape[0];
  em_tensor *xs = em_blas_ready(x, 0, 1); /* a copy outside autograd when BLAS needs one */
  em_blas_operand xo;
  EM_ASSERT(em_blas_operand_of(xs, 0, 1, 0, &xo));
  int64_t shape[2] = {N, K};
  em_tensor *y = em_empty(x->dtype, 2, shape);
  em_bf16_kernel kern = relu ? EM_BF16_KERNEL_NONE : em_autocast_kernel();
  const void *wp = em_tensor_ptr(w);
  int64_t ldw = w->shape[1] == 1 ? 1 : w->stride[0];
  const void *bp = b ? em_tensor_ptr(em_blas_ready(b, 0, 0)) : NULL; /* (K) contiguous */
  if (kern == EM_BF16_KERNEL_NONE || x->dtype != EM_DTYPE_F32) {
    em_gemm_bias(x->dtype, xo.trans, true, N, K, D, xo.ptr, xo.ld, wp, ldw, bp, relu,
                 em_tensor_ptr(y), K);
  } else { /* bf16 products: the bias in every row first, then y += x w^T */
    if (bp) em_fill_rows(em_tensor_ptr(y), N, K, K, bp, sizeof(float));
    em_gemm_amp(kern, x->dtype, xo.trans, true, N, K, D, xo.ptr, xo.ld, wp, ldw, bp ? 1.0 : 0.0,
                em_tensor_ptr(y), K);
  }
  em_tensor *ins[3] = {x, w, b};
  if (em_needs_grad(3, ins)) {
    bool amp = kern != EM_BF16_KERNEL_NONE && x->dtype == EM_DTYPE_F32;
    em_node *nd = em_record(name,
                            relu  ? linear_relu_backward
                            : amp ? linear_backward_bf16
                                  : linear_backward,
                            y, 3, ins);
    nd->saved[0] = xs;
  }
  return EM_OP_END(y);
}

em_tensor *em_linear(em_tensor *x, em_tensor *w, em_tensor *b) {
  if (EM_ON_DEVICE(x, w, b)) return em_dev_linear(x, w, b);
  return linear_apply("linear", x, w, b, false);
}

em_tensor *em_linear_relu(em_tensor *x, em_tensor *w, em_tensor *b) {
  /* the two ops on a device, under bf16 autocast (its GEMM has no ReLU),
   * and in anomaly mode, which checks every op's output: the Linear's own
   * must be seen (the ReLU would turn a -inf there into 0) */
  if (EM_ON_DEVICE(x, w, b) || em_anomaly_enabled() ||
      (em_autocast_kernel() != EM_BF16_KERNEL_NONE && x->dtype == EM_DTYPE_F32))
    return em_relu(em_linear(x, w, b));
  return linear_apply("linear_relu", x, w, b, true);
}
