/* elementwise.c: the broadcasting binary ops em_add, em_sub, em_mul and
 * em_div, with backward. (The one-input maps, scalar arithmetic
 * included, are in unary.c.)
 *
 * Shapes broadcast like NumPy. The strided iterator turns every case into
 * rows, and each row kernel has vectorised loops for the three shapes that
 * matter (both operands contiguous; one of them constant along the row, as
 * in a bias or channel broadcast) and the plain strided loop for the rest.
 *
 * Backward: for an input of the output's shape the gradient term
 * (g, -g, g * other, g / b, -g * a / b^2) is written or accumulated
 * straight into its gradient buffer by one fused kernel; for a broadcast
 * input the term goes to a temporary that em_reduce_to_shape sums down. */
#include "ops-private.h"

enum { K_ADD, K_SUB, K_MUL, K_DIV, K_NEG, K_COUNT };

/* Rows of (y, a, b): y = EXPR(u = a, w = b), or y += EXPR when ACC. */
#define BIN_ROW(FN, T, ACC, EXPR)                                                \
  static void FN(void *ctx, int64_t n, char *const *pp, const int64_t *s) {      \
    (void)ctx;                                                                   \
    T *restrict y = (T *)pp[0];                                                  \
    const T *restrict A = (const T *)pp[1];                                      \
    const T *restrict B = (const T *)pp[2];                                      \
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                   \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T u = A[i], w = B[i];                                              \
        (void)w;                                                                 \
        const T r = (EXPR);                                                      \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {                            \
      const T w = *B;                                                            \
      (void)w;                                                                   \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T u = A[i];                                                        \
        const T r = (EXPR);                                                      \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {                            \
      const T u = *A;                                                            \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T w = B[i];                                                        \
        (void)w;                                                                 \
        const T r = (EXPR);                                                      \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T u = A[i * s[1]], w = B[i * s[2]];                                \
        (void)w;                                                                 \
        const T r = (EXPR);                                                      \
        y[i * s[0]] = ACC ? y[i * s[0]] + r : r;                                 \
      }                                                                          \
    }                                                                            \
  }

#define BIN_ROWS(NAME, EXPR)                                                     \
  BIN_ROW(NAME##_f32, float, 0, EXPR)                                            \
  BIN_ROW(NAME##_acc_f32, float, 1, EXPR)                                        \
  BIN_ROW(NAME##_f64, double, 0, EXPR)                                           \
  BIN_ROW(NAME##_acc_f64, double, 1, EXPR)

BIN_ROWS(add, u + w)
BIN_ROWS(sub, u - w)
BIN_ROWS(mul, u * w)
BIN_ROWS(div, u / w)
BIN_ROWS(neg, -u)

#define ROWS(NAME) {{NAME##_f32, NAME##_acc_f32}, {NAME##_f64, NAME##_acc_f64}}
static const em_row_fn bin_rows[K_COUNT][2][2] = {ROWS(add), ROWS(sub), ROWS(mul), ROWS(div),
                                                  ROWS(neg)};
static const char *const bin_names[K_COUNT] = {"add", "sub", "mul", "div", "neg"};

/* Rows of (gb, g, a, b): gb = -g * a / (b * b) (the divisor's gradient), or
 * gb += that when ACC. */
#define DIVB_ROW(FN, T, ACC)                                                     \
  static void FN(void *ctx, int64_t n, char *const *pp, const int64_t *s) {      \
    (void)ctx;                                                                   \
    T *restrict y = (T *)pp[0];                                                  \
    const T *G = (const T *)pp[1], *A = (const T *)pp[2], *B = (const T *)pp[3]; \
    if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {                      \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T r = -G[i] * A[i] / (B[i] * B[i]);                                \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T b = B[i * s[3]];                                                 \
        const T r = -G[i * s[1]] * A[i * s[2]] / (b * b);                        \
        y[i * s[0]] = ACC ? y[i * s[0]] + r : r;                                 \
      }                                                                          \
    }                                                                            \
  }
DIVB_ROW(divb_f32, float, 0)
DIVB_ROW(divb_acc_f32, float, 1)
DIVB_ROW(divb_f64, double, 0)
DIVB_ROW(divb_acc_f64, double, 1)
static const em_row_fn divb_rows[2][2] = {{divb_f32, divb_acc_f32}, {divb_f64, divb_acc_f64}};

/* ---- backward ---------------------------------------------------------------------- */

/* dst (g's shape) = or += the gradient term of one input: kind K_NEG (-g),
 * K_MUL (g * o), K_DIV (g / o), or -1 for the divisor term (-g * a / b^2). */
static void run_term(int kind, em_tensor *dst, bool acc, em_tensor *g, em_tensor *o,
                     em_tensor *a, em_tensor *b) {
  em_iter it;
  int dt = g->dtype == EM_DTYPE_F64;
  if (kind < 0) {
    em_tensor *ops[4] = {dst, g, a, b};
    em_iter_init(&it, g->ndim, g->shape, 4, ops);
    em_iter_parallel(&it, divb_rows[dt][acc], NULL);
  } else {
    em_tensor *ops[3] = {dst, g, o};
    em_iter_init(&it, g->ndim, g->shape, 3, ops);
    em_iter_parallel(&it, bin_rows[kind][dt][acc], NULL);
  }
}

static void binary_backward(em_node *n) {
  const int kind = (int)n->i[0];
  em_tensor *a = n->in[0], *b = n->in[1], *g = n->out->grad; /* g: out's shape */
  for (int which = 0; which < 2; which++) {
    em_tensor *x = n->in[which];
    if (!em_tensor_requires_grad(x)) continue;
    int term = K_COUNT; /* K_COUNT: the term is g itself */
    em_tensor *o = g;
    if (kind == K_SUB && which == 1) term = K_NEG;
    else if (kind == K_MUL) {
      term = K_MUL;
      o = which == 0 ? b : a;
    } else if (kind == K_DIV) {
      term = which == 0 ? K_DIV : -1;
      o = b;
    }
    bool same = em_tensor_same_shape(x, g);
    if (term == K_COUNT) {
      em_grad_add(x, same ? g : em_reduce_to_shape(g, x->ndim, x->shape));
    } else if (same) {
      bool fresh;
      em_tensor *gx = em_grad_acquire(x, &fresh);
      run_term(term, gx, !fresh, g, o, a, b);
    } else {
      em_tensor *t = em_empty(g->dtype, g->ndim, g->shape);
      run_term(term, t, false, g, o, a, b);
      em_grad_add(x, em_reduce_to_shape(t, x->ndim, x->shape));
    }
  }
}

/* ---- forward ------------------------------------------------------------------------- */

static em_tensor *binary_apply(int kind, em_tensor *a, em_tensor *b) {
  EM_ASSERT(EM_IS_FLOAT(a) && a->dtype == b->dtype);
  EM_OP_BEGIN(bin_names[kind], 2, a, b);
  int64_t shape[EM_MAX_DIMS];
  int nd = em_broadcast_shape(a, b, shape);
  EM_ASSERT(nd >= 0 && "operands do not broadcast");
  em_tensor *y = em_empty(a->dtype, nd, shape);
  em_tensor *ops[3] = {y, a, b};
  em_iter it;
  em_iter_init(&it, nd, shape, 3, ops);
  em_iter_parallel(&it, bin_rows[kind][a->dtype == EM_DTYPE_F64][0], NULL);
  em_tensor *ins[2] = {a, b};
  if (em_needs_grad(2, ins)) {
    em_node *node = em_record(bin_names[kind], binary_backward, y, 2, ins);
    node->i[0] = kind;
  }
  return EM_OP_END(y);
}

em_tensor *em_add(em_tensor *a, em_tensor *b) {
  if (EM_ON_DEVICE(a, b)) return em_dev_add(a, b);
  return binary_apply(K_ADD, a, b);
}
em_tensor *em_sub(em_tensor *a, em_tensor *b) {
  if (EM_ON_DEVICE(a, b)) return em_dev_sub(a, b);
  return binary_apply(K_SUB, a, b);
}
em_tensor *em_mul(em_tensor *a, em_tensor *b) {
  if (EM_ON_DEVICE(a, b)) return em_dev_mul(a, b);
  return binary_apply(K_MUL, a, b);
}
em_tensor *em_div(em_tensor *a, em_tensor *b) {
  if (EM_ON_DEVICE(a, b)) return em_dev_div(a, b);
  return binary_apply(K_DIV, a, b);
}
