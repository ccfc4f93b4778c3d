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

bool em_sgd_prepare(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
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
  s->args.sgd = (em_sgd_args){
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
  *piece = (em_optim_piece){s->param->dtype == EM_DTYPE_F32 ? sgd_f32 : sgd_f64, &s->args.sgd,
                            em_tensor_numel(s->param)};
  return true;
}
