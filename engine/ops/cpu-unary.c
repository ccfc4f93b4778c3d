/* cpu-unary.c: the CPU backend's one-input element-wise kernels (the
 * unary and unary_backward entries of em-backend.h) for f32 and f64: neg,
 * the scalar maps, pow, exp, log, sqrt, abs, clamp and the activations.
 * The op front-end is unary.c.
 *
 * Each map is a table entry made by UNARY_OP from one forward expression
 * (of x) and one backward expression (of the upstream gradient g and the
 * value v it reads, the input x or the output y), per dtype. Every kernel
 * is a row function for the strided iterator: a unit-stride loop that the
 * compiler vectorises (the f32 transcendental functions are the
 * vectorisable ones of ops-private.h) and the plain strided loop, which
 * computes the same expression and so gives bit-identical results. f64
 * uses libm and is the reference the f32 kernels are tested against.
 *
 * Gradients at kinks follow PyTorch: relu passes 0 at x == 0, clamp
 * passes 1 where lo <= x <= hi, abs passes sign(x) (0 at 0), pow with
 * exponent 0 passes 0. */
#include "ops-private.h"
#include "em-cpu.h"


typedef struct {
  double p[2]; /* op scalars: add/mul/pow scalar, clamp bounds */
} unary_params;

enum { SAVE_NONE, SAVE_X, SAVE_Y };

typedef struct {
  const char *name;
  int save;                /* which value backward reads as v */
  em_row_fn fwd[2];        /* [f32, f64]: rows of (y, x) */
  em_row_fn bwd[2][2];     /* [f32, f64][overwrite, accumulate]: rows of (gx, g, v) */
} unary_op;

/* Each row is compiled for x86-64-v4 (AVX-512), v3 (AVX2) and the baseline
 * and picked at load time (EM_CPU_CLONES): in a portable build the plain
 * loops would otherwise run SSE2 only (the fused conv2d_relu's ReLU pass
 * over a 13 MB output cost 2% of a fmnist-cnn step more). Without FMA
 * contraction (-std=c11) every clone computes the same bits. */
#define FWD_ROW(FN, T, EXPR)                                                     \
  EM_CPU_CLONES static void FN(void *ctx, int64_t n, char *const *pp, const int64_t *s) { \
    const unary_params *prm = ctx;                                               \
    const T p0 = (T)prm->p[0], p1 = (T)prm->p[1];                                \
    T *restrict y = (T *)pp[0];                                                  \
    const T *restrict xs = (const T *)pp[1];                                     \
    (void)p0;                                                                    \
    (void)p1;                                                                    \
    if ((const T *)y == xs && s[0] == 1 && s[1] == 1) { /* in place: y alone */ \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T x = y[i];                                                        \
        y[i] = (EXPR);                                                           \
      }                                                                          \
    } else if ((const T *)y == xs && s[0] == s[1]) {                             \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T x = y[i * s[0]];                                                 \
        y[i * s[0]] = (EXPR);                                                    \
      }                                                                          \
    } else if (s[0] == 1 && s[1] == 1) {                                         \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T x = xs[i];                                                       \
        y[i] = (EXPR);                                                           \
      }                                                                          \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T x = xs[i * s[1]];                                                \
        y[i * s[0]] = (EXPR);                                                    \
      }                                                                          \
    }                                                                            \
  }

#define BWD_ROW(FN, T, ACC, EXPR)                                                \
  EM_CPU_CLONES static void FN(void *ctx, int64_t n, char *const *pp, const int64_t *s) { \
    const unary_params *prm = ctx;                                               \
    const T p0 = (T)prm->p[0], p1 = (T)prm->p[1];                                \
    T *gx = (T *)pp[0];                                                          \
    const T *gs = (const T *)pp[1], *vs = (const T *)pp[2];                      \
    (void)p0;                                                                    \
    (void)p1;                                                                    \
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                   \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T g = gs[i], v = vs[i];                                            \
        (void)v;                                                                 \
        const T d = (EXPR);                                                      \
        gx[i] = ACC ? gx[i] + d : d;                                             \
      }                                                                          \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T g = gs[i * s[1]], v = vs[i * s[2]];                              \
        (void)v;                                                                 \
        const T d = (EXPR);                                                      \
        gx[i * s[0]] = ACC ? gx[i * s[0]] + d : d;                               \
      }                                                                          \
    }                                                                            \
  }

#define UNARY_OP(NAME, SAVE, FWD32, FWD64, BWD32, BWD64)                         \
  FWD_ROW(NAME##_fwd_f32, float, FWD32)                                          \
  FWD_ROW(NAME##_fwd_f64, double, FWD64)                                         \
  BWD_ROW(NAME##_bwd_f32, float, 0, BWD32)                                       \
  BWD_ROW(NAME##_bwd_acc_f32, float, 1, BWD32)                                   \
  BWD_ROW(NAME##_bwd_f64, double, 0, BWD64)                                      \
  BWD_ROW(NAME##_bwd_acc_f64, double, 1, BWD64)                                  \
  static const unary_op NAME##_op = {#NAME,                                      \
                                     SAVE,                                       \
                                     {NAME##_fwd_f32, NAME##_fwd_f64},           \
                                     {{NAME##_bwd_f32, NAME##_bwd_acc_f32},      \
                                      {NAME##_bwd_f64, NAME##_bwd_acc_f64}}};

/* ---- scalar helpers ------------------------------------------------------------ */

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */

static inline float gelu_f32(float x) { return 0.5f * x * (1.f + em_erff(x * (float)SQRT1_2)); }
static inline double gelu_f64(double x) { return 0.5 * x * (1. + erf(x * SQRT1_2)); }
/* d gelu / dx = Phi(x) + x phi(x) */
static inline float gelu_grad_f32(float x) {
  float cdf = 0.5f * (1.f + em_erff(x * (float)SQRT1_2));
  float pdf = (float)INV_SQRT_2PI * em_expf(-0.5f * x * x);
  return cdf + x * pdf;
}
static inline double gelu_grad_f64(double x) {
  double cdf = 0.5 * (1. + erf(x * SQRT1_2));
  double pdf = INV_SQRT_2PI * exp(-0.5 * x * x);
  return cdf + x * pdf;
}
/* The tanh form: u = k (x + c x^3), t = tanh(u), y = 0.5 x (1 + t),
 * dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2). */
#define GELU_K 0.79788456080286535588 /* sqrt(2 / pi) */
#define GELU_C 0.044715
static inline float gelu_tanh_f32(float x) {
  return 0.5f * x * (1.f + em_tanhf((float)GELU_K * (x + (float)GELU_C * x * x * x)));
}
static inline double gelu_tanh_f64(double x) {
  return 0.5 * x * (1. + tanh(GELU_K * (x + GELU_C * x * x * x)));
}
static inline float gelu_tanh_grad_f32(float x) {
  float t = em_tanhf((float)GELU_K * (x + (float)GELU_C * x * x * x));
  return 0.5f * (1.f + t) +
         0.5f * x * (1.f - t * t) * (float)GELU_K * (1.f + 3.f * (float)GELU_C * x * x);
}
static inline double gelu_tanh_grad_f64(double x) {
  double t = tanh(GELU_K * (x + GELU_C * x * x * x));
  return 0.5 * (1. + t) + 0.5 * x * (1. - t * t) * GELU_K * (1. + 3. * GELU_C * x * x);
}
static inline double sigmoid_f64(double x) { return 1. / (1. + exp(-x)); }
/* d silu / dx = s (1 + x (1 - s)), s = sigmoid(x) */
static inline float silu_grad_f32(float x) {
  float s = em_sigmoidf(x);
  return s * (1.f + x * (1.f - s));
}
static inline double silu_grad_f64(double x) {
  double s = sigmoid_f64(x);
  return s * (1. + x * (1. - s));
}
/* min(max(x, lo), hi) with NaN passing through, as PyTorch's clamp. */
static inline float clamp_f32(float x, float lo, float hi) {
  float r = x < lo ? lo : x;
  return r > hi ? hi : r;
}
static inline double clamp_f64(double x, double lo, double hi) {
  double r = x < lo ? lo : x;
  return r > hi ? hi : r;
}

/* ---- the ops ---------------------------------------------------------------------- */

/*       name     saved      f32 forward                 f64 forward
 *                           f32 backward (g, v)         f64 backward */
UNARY_OP(neg, SAVE_NONE, -x, -x, -g, -g)
UNARY_OP(add_scalar, SAVE_NONE, x + p0, x + p0, g, g)
UNARY_OP(mul_scalar, SAVE_NONE, x * p0, x * p0, g * p0, g * p0)
UNARY_OP(pow2, SAVE_X, x * x, x * x, g * (2.f * v), g * (2. * v))
UNARY_OP(pow3, SAVE_X, x * x * x, x * x * x, g * (3.f * (v * v)), g * (3. * (v * v)))
UNARY_OP(pow_half, SAVE_X, sqrtf(x), sqrt(x), g * (0.5f * (1.f / sqrtf(v))),
         g * (0.5 * (1. / sqrt(v))))
UNARY_OP(pow_recip, SAVE_X, 1.f / x, 1. / x, g * (-1.f / (v * v)), g * (-1. / (v * v)))
UNARY_OP(pow_any, SAVE_X, powf(x, p0), pow(x, p0),
         p0 == 0.f ? 0.f : g * (p0 * powf(v, p0 - 1.f)),
         p0 == 0. ? 0. : g * (p0 * pow(v, p0 - 1.)))
UNARY_OP(exp, SAVE_Y, em_expf(x), exp(x), g * v, g * v)
UNARY_OP(log, SAVE_X, em_logf(x), log(x), g / v, g / v)
UNARY_OP(sqrt, SAVE_Y, sqrtf(x), sqrt(x), g / (2.f * v), g / (2. * v))
UNARY_OP(abs, SAVE_X, fabsf(x), fabs(x), v > 0.f ? g : (v < 0.f ? -g : 0.f),
         v > 0. ? g : (v < 0. ? -g : 0.))
UNARY_OP(clamp, SAVE_X, clamp_f32(x, p0, p1), clamp_f64(x, p0, p1), (v >= p0 && v <= p1) ? g : 0.f,
         (v >= p0 && v <= p1) ? g : 0.)
UNARY_OP(relu, SAVE_Y, x < 0.f ? 0.f : x, x < 0. ? 0. : x, v <= 0.f ? 0.f : g,
         v <= 0. ? 0. : g)
UNARY_OP(gelu, SAVE_X, gelu_f32(x), gelu_f64(x), g * gelu_grad_f32(v), g * gelu_grad_f64(v))
UNARY_OP(gelu_tanh, SAVE_X, gelu_tanh_f32(x), gelu_tanh_f64(x), g * gelu_tanh_grad_f32(v),
         g * gelu_tanh_grad_f64(v))
UNARY_OP(silu, SAVE_X, x / (1.f + em_expf(-x)), x / (1. + exp(-x)), g * silu_grad_f32(v),
         g * silu_grad_f64(v))
UNARY_OP(sigmoid, SAVE_Y, em_sigmoidf(x), sigmoid_f64(x), g * ((1.f - v) * v),
         g * ((1. - v) * v))
UNARY_OP(tanh, SAVE_Y, em_tanhf(x), tanh(x), g * (1.f - v * v), g * (1. - v * v))

/* ---- the kernel entries ------------------------------------------------------------ */

/* The row table of op code k with scalar p0: pow takes the exact,
 * vectorised forms of the exponents PyTorch also special-cases. */
static const unary_op *op_of(em_kun k, double p0) {
  switch (k) {
  case EM_KU_NEG: return &neg_op;
  case EM_KU_EXP: return &exp_op;
  case EM_KU_LOG: return &log_op;
  case EM_KU_SQRT: return &sqrt_op;
  case EM_KU_ABS: return &abs_op;
  case EM_KU_CLAMP: return &clamp_op;
  case EM_KU_RELU: return &relu_op;
  case EM_KU_GELU: return &gelu_op;
  case EM_KU_GELU_TANH: return &gelu_tanh_op;
  case EM_KU_SILU: return &silu_op;
  case EM_KU_SIGMOID: return &sigmoid_op;
  case EM_KU_TANH: return &tanh_op;
  case EM_KU_ADDS: return &add_scalar_op;
  case EM_KU_MULS: return &mul_scalar_op;
  case EM_KU_POWS:
    return p0 == 2.0    ? &pow2_op
           : p0 == 3.0  ? &pow3_op
           : p0 == 0.5  ? &pow_half_op
           : p0 == -1.0 ? &pow_recip_op
                        : &pow_any_op;
  default: EM_ASSERT(!"unknown unary op"); return NULL;
  }
}

em_status em_cpu_unary(em_kun k, em_tensor *y, const em_tensor *x, double p0, double p1) {
  EM_ASSERT(EM_IS_FLOAT(x) && y->dtype == x->dtype);
  em_tensor *ops[2] = {y, (em_tensor *)x};
  unary_params prm = {{p0, p1}};
  em_iter it;
  em_iter_init(&it, y->ndim, y->shape, 2, ops);
  em_iter_parallel(&it, op_of(k, p0)->fwd[x->dtype == EM_DTYPE_F64], &prm);
  return EM_OK;
}

em_status em_cpu_unary_backward(em_kun k, bool acc, em_tensor *gx, const em_tensor *g,
                                const em_tensor *x, const em_tensor *y, double p0, double p1) {
  const unary_op *op = op_of(k, p0);
  const em_tensor *v = op->save == SAVE_X ? x : op->save == SAVE_Y ? y : g;
  em_tensor *ops[3] = {gx, (em_tensor *)g, (em_tensor *)v};
  unary_params prm = {{p0, p1}};
  em_iter it;
  em_iter_init(&it, gx->ndim, gx->shape, 3, ops);
  em_iter_parallel(&it, op->bwd[gx->dtype == EM_DTYPE_F64][acc], &prm);
  return EM_OK;
}
