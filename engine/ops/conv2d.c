/* conv2d.c: em_conv2d, em_conv2d_relu (the same, then max(., 0) in
 * place: a Conv2d layer followed by a ReLU that alone reads it) and their
 * autograd nodes.
 *
 * f32 runs the fast path of the CPU kernel table (cpu-kernels.h:
 * conv-fast.c, which hands 3x3 stride-1 convolutions to conv-winograd.c,
 * in the processor's instruction set), f64 the loop reference (conv-ref.c);
 * em_conv2d_ref runs the reference for either, for tests.
 * Backward computes only the gradients that are wanted: the first layer
 * of a network, whose input needs no grad, never pays for dX. */
#include "cpu-kernels.h"

#include "em-cpu.h"
#include "em-pool.h"

/* Multiply-adds of one direct convolution, times two: forward, dX and
 * dW each do this many (Winograd does fewer; the nominal count is what
 * FLOP rates are quoted in). */
static double conv_flops(const em_conv_geom *g) {
  return 2.0 * (double)g->N * (double)g->K * (double)g->OH * (double)g->OW * (double)g->Cg *
         (double)g->kh * (double)g->kw;
}

/* in: x, w, b (or NULL); saved[0]: x as the forward read it; gy: the
 * gradient of the convolution's own output. */
static void conv2d_grads(em_node *n, em_tensor *gy, bool ref) {
  em_tensor *xs = n->saved[0], *w = n->in[1], *b = n->in[2];
  em_conv_grads gr = {0};
  gr.gx = em_grad_acquire(n->in[0], &gr.gx_fresh);
  gr.gw = em_grad_acquire(w, &gr.gw_fresh);
  gr.gb = b ? em_grad_acquire(b, &gr.gb_fresh) : NULL;
  if (!gr.gx && !gr.gw && !gr.gb) return;
  em_conv2d_params p = em_conv2d_params_load(n);
  em_conv_geom g;
  em_conv_geom_init(&g, xs, w, &p);
  em_op_add_flops(((gr.gx != NULL) + (gr.gw != NULL)) * conv_flops(&g)); /* dX and dW GEMMs */
  if (ref) em_conv2d_ref_backward(&g, xs, w, gy, &gr);
  else em_cpu_kernels_get()->conv2d_backward(&g, xs, w, gy, &gr);
}

static void conv2d_backward_fast(em_node *n) { conv2d_grads(n, n->out->grad, false); }
static void conv2d_backward_ref(em_node *n) { conv2d_grads(n, n->out->grad, true); }

/* ---- the ReLU after it, in place ---------------------------------------------- */

/* Values [i0, i1) of y: y = y < 0 ? 0 : y (em_relu's rule: NaN and -0
 * pass); with gy, g = y <= 0 ? 0 : gy instead (its backward, from the
 * output: NaN outputs pass the gradient). In blocks of 4096 values. */
typedef struct {
  em_dtype dt;
  int64_t n;
  void *y;
  const void *gy;
  void *g;
} relu_job;

#define RELU_BLOCK 4096

#define RELU_LOOP(T)                                                     \
  do {                                                                   \
    T *y = j->y;                                                         \
    if (j->gy) {                                                         \
      const T *gy = j->gy;                                               \
      T *g = j->g;                                                       \
      for (int64_t i = i0; i < i1; i++) g[i] = y[i] <= (T)0 ? (T)0 : gy[i]; \
    } else {                                                             \
      for (int64_t i = i0; i < i1; i++) y[i] = y[i] < (T)0 ? (T)0 : y[i]; \
    }                                                                    \
  } while (0)

EM_CPU_CLONES static void relu_blocks(void *ctx, int64_t b0, int64_t b1) {
  const relu_job *j = ctx;
  int64_t i0 = b0 * RELU_BLOCK, i1 = b1 * RELU_BLOCK < j->n ? b1 * RELU_BLOCK : j->n;
  if (j->dt == EM_DTYPE_F32) RELU_LOOP(float);
  else RELU_LOOP(double);
}

static void run_relu(relu_job *j) {
  int64_t blocks = (j->n + RELU_BLOCK - 1) / RELU_BLOCK;
  em_parallel_for(blocks, 8, relu_blocks, j);
}

/* The ReLU's mask on the incoming gradient (into scratch), then the
 * convolution's gradients from it. */
static void conv2d_relu_backward_with(em_node *n, bool ref) {
  em_tensor *y = n->out;
  relu_job j = {.dt = y->dtype, .n = em_tensor_numel(y), .y = em_tensor_ptr(y),
                .gy = em_tensor_ptr(y->grad)};
  j.g = em_scratch(em_dtype_size(j.dt) * (size_t)j.n);
  run_relu(&j);
  conv2d_grads(n, em_tensor_wrap(y->dtype, y->ndim, y->shape, j.g), ref);
}

static void conv2d_relu_backward_fast(em_node *n) { conv2d_relu_backward_with(n, false); }
static void conv2d_relu_backward_ref(em_node *n) { conv2d_relu_backward_with(n, true); }

static em_tensor *conv2d_run(em_tensor *x /* (N, C, H, W) */,
                             em_tensor *w /* (K, C/groups, kh, kw) */,
                             em_tensor *b /* (K) or NULL */, const em_conv2d_params *p,
                             bool ref, bool relu) {
  if (EM_ON_DEVICE(x, w, b)) return em_dev_conv2d(x, w, b, p);
  EM_ASSERT(p && x->ndim == 4 && w->ndim == 4);
  EM_ASSERT(EM_IS_FLOAT(x) && w->dtype == x->dtype);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0] && b->dtype == x->dtype);
  const char *name = relu ? "conv2d_relu" : "conv2d";
  EM_OP_BEGIN(name, 3, x, w, b);
  em_conv_geom g;
  em_conv_geom_init(&g, x, w, p);
  em_op_add_flops(conv_flops(&g));
  ref = ref || x->dtype != EM_DTYPE_F32;
  em_tensor *xs = x; /* what forward reads and backward keeps */
  if (!ref && !em_tensor_is_contiguous(x)) {
    xs = em_empty(x->dtype, 4, x->shape);
    em_tensor_copy_(xs, x);
  }
  int64_t shape[4] = {g.N, g.K, g.OH, g.OW};
  em_tensor *y = em_empty(x->dtype, 4, shape); /* (N, K, OH, OW) */
  if (ref) em_conv2d_ref_forward(&g, xs, w, b, y);
  else em_cpu_kernels_get()->conv2d_forward(&g, xs, w, b, y);
  if (relu) {
    relu_job j = {.dt = y->dtype, .n = em_tensor_numel(y), .y = em_tensor_ptr(y)};
    run_relu(&j);
  }
  em_tensor *ins[3] = {x, w, b};
  if (em_needs_grad(3, ins)) {
    em_backward_fn bw = relu ? (ref ? conv2d_relu_backward_ref : conv2d_relu_backward_fast)
                             : (ref ? conv2d_backward_ref : conv2d_backward_fast);
    em_node *nd = em_record(name, bw, y, 3, ins);
    nd->saved[0] = xs;
    em_conv2d_params_save(nd, p);
  }
  return EM_OP_END(y);
}

em_tensor *em_conv2d(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  return conv2d_run(x, w, b, p, false, false);
}

em_tensor *em_conv2d_relu(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  /* the two ops on a device, and in anomaly mode, which checks every op's
   * output: the convolution's own must be seen (the ReLU would turn a
   * -inf there into 0) */
  if (EM_ON_DEVICE(x, w, b) || em_anomaly_enabled()) return em_relu(em_conv2d(x, w, b, p));
  return conv2d_run(x, w, b, p, false, true);
}

em_tensor *em_conv2d_ref(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  return conv2d_run(x, w, b, p, true, false);
}
