/* adam.c: torch.optim.Adam and AdamW's updates (PyTorch 1.13), with
 * optional AMSGrad. With t the parameter's own step count after this
 * update:
 *
 *   Adam:  g = g + wd * p              AdamW:  p = p * (1 - lr * wd)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   vmax = max(vmax, v)                (amsgrad; the denominator uses vmax)
 *   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
 *   p = p - (lr / (1 - beta1^t)) * m / denom
 *
 * The per-step scalars are computed in double like PyTorch's Python code
 * and the f32 loop computes in float like its kernels. The optimizer runs
 * the pieces of all parameters over the thread pool together (pieces.c);
 * every element is independent. A parameter on a device runs its
 * backend's adam_step kernel (the same formulas; AMSGrad is refused there
 * by em_optimizer_new). */
#include "optim-private.h"
#include "em-cpu.h"

#include <math.h>

#include "em-backend.h"

/* One update's arguments (the slot's args). */
typedef struct {
  void *p, *m, *v, *vmax; /* (D); vmax NULL without amsgrad */
  const void *g;          /* (D) */
  double l2;              /* Adam's weight decay (0 for AdamW) */
  double shrink;          /* AdamW's 1 - lr * wd (1 for Adam) */
  double beta1, beta2, eps;
  double step_size;       /* lr / (1 - beta1^t) */
  double bc2_sqrt;        /* sqrt(1 - beta2^t) */
} em_adam_args;
_Static_assert(sizeof(em_adam_args) <= EM_OPTIM_ARGS_BYTES, "a slot holds Adam's arguments");

/* One kernel for both dtypes; T is float or double (SQRT to match), and
 * the f32 one computes in float as PyTorch does. */
#define ADAM_KERNEL(NAME, T, SQRT)                                            \
  EM_CPU_CLONES static void NAME(void *ctx, int64_t begin, int64_t end) {    \
    const em_adam_args *a = ctx;                                              \
    T *restrict p = (T *)a->p + begin;                             /* (D) */  \
    T *restrict m = (T *)a->m + begin;                             /* (D) */  \
    T *restrict v = (T *)a->v + begin;                             /* (D) */  \
    T *restrict vmax = a->vmax ? (T *)a->vmax + begin : NULL;      /* (D) */  \
    const T *restrict g = (const T *)a->g + begin;                 /* (D) */  \
    const T l2 = (T)a->l2, shrink = (T)a->shrink;                             \
    const T b1 = (T)a->beta1, b2 = (T)a->beta2;                               \
    const T c1 = (T)(1.0 - a->beta1), c2 = (T)(1.0 - a->beta2);               \
    const T eps = (T)a->eps, bc2s = (T)a->bc2_sqrt;                           \
    const T neg_step = (T)-a->step_size;                                      \
    const int64_t n = end - begin;                                            \
    for (int64_t k = 0; k < n; k++) {                                         \
      T pk = p[k] * shrink;                                                   \
      T gk = g[k] + l2 * pk;                                                  \
      T mk = m[k] * b1 + c1 * gk;                                             \
      T vk = v[k] * b2 + c2 * gk * gk;                                        \
      m[k] = mk;                                                              \
      v[k] = vk;                                                              \
      if (vmax) { /* amsgrad: the largest second moment so far */             \
        vk = vmax[k] > vk ? vmax[k] : vk;                                     \
        vmax[k] = vk;                                                         \
      }                                                                       \
      T denom = SQRT(vk) / bc2s + eps;                                        \
      p[k] = pk + neg_step * mk / denom;                                      \
    }                                                                         \
  }

ADAM_KERNEL(adam_f32, float, sqrtf)
ADAM_KERNEL(adam_f64, double, sqrt)

static bool prepare(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
                    em_optim_piece *piece, bool decoupled) {
  int64_t t = *em_i64(s->step) + 1;
  *em_i64(s->step) = t;
  if (em_on_device(s->param)) {
    EM_KCALL(em_kernels_of(s->param), adam_step, s->param, g, s->buf[0], s->buf[1], t, c->lr, c->beta1,
                                       c->beta2, c->eps, c->weight_decay, decoupled);
    return false;
  }
  em_adam_args *args = (em_adam_args *)s->args;
  *args = (em_adam_args){
    .p = em_tensor_ptr(s->param),
    .m = em_tensor_ptr(s->buf[0]),
    .v = em_tensor_ptr(s->buf[1]),
    .vmax = c->amsgrad ? em_tensor_ptr(s->buf[2]) : NULL,
    .g = em_tensor_ptr(g),
    .l2 = decoupled ? 0.0 : c->weight_decay,
    .shrink = decoupled ? 1.0 - c->lr * c->weight_decay : 1.0,
    .beta1 = c->beta1,
    .beta2 = c->beta2,
    .eps = c->eps,
    .step_size = c->lr / (1.0 - pow(c->beta1, (double)t)),
    .bc2_sqrt = sqrt(1.0 - pow(c->beta2, (double)t)),
  };
  *piece = (em_optim_piece){s->param->dtype == EM_DTYPE_F32 ? adam_f32 : adam_f64, args,
                            em_tensor_numel(s->param)};
  return true;
}

static bool adam_prepare(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
                         em_optim_piece *piece) {
  return prepare(c, s, g, piece, false);
}

static bool adamw_prepare(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
                          em_optim_piece *piece) {
  return prepare(c, s, g, piece, true);
}

static em_status adam_check(const em_optim_config *c, em_error *err) {
  const char *what = em_optim_kind_name(c->kind);
  if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
    return em_error_set(err, EM_ERR_INVALID, "%s: betas must be in [0, 1), got (%g, %g)", what,
                        c->beta1, c->beta2);
  if (!(c->eps >= 0) || isinf(c->eps))
    return em_error_set(err, EM_ERR_INVALID, "%s: eps must be a finite number >= 0, got %g",
                        what, c->eps);
  return EM_OK;
}

static em_status adam_check_param(const em_optim_config *c, const em_tensor *p,
                                  const char *name, em_error *err) {
  if (!em_on_device(p) || !c->amsgrad) return EM_OK;
  char dn[32];
  return em_error_set(err, EM_ERR_UNSUPPORTED, "parameter '%s' is on %s: AMSGrad runs on the "
                      "CPU only (turn amsgrad off, or train on the CPU)", name,
                      em_device_str(p->device, dn, sizeof dn));
}

/* exp_avg and exp_avg_sq, and max_exp_avg_sq with AMSGrad. */
static int adam_buffers(const em_optim_config *c) { return c->amsgrad ? 3 : 2; }

static double adam_get_momentum(const em_optim_config *c) { return c->beta1; }

static void adam_set_momentum(em_optim_config *c, double m) {
  EM_ASSERT(m >= 0 && m < 1);
  c->beta1 = m;
}

/* Adam and AdamW differ in their weight decay and its default. */
#define ADAM_TYPE(NAME, WD, PREPARE)                                                \
  {                                                                                 \
    .name = NAME, .defaults = {.lr = 1e-3, .weight_decay = WD, .beta1 = 0.9,        \
                               .beta2 = 0.999, .eps = 1e-8},                        \
    .check = adam_check, .check_param = adam_check_param, .buffers = adam_buffers,  \
    .buffer_names = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},                    \
    .get_momentum = adam_get_momentum, .set_momentum = adam_set_momentum,           \
    .prepare = PREPARE,                                                             \
  }

const em_optim_type em_optim_adam = ADAM_TYPE("adam", 0.0, adam_prepare);
const em_optim_type em_optim_adamw = ADAM_TYPE("adamw", 1e-2, adamw_prepare);
