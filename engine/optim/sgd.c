/* sgd.c: torch.optim.SGD's update (PyTorch 1.13): weight decay added to
 * the gradient, a momentum buffer that starts as a copy of the first
 * gradient, dampening, and Nesterov's look-ahead.
 *
 *   d = g + wd * p
 *   buf = first ? d : momentum * buf + (1 - dampening) * d
 *   d = nesterov ? d + momentum * buf : buf        (with momentum)
 *   p = p - lr * d
 *
 * Element-wise loops over contiguous arrays that the compiler vectorises;
 * the f32 loop computes in float as PyTorch does. The optimizer runs the
 * pieces of all parameters over the thread pool together (pieces.c; each
 * element is independent, so the result does not depend on the thread
 * count). A parameter on a device runs its backend's sgd_step kernel (the
 * same formulas, engine/device/kernels). */
#include "optim-private.h"
#include "em-cpu.h"

#include "em-backend.h"

/* One update's arguments (the slot's args). */
typedef struct {
  void *p, *buf;  /* (D) */
  const void *g;  /* (D) */
  double lr, wd, mom, damp;
  bool first, nesterov;
} em_sgd_args;
_Static_assert(sizeof(em_sgd_args) <= EM_OPTIM_ARGS_BYTES, "a slot holds SGD's arguments");

/* One kernel for both dtypes; T is float or double, and the f32 one
 * computes in float as PyTorch does. */
#define SGD_KERNEL(NAME, T)                                                   \
  EM_CPU_CLONES static void NAME(void *ctx, int64_t begin, int64_t end) {    \
    const em_sgd_args *a = ctx;                                               \
    T *restrict p = (T *)a->p + begin;                          /* (D) */     \
    const T *restrict g = (const T *)a->g + begin;              /* (D) */     \
    T *restrict buf = a->buf ? (T *)a->buf + begin : NULL;      /* (D) */     \
    const T lr = (T)a->lr, wd = (T)a->wd, mom = (T)a->mom;                    \
    const T keep = (T)(1.0 - a->damp);                                        \
    const int64_t n = end - begin;                                            \
    if (!buf) {                                                               \
      for (int64_t k = 0; k < n; k++) {                                       \
        T d = g[k] + wd * p[k];                                               \
        p[k] = p[k] - lr * d;                                                 \
      }                                                                       \
    } else if (a->first) {                                                    \
      for (int64_t k = 0; k < n; k++) {                                       \
        T d = g[k] + wd * p[k];                                               \
        buf[k] = d;                                                           \
        if (a->nesterov) d = d + mom * d;                                     \
        p[k] = p[k] - lr * d;                                                 \
      }                                                                       \
    } else if (a->nesterov) {                                                 \
      for (int64_t k = 0; k < n; k++) {                                       \
        T d = g[k] + wd * p[k];                                               \
        T b = buf[k] * mom + keep * d;                                        \
        buf[k] = b;                                                           \
        p[k] = p[k] - lr * (d + mom * b);                                     \
      }                                                                       \
    } else {                                                                  \
      for (int64_t k = 0; k < n; k++) {                                       \
        T d = g[k] + wd * p[k];                                               \
        T b = buf[k] * mom + keep * d;                                        \
        buf[k] = b;                                                           \
        p[k] = p[k] - lr * b;                                                 \
      }                                                                       \
    }                                                                         \
  }

SGD_KERNEL(sgd_f32, float)
SGD_KERNEL(sgd_f64, double)

static bool sgd_prepare(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
                        em_optim_piece *piece) {
  bool use_buf = c->momentum != 0 && s->buf[0];
  bool first = use_buf && *em_i64(s->step) == 0;
  if (use_buf) *em_i64(s->step) += 1;
  if (em_on_device(s->param)) { /* the step count stays on the host */
    EM_KCALL(em_kernels_of(s->param), sgd_step, s->param, g, use_buf ? s->buf[0] : NULL, c->lr,
                                      c->weight_decay, c->momentum, c->dampening, c->nesterov,
                                      first);
    return false;
  }
  em_sgd_args *args = (em_sgd_args *)s->args;
  *args = (em_sgd_args){
    .p = em_tensor_ptr(s->param),
    .g = em_tensor_ptr(g),
    .buf = use_buf ? em_tensor_ptr(s->buf[0]) : NULL,
    .lr = c->lr,
    .wd = c->weight_decay,
    .mom = c->momentum,
    .damp = c->dampening,
    .first = first,
    .nesterov = c->nesterov,
  };
  *piece = (em_optim_piece){s->param->dtype == EM_DTYPE_F32 ? sgd_f32 : sgd_f64, args,
                            em_tensor_numel(s->param)};
  return true;
}

static em_status sgd_check(const em_optim_config *c, em_error *err) {
  if (!(c->momentum >= 0 && c->momentum <= 1))
    return em_error_set(err, EM_ERR_INVALID, "sgd: momentum must be in [0, 1], got %g",
                        c->momentum);
  if (!(c->dampening >= 0 && c->dampening <= 1))
    return em_error_set(err, EM_ERR_INVALID, "sgd: dampening must be in [0, 1], got %g",
                        c->dampening);
  if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
    return em_error_set(err, EM_ERR_INVALID,
                        "sgd: nesterov needs momentum > 0 and dampening 0 (got momentum %g, "
                        "dampening %g)", c->momentum, c->dampening);
  return EM_OK;
}

/* The momentum buffer, once momentum is on. */
static int sgd_buffers(const em_optim_config *c) { return c->momentum != 0; }

static double sgd_get_momentum(const em_optim_config *c) { return c->momentum; }

static void sgd_set_momentum(em_optim_config *c, double m) {
  EM_ASSERT(m >= 0 && m <= 1);
  c->momentum = m;
}

const em_optim_type em_optim_sgd = {
  .name = "sgd",
  /* PyTorch 1.13 has no default lr for SGD: 0.01. The betas and eps are
   * not SGD's, but a config records them, so they are Adam's as before. */
  .defaults = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
  .check = sgd_check,
  .buffers = sgd_buffers,
  .buffer_names = {"momentum_buffer"},
  .get_momentum = sgd_get_momentum,
  .set_momentum = sgd_set_momentum,
  .prepare = sgd_prepare,
};
