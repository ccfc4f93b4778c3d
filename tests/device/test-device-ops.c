/* test-device-ops.c: every op of em-ops.h on a device against the same op
 * on the CPU: forward values, and the input gradients of a backward pass
 * with a random upstream gradient (inputs reach the device through
 * em_to_device, so the gradients come back through its backward too).
 * Shapes cover broadcasting, strided inputs (transposed, sliced views),
 * batched and broadcast matmul, convolution with stride, padding,
 * dilation and groups, pooling with padding, batch norm in training
 * (running stats compared) and eval, label smoothing, repeated embedding
 * indices, masked_fill with broadcast and causal masks, and autocast;
 * dropout is checked for its rate, its scaling and its determinism, and
 * its mask against the CPU's for the same seed. Also: a CPU/device mix is
 * a broken invariant naming both devices, f64 on a device is refused,
 * and out of device memory
 * (ref only, EMBER_REF_DEVICE_MEMORY in a subprocess) leaves the sticky
 * error naming the op while the rest of the step runs harmlessly.
 *
 * The device is EMBER_TEST_DEVICE ("ref" when unset; the 'gpu' suite
 * sets "cuda"); the test exits 77 (skip) when it is unavailable. */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-amp.h"
#include "em-device.h"
#include "em-profile.h"
#include "gradcheck.h"

static em_device dev;
static const em_device cpu = {EM_DEVICE_CPU, 0};

typedef struct {
  double rtol, atol;
} tol;
static const tol T_ELEM = {1e-5, 1e-6};  /* element-wise */
static const tol T_RED = {1e-4, 1e-5};   /* sums, norms, softmax */
static const tol T_GEMM = {2e-4, 2e-4};  /* GEMM and convolution sums */
static const tol T_AMP = {2e-2, 2e-2};   /* bf16 operands against f32 */
/* bf16 operands on both sides (the CPU autocasts linear and matmul on its
 * bf16 kernel or, without bf16 instructions, the emulation; only
 * EMBER_BF16_KERNEL=none keeps it f32): the same products, summed in
 * another order */
static const tol T_AMP_BOTH = {1e-4, 1e-4};

/* ---- helpers --------------------------------------------------------------------- */

/* Element k (row-major) of t, any device, dtype and strides, as a double
 * (needs a scope for a device tensor). */
static double *values_of(em_tensor *t, int64_t *n) {
  em_tensor *h = em_on_device(t) ? em_to_device(t, cpu) : t;
  *n = em_tensor_numel(h);
  double *v = g_new(double, *n > 0 ? *n : 1);
  for (int64_t k = 0; k < *n; k++) {
    int64_t idx[EM_MAX_DIMS], r = k;
    for (int d = h->ndim - 1; d >= 0; d--) {
      idx[d] = r % h->shape[d];
      r /= h->shape[d];
    }
    v[k] = em_tensor_get(h, idx);
  }
  return v;
}

static void assert_close(const char *what, const char *part, const double *dv, const double *cv,
                         int64_t n, tol t) {
  for (int64_t k = 0; k < n; k++) {
    double x = dv[k], y = cv[k];
    if (isnan(x) && isnan(y)) continue;
    if (x == y || fabs(x - y) <= t.atol + t.rtol * fabs(y)) continue;
    g_error("%s, %s: element %lld: device %.9g vs cpu %.9g", what, part, (long long)k, x, y);
  }
}

static em_tensor *rand_t(int ndim, const int64_t *shape, double lo, double hi, unsigned seed,
                         bool grad) {
  return gc_rand(EM_DTYPE_F32, ndim, shape, lo, hi, seed, grad);
}

static em_tensor *index_t(int ndim, const int64_t *shape, const int64_t *v) {
  em_tensor *t = em_tensor_new(EM_DTYPE_I64, ndim, shape, NULL);
  memcpy(em_i64(t), v, sizeof(int64_t) * (size_t)em_tensor_numel(t));
  return t;
}

/* A persistent copy of t on d. */
static em_tensor *clone_on(const em_tensor *t, em_device d) {
  em_error err;
  em_tensor *c = em_tensor_new(t->dtype, t->ndim, t->shape, &err);
  em_tensor_copy_(c, t);
  em_tensor_set_requires_grad(c, em_tensor_requires_grad(t));
  g_assert_cmpint(em_tensor_move_(c, d, &err), ==, EM_OK);
  return c;
}

typedef em_tensor *(*op_fn)(em_tensor **in, void *ctx);

/* When set, every op runs twice and the outputs are added, so that the
 * second backward of each op accumulates into gradients the first wrote
 * (the fresh/accumulate paths of every backward). */
static bool twice;

static em_tensor *run_op(op_fn f, em_tensor **in, void *ctx) {
  em_tensor *y = f(in, ctx);
  if (!twice || y->dtype != EM_DTYPE_F32) return y;
  return em_add(y, f(in, ctx));
}

/* Runs f on the CPU inputs and on their copies moved to the device (with
 * em_to_device), compares the outputs, then backward with one random
 * upstream gradient on both and compares the input gradients. */
static void check_op(const char *what, op_fn f, void *ctx, int n, em_tensor **in, tol tf,
                     tol tb) {
  em_tensor *clones[8];
  g_assert_cmpint(n, <=, 8);
  for (int i = 0; i < n; i++) clones[i] = clone_on(in[i], cpu);

  em_scope *s = em_scope_begin();
  em_tensor *yc = run_op(f, in, ctx);
  int64_t ny;
  double *vc = values_of(yc, &ny);
  em_tensor *R = NULL;
  bool grad = em_tensor_requires_grad(yc);
  em_tensor shape_c = *yc; /* yc's struct goes with its scope */
  if (grad) {
    R = rand_t(yc->ndim, yc->shape, -1, 1, 97, false);
    em_backward_grad(yc, R);
  }
  em_scope_end(s);

  s = em_scope_begin();
  em_tensor *din[8];
  for (int i = 0; i < n; i++) din[i] = em_to_device(clones[i], dev);
  em_tensor *yd = run_op(f, din, ctx);
  g_assert_true(em_device_eq(yd->device, dev));
  g_assert_cmpint(yd->ndim, ==, shape_c.ndim);
  for (int d = 0; d < yd->ndim; d++) g_assert_cmpint(yd->shape[d], ==, shape_c.shape[d]);
  g_assert_cmpint(yd->dtype, ==, shape_c.dtype);
  int64_t nd;
  double *vd = values_of(yd, &nd);
  g_assert_cmpint(nd, ==, ny);
  assert_close(what, "forward", vd, vc, ny, tf);
  g_assert_true(em_tensor_requires_grad(yd) == grad);
  if (grad) em_backward_grad(yd, em_to_device(R, dev));
  g_assert_false(em_device_error_pending());
  em_scope_end(s);

  for (int i = 0; i < n; i++) {
    if (!grad || !em_tensor_requires_grad(in[i]) || !in[i]->grad) continue;
    if (!clones[i]->grad) g_error("%s: no gradient reached input %d on the device", what, i);
    int64_t na, nb;
    double *ga = values_of(clones[i]->grad, &na), *gb = values_of(in[i]->grad, &nb);
    char part[32];
    snprintf(part, sizeof part, "gradient of input %d", i);
    assert_close(what, part, ga, gb, na, tb);
    g_free(ga);
    g_free(gb);
    em_tensor_zero_grad(in[i]);
  }
  g_free(vc);
  g_free(vd);
  em_tensor_free(R);
  for (int i = 0; i < n; i++) em_tensor_free(clones[i]);
}

static void free_all(int n, em_tensor **t) {
  for (int i = 0; i < n; i++) em_tensor_free(t[i]);
}

/* ---- views ------------------------------------------------------------------------ */

static em_tensor *f_views(em_tensor **in, void *ctx) {
  int which = GPOINTER_TO_INT(ctx);
  em_tensor *x = in[0]; /* (4, 6, 5) */
  switch (which) {
  case 0: return em_reshape(em_transpose(x, 0, 2), 2, (int64_t[]){10, -1}); /* copies */
  case 1: return em_flatten(em_slice(x, 1, 1, 6, 2), 1);
  case 2: return em_permute(x, (int[]){2, 0, 1});
  case 3: return em_expand(em_slice(x, 0, 1, 2, 1), 3, (int64_t[]){3, 6, 5});
  case 4: return em_contiguous(em_transpose(x, 1, 2));
  case 5: {
    em_tensor *parts[3] = {x, em_slice(x, 1, 0, 2, 1), em_mul_scalar(x, 2.0)};
    return em_concat(3, parts, 1);
  }
  case 6: return em_cast(em_cast(x, EM_DTYPE_F64), EM_DTYPE_F32);
  default: return em_cast(em_mul_scalar(x, 3.0), EM_DTYPE_I64); /* no grad */
  }
}

static void test_views(void) {
  em_tensor *x = rand_t(3, (int64_t[]){4, 6, 5}, -2, 2, 1, true);
  const char *names[8] = {"reshape", "flatten(slice)", "permute", "expand(slice)", "contiguous",
                          "concat", "cast", "cast to i64"};
  for (int k = 0; k < 8; k++) check_op(names[k], f_views, GINT_TO_POINTER(k), 1, &x, T_ELEM, T_ELEM);
  em_tensor_free(x);
}

/* ---- element-wise --------------------------------------------------------------------- */

static em_tensor *(*const bin_ops[4])(em_tensor *, em_tensor *) = {em_add, em_sub, em_mul,
                                                                    em_div};

static em_tensor *f_binary(em_tensor **in, void *ctx) {
  int k = GPOINTER_TO_INT(ctx);
  return bin_ops[k % 4](k >= 4 ? em_transpose(in[0], 0, 1) : in[0], in[1]);
}

static void test_binary(void) {
  const char *names[4] = {"add", "sub", "mul", "div"};
  struct {
    int na, nb;
    int64_t sa[3], sb[3];
  } cases[] = {
      {2, 2, {3, 4}, {3, 4}},       /* same shape */
      {2, 1, {3, 4}, {4}},          /* bias */
      {1, 2, {4}, {3, 4}},          /* broadcast first */
      {3, 2, {2, 1, 4}, {3, 1}},    /* both broadcast */
      {2, 0, {3, 4}, {0}},          /* a 0-dim tensor */
      {2, 2, {4, 3}, {1, 4}},       /* a transposed (f_binary, op >= 4) */
  };
  for (size_t c = 0; c < G_N_ELEMENTS(cases); c++)
    for (int k = 0; k < 4; k++) {
      em_tensor *in[2] = {rand_t(cases[c].na, cases[c].sa, -2, 2, 10 + (unsigned)c, true),
                          rand_t(cases[c].nb, cases[c].sb, 0.5, 2, 20 + (unsigned)c, true)};
      char what[64];
      snprintf(what, sizeof what, "%s case %zu", names[k], c);
      int op = c == 5 ? k + 4 : k;
      check_op(what, f_binary, GINT_TO_POINTER(op), 2, in, T_ELEM, T_ELEM);
      free_all(2, in);
    }
}

typedef struct {
  int op;
  double p;
  bool strided;
} unary_ctx;

static em_tensor *f_unary(em_tensor **in, void *vctx) {
  const unary_ctx *c = vctx;
  em_tensor *x = c->strided ? em_slice(em_transpose(in[0], 0, 1), 0, 0, 7, 2) : in[0];
  switch (c->op) {
  case 0: return em_neg(x);
  case 1: return em_add_scalar(x, c->p);
  case 2: return em_mul_scalar(x, c->p);
  case 3: return em_pow_scalar(x, c->p);
  case 4: return em_exp(x);
  case 5: return em_log(x);
  case 6: return em_sqrt(x);
  case 7: return em_abs(x);
  case 8: return em_clamp(x, -0.5, c->p);
  case 9: return em_relu(x);
  case 10: return em_gelu(x);
  case 11: return em_silu(x);
  case 12: return em_sigmoid(x);
  case 13: return em_tanh(x);
  default: return em_gelu_tanh(x);
  }
}

static void test_unary(void) {
  const char *names[15] = {"neg", "add_scalar", "mul_scalar", "pow_scalar", "exp", "log", "sqrt",
                           "abs", "clamp", "relu", "gelu", "silu", "sigmoid", "tanh", "gelu_tanh"};
  for (int op = 0; op < 15; op++)
    for (int strided = 0; strided < 2; strided++) {
      bool positive = op == 3 || op == 5 || op == 6;
      em_tensor *x = rand_t(2, (int64_t[]){5, 7}, positive ? 0.2 : -2, 2, 30 + (unsigned)op, true);
      double ps[5] = {2.0, 3.0, 0.5, -1.0, 1.7};
      int np = op == 3 ? 5 : 1;
      for (int i = 0; i < np; i++) {
        unary_ctx c = {op, op == 3 ? ps[i] : op == 8 ? 0.75 : 1.25, strided};
        char what[64];
        snprintf(what, sizeof what, "%s(p %g)%s", names[op], c.p, strided ? " strided" : "");
        check_op(what, f_unary, &c, 1, &x, T_ELEM, T_ELEM);
      }
      em_tensor_free(x);
    }
}

/* ---- reductions -------------------------------------------------------------------------- */

typedef struct {
  int op, dim;
  bool keepdim, strided;
} red_ctx;

static em_tensor *f_reduce(em_tensor **in, void *vctx) {
  const red_ctx *c = vctx;
  em_tensor *x = c->strided ? em_transpose(in[0], 0, 2) : in[0];
  switch (c->op) {
  case 0: return em_sum(x, c->dim, c->keepdim);
  case 1: return em_mean(x, c->dim, c->keepdim);
  case 2: return em_sum_all(x);
  case 3: return em_mean_all(x);
  case 4: {
    em_tensor *pos;
    em_tensor *y = em_max(x, c->dim, c->keepdim, &pos);
    g_assert_true(pos->dtype == EM_DTYPE_I64 && pos->ndim == y->ndim);
    return em_add(y, em_cast(pos, EM_DTYPE_F32)); /* both compared */
  }
  default: return em_argmax(x, c->dim, c->keepdim);
  }
}

static void test_reduce(void) {
  const char *names[6] = {"sum", "mean", "sum_all", "mean_all", "max", "argmax"};
  em_tensor *x = rand_t(3, (int64_t[]){3, 4, 5}, -2, 2, 40, true);
  for (int op = 0; op < 6; op++)
    for (int dim = -1; dim < 3; dim++)
      for (int keep = 0; keep < 2; keep++)
        for (int strided = 0; strided < 2; strided++) {
          if (op == 2 || op == 3) {
            if (dim != 0 || keep) continue;
          }
          red_ctx c = {op, dim, keep != 0, strided != 0};
          char what[64];
          snprintf(what, sizeof what, "%s(dim %d, keepdim %d)%s", names[op], dim, keep,
                   strided ? " strided" : "");
          check_op(what, f_reduce, &c, 1, &x, T_RED, T_RED);
        }
  em_tensor_free(x);
}

/* ---- linear algebra ------------------------------------------------------------------------- */

typedef struct {
  int kind; /* 0 matmul, 1 matmul of a transposed a, 2 linear, 3 linear without bias, 4 linear of a transposed x */
  em_amp_mode amp;
} mm_ctx;

static em_tensor *f_mm(em_tensor **in, void *vctx) {
  const mm_ctx *c = vctx;
  em_amp_mode prev = em_autocast_begin(c->amp);
  em_tensor *y;
  switch (c->kind) {
  case 0: y = em_matmul(in[0], in[1]); break;
  case 1: y = em_matmul(em_transpose(in[0], -1, -2), in[1]); break;
  case 2: y = em_linear(in[0], in[1], in[2]); break;
  case 3: y = em_linear(in[0], in[1], NULL); break;
  default: y = em_linear(em_transpose(in[0], 0, 1), in[1], in[2]); break;
  }
  em_autocast_restore(prev);
  return y;
}

static void test_matmul(void) {
  struct {
    int na, nb;
    int64_t sa[4], sb[4];
    int kind;
  } cases[] = {
      {2, 2, {5, 7}, {7, 3}, 0},             /* 2-D */
      {3, 3, {2, 5, 7}, {2, 7, 3}, 0},       /* batched */
      {4, 3, {2, 1, 5, 7}, {3, 7, 4}, 0},    /* batch dims broadcast */
      {3, 2, {2, 5, 7}, {7, 3}, 0},          /* batched a, 2-D b */
      {3, 3, {1, 7, 5}, {4, 7, 3}, 1},       /* a transposed, broadcast */
  };
  tol t_amp = em_bf16_kernel_best() != EM_BF16_KERNEL_NONE ? T_AMP_BOTH : T_AMP;
  for (int amp = 0; amp < 2; amp++)
    for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
      em_tensor *in[2] = {rand_t(cases[c].na, cases[c].sa, -1, 1, 50 + (unsigned)c, true),
                          rand_t(cases[c].nb, cases[c].sb, -1, 1, 60 + (unsigned)c, true)};
      mm_ctx ctx = {cases[c].kind, amp ? EM_AMP_BF16 : EM_AMP_OFF};
      char what[64];
      snprintf(what, sizeof what, "matmul case %zu%s", c, amp ? " (bf16 autocast)" : "");
      check_op(what, f_mm, &ctx, 2, in, amp ? t_amp : T_GEMM, amp ? t_amp : T_GEMM);
      free_all(2, in);
    }
  for (int amp = 0; amp < 2; amp++)
    for (int kind = 2; kind <= 4; kind++) {
      int64_t sx[2] = {6, 9}, sxt[2] = {9, 6}, sw[2] = {5, 9}, sb[1] = {5};
      em_tensor *in[3] = {rand_t(2, kind == 4 ? sxt : sx, -1, 1, 70, true),
                          rand_t(2, sw, -1, 1, 71, true), rand_t(1, sb, -1, 1, 72, true)};
      mm_ctx ctx = {kind, amp ? EM_AMP_BF16 : EM_AMP_OFF};
      char what[64];
      snprintf(what, sizeof what, "linear kind %d%s", kind, amp ? " (bf16 autocast)" : "");
      check_op(what, f_mm, &ctx, 3, in, amp ? t_amp : T_GEMM, amp ? t_amp : T_GEMM);
      free_all(3, in);
    }
}

/* ---- convolution and pooling -------------------------------------------------------------------- */

typedef struct {
  em_conv2d_params p;
  bool bias;
  em_amp_mode amp;
} conv_ctx;

static em_tensor *f_conv(em_tensor **in, void *vctx) {
  const conv_ctx *c = vctx;
  em_amp_mode prev = em_autocast_begin(c->amp);
  em_tensor *y = em_conv2d(in[0], in[1], c->bias ? in[2] : NULL, &c->p);
  em_autocast_restore(prev);
  return y;
}

static void test_conv2d(void) {
  conv_ctx cases[] = {
      {{{1, 1}, {0, 0}, {1, 1}, 1}, true, EM_AMP_OFF},
      {{{2, 1}, {1, 2}, {1, 2}, 2}, true, EM_AMP_OFF}, /* stride, padding, dilation, groups */
      {{{2, 2}, {1, 1}, {1, 1}, 4}, false, EM_AMP_OFF}, /* depthwise, no bias */
      {{{1, 1}, {1, 1}, {1, 1}, 1}, true, EM_AMP_BF16}, /* amp: against the f32 CPU */
  };
  for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
    int G = cases[c].p.groups;
    int64_t sx[4] = {2, 4, 7, 8}, sw[4] = {8, 4 / G, 3, 3}, sb[1] = {8};
    em_tensor *in[3] = {rand_t(4, sx, -1, 1, 80, true), rand_t(4, sw, -0.5, 0.5, 81, true),
                        rand_t(1, sb, -1, 1, 82, true)};
    char what[64];
    snprintf(what, sizeof what, "conv2d case %zu", c);
    bool amp = cases[c].amp != EM_AMP_OFF;
    /* amp against the f32 CPU: operands that bf16 holds exactly, so that
     * only the upstream gradient's rounding differs */
    for (int k = 0; amp && k < 2; k++) em_bf16_round(em_f32(in[k]), em_f32(in[k]), em_tensor_numel(in[k]));
    check_op(what, f_conv, &cases[c], cases[c].bias ? 3 : 2, in, amp ? T_AMP : T_GEMM,
             amp ? T_AMP : T_GEMM);
    free_all(3, in);
  }
  /* a strided input: a transposed view */
  conv_ctx ct = {{{1, 1}, {1, 0}, {1, 1}, 1}, true, EM_AMP_OFF};
  em_tensor *in[3] = {rand_t(4, (int64_t[]){2, 3, 6, 5}, -1, 1, 83, true),
                      rand_t(4, (int64_t[]){4, 3, 2, 3}, -1, 1, 84, true),
                      rand_t(1, (int64_t[]){4}, -1, 1, 85, true)};
  check_op("conv2d of a view", f_conv, &ct, 3, in, T_GEMM, T_GEMM);
  free_all(3, in);
}

typedef struct {
  em_pool2d_params p;
  bool max, strided;
} pool_ctx;

static em_tensor *f_pool(em_tensor **in, void *vctx) {
  const pool_ctx *c = vctx;
  em_tensor *x = c->strided ? em_transpose(in[0], 2, 3) : in[0];
  return c->max ? em_max_pool2d(x, &c->p) : em_avg_pool2d(x, &c->p);
}

static void test_pool(void) {
  pool_ctx cases[] = {
      {{{2, 2}, {2, 2}, {0, 0}, true}, true, false},
      {{{3, 3}, {2, 2}, {1, 1}, true}, true, true},
      {{{3, 2}, {2, 1}, {1, 1}, true}, false, false},
      {{{3, 3}, {2, 2}, {1, 1}, false}, false, true}, /* count_include_pad off */
  };
  em_tensor *x = rand_t(4, (int64_t[]){2, 3, 7, 7}, -2, 2, 90, true);
  for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
    char what[64];
    snprintf(what, sizeof what, "%s case %zu", cases[c].max ? "max_pool2d" : "avg_pool2d", c);
    check_op(what, f_pool, &cases[c], 1, &x, T_RED, T_RED);
  }
  em_tensor_free(x);
}

/* ---- normalisation ----------------------------------------------------------------------------- */

typedef struct {
  bool training, affine;
  em_tensor *rm[2], *rv[2]; /* [cpu, device] running stats */
} bn_ctx;

static em_tensor *f_bn(em_tensor **in, void *vctx) {
  bn_ctx *c = vctx;
  int on = em_on_device(in[0]);
  return em_batch_norm(in[0], c->affine ? in[1] : NULL, c->affine ? in[2] : NULL, c->rm[on],
                       c->rv[on], c->training, 0.1, 1e-5);
}

static void test_batch_norm(void) {
  for (int shape = 0; shape < 2; shape++)
    for (int training = 1; training >= 0; training--)
      for (int affine = 0; affine < 2; affine++) {
        int64_t s4[4] = {4, 3, 5, 5}, s2[2] = {6, 3}, sc[1] = {3};
        em_tensor *in[3] = {rand_t(shape ? 2 : 4, shape ? s2 : s4, -2, 3, 100, true),
                            rand_t(1, sc, 0.5, 1.5, 101, true), rand_t(1, sc, -1, 1, 102, true)};
        bn_ctx c = {training != 0, affine != 0, {NULL, NULL}, {NULL, NULL}};
        c.rm[0] = rand_t(1, sc, -0.5, 0.5, 103, false);
        c.rv[0] = rand_t(1, sc, 0.5, 2, 104, false);
        c.rm[1] = clone_on(c.rm[0], dev);
        c.rv[1] = clone_on(c.rv[0], dev);
        char what[64];
        snprintf(what, sizeof what, "batch_norm %dd %s%s", shape ? 2 : 4,
                 training ? "training" : "eval", affine ? " affine" : "");
        check_op(what, f_bn, &c, affine ? 3 : 1, in, T_RED, T_RED);
        /* one forward each: the running stats moved the same way */
        em_scope *s = em_scope_begin();
        int64_t n;
        double *a = values_of(c.rm[1], &n), *b = values_of(c.rm[0], &n);
        assert_close(what, "running mean", a, b, n, T_RED);
        g_free(a);
        g_free(b);
        a = values_of(c.rv[1], &n);
        b = values_of(c.rv[0], &n);
        assert_close(what, "running var", a, b, n, T_RED);
        g_free(a);
        g_free(b);
        em_scope_end(s);
        free_all(3, in);
        em_tensor_free(c.rm[0]);
        em_tensor_free(c.rv[0]);
        em_tensor_free(c.rm[1]);
        em_tensor_free(c.rv[1]);
      }
}

static em_tensor *f_ln(em_tensor **in, void *ctx) {
  bool affine = ctx != NULL;
  return em_layer_norm(em_transpose(in[0], 0, 1), 2, affine ? in[1] : NULL, affine ? in[2] : NULL,
                       1e-5);
}

static void test_layer_norm(void) {
  int64_t sx[3] = {5, 3, 8}, sw[2] = {5, 8};
  em_tensor *in[3] = {rand_t(3, sx, -2, 3, 110, true), rand_t(2, sw, 0.5, 1.5, 111, true),
                      rand_t(2, sw, -1, 1, 112, true)};
  check_op("layer_norm", f_ln, NULL, 1, in, T_RED, T_RED);
  check_op("layer_norm affine", f_ln, GINT_TO_POINTER(1), 3, in, T_RED, T_RED);
  free_all(3, in);
}

/* ---- softmax and losses ------------------------------------------------------------------------ */

static em_tensor *f_softmax(em_tensor **in, void *ctx) {
  int k = GPOINTER_TO_INT(ctx);
  int dim = k / 2 == 0 ? 1 : -1;
  return k % 2 ? em_log_softmax(in[0], dim) : em_softmax(in[0], dim);
}

static void test_softmax(void) {
  em_tensor *x = rand_t(3, (int64_t[]){3, 5, 4}, -4, 4, 120, true);
  const char *names[4] = {"softmax dim 1", "log_softmax dim 1", "softmax dim -1",
                          "log_softmax dim -1"};
  for (int k = 0; k < 4; k++) check_op(names[k], f_softmax, GINT_TO_POINTER(k), 1, &x, T_RED, T_RED);
  em_tensor_free(x);
}

/* A persistent u8 mask: element k set when (k * 7 + seed) % 3 == 0, or
 * the causal mask (element (i, j) set when j > i) when causal. */
static em_tensor *mask_t(int ndim, const int64_t *shape, unsigned seed, bool causal) {
  em_tensor *m = em_tensor_new(EM_DTYPE_U8, ndim, shape, NULL);
  uint8_t *v = em_tensor_ptr(m);
  int64_t n = em_tensor_numel(m), cols = shape[ndim - 1];
  for (int64_t k = 0; k < n; k++)
    v[k] = causal ? (k % cols > (k / cols) % shape[ndim - 2]) : ((k * 7 + seed) % 3 == 0);
  return m;
}

/* masked_fill (0: plain, 1: through a transposed x, 2: -inf then softmax
 * over the last dim, the causal attention pattern). */
static em_tensor *f_masked_fill(em_tensor **in, void *ctx) {
  switch (GPOINTER_TO_INT(ctx)) {
  case 0: return em_masked_fill(in[0], in[1], 1.5);
  case 1: return em_masked_fill(em_transpose(in[0], 0, 1), in[1], -2.0);
  default: return em_softmax(em_masked_fill(in[0], in[1], -INFINITY), -1);
  }
}

static void test_masked_fill(void) {
  struct {
    int nx, nm;
    int64_t sx[4], sm[4];
    bool causal;
    int form;
    tol t;
  } cases[] = {
      {2, 2, {3, 4}, {3, 4}, false, 0, T_ELEM},             /* same shape */
      {2, 1, {3, 4}, {4}, false, 0, T_ELEM},                /* a mask row over every row */
      {3, 2, {2, 3, 4}, {3, 1}, false, 0, T_ELEM},          /* a mask column, broadcast */
      {2, 2, {4, 3}, {3, 4}, false, 1, T_ELEM},             /* x transposed */
      {4, 2, {2, 3, 5, 5}, {5, 5}, true, 2, T_RED},         /* causal, -inf, softmax */
  };
  for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
    em_tensor *in[2] = {rand_t(cases[c].nx, cases[c].sx, -2, 2, 130 + (unsigned)c, true),
                        mask_t(cases[c].nm, cases[c].sm, (unsigned)c, cases[c].causal)};
    char what[64];
    snprintf(what, sizeof what, "masked_fill case %zu", c);
    check_op(what, f_masked_fill, GINT_TO_POINTER(cases[c].form), 2, in, cases[c].t, cases[c].t);
    free_all(2, in);
  }
}

static em_tensor *f_ce(em_tensor **in, void *ctx) {
  double smoothing = GPOINTER_TO_INT(ctx) / 100.0;
  return em_cross_entropy(in[0], in[1], smoothing);
}

static em_tensor *f_mse(em_tensor **in, void *ctx) {
  (void)ctx;
  return em_mse_loss(em_transpose(in[0], 0, 1), in[1]);
}

static void test_losses(void) {
  int64_t sl[2] = {6, 5}, st[1] = {6}, tv[6] = {0, 4, 2, 2, 1, 3};
  em_tensor *in[2] = {rand_t(2, sl, -3, 3, 130, true), index_t(1, st, tv)};
  check_op("cross_entropy", f_ce, GINT_TO_POINTER(0), 2, in, T_RED, T_RED);
  check_op("cross_entropy smoothing 0.1", f_ce, GINT_TO_POINTER(10), 2, in, T_RED, T_RED);
  free_all(2, in);
  em_tensor *m[2] = {rand_t(2, (int64_t[]){4, 3}, -2, 2, 131, true),
                     rand_t(2, (int64_t[]){3, 4}, -2, 2, 132, true)};
  check_op("mse_loss", f_mse, NULL, 2, m, T_RED, T_RED);
  free_all(2, m);
}

/* Host targets with device logits (the trainer's labels): the same loss
 * and gradient as device targets; an out-of-range one is refused on the
 * host with the row it is in. */
static void test_ce_host_targets(void) {
  int64_t sl[2] = {6, 5}, st[1] = {6}, tv[6] = {0, 4, 2, 2, 1, 3};
  em_tensor *x = rand_t(2, sl, -3, 3, 133, true), *t = index_t(1, st, tv);
  em_tensor *xd = clone_on(x, dev), *td = clone_on(t, dev);
  em_tensor_set_requires_grad(xd, true);
  double loss[2];
  float grad[2][30]; /* (6, 5) each */
  for (int host = 0; host < 2; host++) {
    em_scope *s = em_scope_begin();
    em_tensor *l = em_cross_entropy(xd, host ? t : td, 0.1);
    g_assert_true(em_device_eq(l->device, dev));
    loss[host] = em_tensor_item(l);
    em_backward(l);
    em_tensor_download(xd->grad, grad[host]);
    em_tensor_zero_grad(xd);
    em_scope_end(s);
  }
  g_assert_cmpfloat(loss[0], ==, loss[1]);
  for (int k = 0; k < 30; k++) g_assert_cmpfloat(grad[0][k], ==, grad[1][k]);
  em_tensor *all[4] = {x, t, xd, td};
  free_all(4, all);
}

static void test_ce_host_target_out_of_range(void) {
  if (g_test_subprocess()) {
    int64_t sl[2] = {3, 5}, st[1] = {3}, tv[3] = {0, 5, 2};
    em_tensor *x = rand_t(2, sl, -3, 3, 134, false), *t = index_t(1, st, tv);
    em_tensor *xd = clone_on(x, dev);
    em_scope *s = em_scope_begin();
    em_cross_entropy(xd, t, 0);
    em_scope_end(s);
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed();
  g_test_trap_assert_stderr("*target 5 of row 1 is out of range [0, 5)*");
}

/* ---- embedding ------------------------------------------------------------------------------------ */

static em_tensor *f_emb(em_tensor **in, void *ctx) {
  (void)ctx;
  return em_embedding(in[0], in[1]);
}

static void test_embedding(void) {
  int64_t iv[6] = {3, 1, 3, 0, 3, 1}; /* repeated */
  em_tensor *in[2] = {rand_t(2, (int64_t[]){5, 4}, -1, 1, 140, true),
                      index_t(2, (int64_t[]){2, 3}, iv)};
  check_op("embedding", f_emb, NULL, 2, in, T_ELEM, T_ELEM);
  free_all(2, in);
}

/* Every op again, run twice per graph. */
static void test_accumulate(void) {
  twice = true;
  test_views();
  test_binary();
  test_unary();
  test_reduce();
  test_matmul();
  test_conv2d();
  test_pool();
  test_batch_norm();
  test_layer_norm();
  test_softmax();
  test_losses();
  test_embedding();
  twice = false;
}

/* ---- dropout ---------------------------------------------------------------------------------------- */

static void test_dropout(void) {
  const double p = 0.3;
  int64_t shape[2] = {128, 64};
  em_tensor *x = rand_t(2, shape, 0.5, 1.5, 150, true);
  em_tensor *xd = clone_on(x, dev);
  int64_t n = em_tensor_numel(x);
  double *first = NULL;
  for (int run = 0; run < 2; run++) {
    em_rng rng;
    em_rng_seed(&rng, 7);
    em_scope *s = em_scope_begin();
    em_tensor *y = em_dropout(xd, p, true, &rng);
    g_assert_true(em_device_eq(y->device, dev));
    em_tensor *g = em_full_on(dev, EM_DTYPE_F32, 2, shape, 1.0);
    em_backward_grad(y, g);
    int64_t ny, ng;
    double *yv = values_of(y, &ny), *gv = values_of(xd->grad, &ng);
    int64_t dropped = 0;
    for (int64_t k = 0; k < n; k++) {
      double xv = em_f32(x)[k];
      if (yv[k] == 0) {
        dropped++;
        g_assert_cmpfloat(gv[k], ==, 0.0);
      } else {
        g_assert_cmpfloat(fabs(yv[k] - xv / (1 - p)), <=, 1e-6 * fabs(yv[k]));
        g_assert_cmpfloat(fabs(gv[k] - 1 / (1 - p)), <=, 1e-6);
      }
    }
    double rate = (double)dropped / (double)n; /* sd ~ 0.005 */
    g_assert_cmpfloat(fabs(rate - p), <, 0.03);
    if (run == 0) {
      first = yv;
    } else { /* the same rng state gives the same mask */
      for (int64_t k = 0; k < n; k++) g_assert_cmpfloat(yv[k], ==, first[k]);
      g_free(yv);
    }
    g_free(gv);
    em_tensor_zero_grad(xd);
    /* eval and p = 0 are the identity */
    g_assert_true(em_dropout(xd, p, false, &rng) == xd);
    g_assert_true(em_dropout(xd, 0.0, true, &rng) == xd);
    em_scope_end(s);
  }
  g_free(first);
  em_tensor_free(x);
  em_tensor_free(xd);
}

/* The CPU and the device draw the same mask from the same rng state (both
 * run the one counter-based generator): y and the gradient (the mask
 * itself for an upstream gradient of ones) are equal bit for bit. Sizes:
 * a tail of a Philox block (not a multiple of 4), and one the CPU splits
 * over its thread pool. The CPU's f64 mask keeps the same elements. */
static void test_dropout_cpu_mask(void) {
  const double p = 0.3;
  const int64_t shapes[2][2] = {{37, 53}, {300, 257}};
  for (int c = 0; c < 2; c++) {
    em_tensor *x = rand_t(2, shapes[c], 0.5, 1.5, 151 + (unsigned)c, true);
    em_tensor *xd = clone_on(x, dev);
    em_tensor *x64 = gc_rand(EM_DTYPE_F64, 2, shapes[c], 0.5, 1.5, 151 + (unsigned)c, true);
    em_tensor *xs[3] = {x, xd, x64};
    double *yv[3], *gv[3];
    int64_t n = 0, m;
    em_scope *s = em_scope_begin();
    for (int t = 0; t < 3; t++) {
      em_rng rng;
      em_rng_seed(&rng, 11);
      em_tensor *y = em_dropout(xs[t], p, true, &rng);
      em_backward_grad(y, em_full_on(y->device, y->dtype, 2, shapes[c], 1.0));
      yv[t] = values_of(y, &n);
      gv[t] = values_of(xs[t]->grad, &m);
      g_assert_cmpint(m, ==, n);
    }
    em_scope_end(s);
    int64_t dropped = 0;
    for (int64_t k = 0; k < n; k++) {
      g_assert_cmpfloat(yv[1][k], ==, yv[0][k]);
      g_assert_cmpfloat(gv[1][k], ==, gv[0][k]);
      g_assert_cmpint(gv[2][k] == 0, ==, gv[0][k] == 0);
      dropped += gv[0][k] == 0;
    }
    g_assert_cmpfloat(fabs((double)dropped / (double)n - p), <, 0.05);
    for (int t = 0; t < 3; t++) {
      g_free(yv[t]);
      g_free(gv[t]);
      em_tensor_free(xs[t]);
    }
  }
}

/* ---- persistent parameters ----------------------------------------------------------------------- */

/* Parameters living on the device (em_tensor_move_), as a model keeps
 * them: gradients accumulate over steps until zero_grad, which makes the
 * next backward overwrite them; the same on the CPU. */
static void test_persistent_grads(void) {
  em_tensor *x = rand_t(2, (int64_t[]){6, 5}, -1, 1, 190, false);
  em_tensor *w = rand_t(2, (int64_t[]){3, 5}, -1, 1, 191, true);
  em_tensor *b = rand_t(1, (int64_t[]){3}, -1, 1, 192, true);
  em_tensor *p[2][3] = {{x, w, b}, {clone_on(x, dev), clone_on(w, dev), clone_on(b, dev)}};
  const int steps[3] = {1, 2, 1}; /* backward passes between checks; zero_grad after the 2nd */
  for (int phase = 0; phase < 3; phase++) {
    for (int side = 0; side < 2; side++) {
      for (int k = 0; k < steps[phase]; k++) {
        em_scope *s = em_scope_begin();
        em_tensor *h = em_tanh(em_linear(p[side][0], p[side][1], p[side][2]));
        em_backward(em_sum_all(em_mul(h, h)));
        em_scope_end(s);
      }
    }
    em_scope *s = em_scope_begin();
    for (int k = 1; k < 3; k++) {
      int64_t na, nb;
      double *a = values_of(p[1][k]->grad, &na), *c = values_of(p[0][k]->grad, &nb);
      g_assert_true(em_device_eq(p[1][k]->grad->device, dev));
      assert_close("persistent gradients", k == 1 ? "weight" : "bias", a, c, na, T_GEMM);
      g_free(a);
      g_free(c);
    }
    em_scope_end(s);
    if (phase == 1)
      for (int side = 0; side < 2; side++)
        for (int k = 1; k < 3; k++) em_tensor_zero_grad(p[side][k]);
  }
  free_all(3, p[0]);
  free_all(3, p[1]);
}

/* ---- profiler ---------------------------------------------------------------------------------------- */

static const em_op_row *row_named(const em_op_table *t, const char *name) {
  for (int i = 0; i < t->n_rows; i++)
    if (strcmp(t->rows[i].name, name) == 0) return &t->rows[i];
  return NULL;
}

/* Device ops are op spans like the CPU's: in the table, with FLOPs. */
static void test_profiler(void) {
  em_tensor *x = rand_t(2, (int64_t[]){8, 16}, -1, 1, 180, false);
  em_tensor *w = rand_t(2, (int64_t[]){4, 16}, -1, 1, 181, true);
  em_tensor *xd = clone_on(x, dev), *wd = clone_on(w, dev);
  em_error err;
  g_assert_cmpint(em_profile_start(NULL, &err), ==, EM_OK);
  em_scope *s = em_scope_begin();
  em_tensor *loss = em_mean_all(em_relu(em_linear(xd, wd, NULL)));
  em_backward(loss);
  em_scope_end(s);
  em_profile_stop();
  em_op_table t;
  g_assert_cmpint(em_op_table_build(&t, EM_OP_TABLE_BY_OP, &err), ==, EM_OK);
  const em_op_row *lin = row_named(&t, "linear"), *relu = row_named(&t, "relu");
  g_assert_nonnull(lin);
  g_assert_nonnull(relu);
  g_assert_nonnull(row_named(&t, "mean_all"));
  g_assert_cmpint(lin->count, ==, 1);
  /* the op counts its GEMM's FLOPs, once (the ref device's GEMM runs
   * without a span of its own) */
  const double flops = 2.0 * 8 * 4 * 16;
  g_assert_cmpfloat(lin->flops, ==, flops);
  g_assert_nonnull(row_named(&t, "linear (backward)"));
  em_op_table_free(&t);
  g_assert_nonnull(wd->grad);
  free_all(1, &x);
  em_tensor *rest[3] = {w, xd, wd};
  free_all(3, rest);
}

/* ---- broken invariants and out of memory ------------------------------------------------------- */

/* Runs this test's subprocess half and asserts that it failed with a
 * message matching pattern, whose one %s is the device's name. */
static void assert_child_failed_with(const char *pattern) {
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed();
  char msg[128], name[32];
  snprintf(msg, sizeof msg, pattern, em_device_str(dev, name, sizeof name));
  g_test_trap_assert_stderr(msg);
}

static void test_mixed_devices(void) {
  if (g_test_subprocess()) {
    em_tensor *a = rand_t(1, (int64_t[]){4}, -1, 1, 160, false);
    em_tensor *b = clone_on(a, dev);
    em_scope *s = em_scope_begin();
    em_add(a, b);
    em_scope_end(s);
    return;
  }
  assert_child_failed_with("*em_add: inputs on cpu and %s: move one with em_to_device*");
}

static void test_mixed_devices_matmul(void) {
  if (g_test_subprocess()) {
    em_tensor *a = rand_t(2, (int64_t[]){2, 2}, -1, 1, 161, false);
    em_tensor *b = clone_on(a, dev);
    em_scope *s = em_scope_begin();
    em_matmul(b, a);
    em_scope_end(s);
    return;
  }
  assert_child_failed_with("*em_matmul: inputs on %s and cpu*");
}

static void test_f64_refused(void) {
  if (g_test_subprocess()) {
    em_error err;
    em_tensor *x = em_tensor_new_on(dev, EM_DTYPE_F64, 1, (int64_t[]){4}, &err);
    g_assert_nonnull(x);
    em_scope *s = em_scope_begin();
    em_relu(x);
    em_scope_end(s);
    return;
  }
  assert_child_failed_with("*em_relu on %s supports f32, got f64*");
}

/* With the ref device capped at 1 MiB (main sets the cap in subprocesses),
 * a 4 MiB matmul output cannot be allocated. */
static void test_out_of_memory(void) {
  if (dev.kind != EM_DEVICE_REF) {
    g_test_skip("the memory cap exists on the ref device only");
    return;
  }
  if (g_test_subprocess()) {
    em_tensor *w = rand_t(2, (int64_t[]){4, 1024}, -1, 1, 170, true);
    em_tensor *wd = clone_on(w, dev);
    em_scope *s = em_scope_begin();
    em_tensor *a = em_full_on(dev, EM_DTYPE_F32, 2, (int64_t[]){1024, 4}, 0.5);
    g_assert_false(em_device_error_pending());
    em_tensor *y = em_matmul(a, wd); /* (1024, 1024): 4 MiB */
    g_assert_true(em_device_error_pending());
    g_assert_null(y->data);
    g_assert_cmpint(y->shape[0], ==, 1024);
    g_assert_cmpint(y->shape[1], ==, 1024);
    /* the rest of the step runs and does nothing */
    em_tensor *z = em_sum(em_relu(y), 1, false);
    em_tensor *loss = em_mean_all(em_mul_scalar(z, 2.0));
    g_assert_cmpint(z->ndim, ==, 1);
    g_assert_cmpint(z->shape[0], ==, 1024);
    g_assert_cmpint(loss->ndim, ==, 0);
    g_assert_false(em_tensor_requires_grad(loss));
    em_backward(loss);
    g_assert_null(wd->grad);
    em_error err;
    g_assert_cmpint(em_device_error_take(&err), ==, EM_ERR_NOMEM);
    g_assert_false(em_device_error_pending());
    g_assert_nonnull(strstr(err.msg, "out of memory on ref:0 in matmul"));
    em_scope_end(s);
    em_memory_stats st;
    em_device_memory_stats(dev, &st);
    g_assert_cmpint(st.allocated_bytes, ==, (int64_t)em_tensor_nbytes(wd));
    /* and the device works again */
    s = em_scope_begin();
    em_tensor *q = em_sum_all(em_relu(wd));
    g_assert_false(em_device_error_pending());
    g_assert_nonnull(q->data);
    em_scope_end(s);
    em_tensor_free(w);
    em_tensor_free(wd);
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed();
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  if (g_test_subprocess()) g_setenv("EMBER_REF_DEVICE_MEMORY", "1048576", TRUE);
  const char *name = g_getenv("EMBER_TEST_DEVICE");
  em_error err;
  if (em_device_parse(name && *name ? name : "ref", &dev, &err) != EM_OK ||
      em_device_check(dev, &err) != EM_OK) {
    printf("skipped: %s\n", err.msg);
    return 77;
  }
  g_test_add_func("/device/ops/views", test_views);
  g_test_add_func("/device/ops/binary", test_binary);
  g_test_add_func("/device/ops/unary", test_unary);
  g_test_add_func("/device/ops/reduce", test_reduce);
  g_test_add_func("/device/ops/matmul-linear", test_matmul);
  g_test_add_func("/device/ops/conv2d", test_conv2d);
  g_test_add_func("/device/ops/pool2d", test_pool);
  g_test_add_func("/device/ops/batch-norm", test_batch_norm);
  g_test_add_func("/device/ops/layer-norm", test_layer_norm);
  g_test_add_func("/device/ops/softmax", test_softmax);
  g_test_add_func("/device/ops/masked-fill", test_masked_fill);
  g_test_add_func("/device/ops/losses", test_losses);
  g_test_add_func("/device/ops/ce-host-targets", test_ce_host_targets);
  g_test_add_func("/device/ops/ce-host-target-out-of-range", test_ce_host_target_out_of_range);
  g_test_add_func("/device/ops/embedding", test_embedding);
  g_test_add_func("/device/ops/accumulate", test_accumulate);
  g_test_add_func("/device/ops/dropout", test_dropout);
  g_test_add_func("/device/ops/dropout-cpu-mask", test_dropout_cpu_mask);
  g_test_add_func("/device/ops/persistent-grads", test_persistent_grads);
  g_test_add_func("/device/ops/profiler", test_profiler);
  g_test_add_func("/device/ops/mixed-devices", test_mixed_devices);
  g_test_add_func("/device/ops/mixed-devices-matmul", test_mixed_devices_matmul);
  g_test_add_func("/device/ops/f64-refused", test_f64_refused);
  g_test_add_func("/device/ops/out-of-memory", test_out_of_memory);
  return g_test_run();
}
