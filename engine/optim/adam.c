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
 * and the f32 loop computes in float like its kernels. Big tensors are
 * split over the thread pool; every element is independent. */
#include "optim-private.h"

#include <math.h>

typedef struct {
  void *p, *m, *v, *vmax; /* (D); vmax NULL without amsgrad */
  const void *g;          /* (D) */
  double l2;              /* Adam's weight decay (0 for AdamW) */
  double shrink;          /* AdamW's 1 - lr * wd (1 for Adam) */
  double beta1, beta2, eps;
  double step_size;       /* lr / (1 - beta1^t) */
  double bc2_sqrt;        /* sqrt(1 - beta2^t) */
} adam_args;

static void adam_f32(void *ctx, int64_t begin, int64_t end) {
  const adam_args *a = ctx;
  float *restrict p = (float *)a->p + begin;              /* (D) */
  float *restrict m = (float *)a->m + begin;              /* (D) */
  float *restrict v = (float *)a->v + begin;              /* (D) */
  float *restrict vmax = a->vmax ? (float *)a->vmax + begin : NULL; /* (D) */
  const float *restrict g = (const float *)a->g + begin;  /* (D) */
  const float l2 = (float)a->l2, shrink = (float)a->shrink;
  const float b1 = (float)a->beta1, b2 = (float)a->beta2;
  const float c1 = (float)(1.0 - a->beta1), c2 = (float)(1.0 - a->beta2);
  const float eps = (float)a->eps, bc2s = (float)a->bc2_sqrt;
  const float neg_step = (float)-a->step_size;
  const int64_t n = end - begin;
  if (!vmax) {
    for (int64_t k = 0; k < n; k++) {
      float pk = p[k] * shrink;
      float gk = g[k] + l2 * pk;
      float mk = m[k] * b1 + c1 * gk;
      float vk = v[k] * b2 + c2 * gk * gk;
      m[k] = mk;
      v[k] = vk;
      float denom = sqrtf(vk) / bc2s + eps;
      p[k] = pk + neg_step * mk / denom;
    }
  } else {
    for (int64_t k = 0; k < n; k++) {
      float pk = p[k] * shrink;
      float gk = g[k] + l2 * pk;
      float mk = m[k] * b1 + c1 * gk;
      float vk = v[k] * b2 + c2 * gk * gk;
      float vm = vmax[k] > vk ? vmax[k] : vk;
      m[k] = mk;
      v[k] = vk;
      vmax[k] = vm;
      float denom = sqrtf(vm) / bc2s + eps;
      p[k] = pk + neg_step * mk / denom;
    }
  }
}

static void adam_f64(void *ctx, int64_t begin, int64_t end) {
  const adam_args *a = ctx;
  double *restrict p = (double *)a->p + begin;              /* (D) */
  double *restrict m = (double *)a->m + begin;              /* (D) */
  double *restrict v = (double *)a->v + begin;              /* (D) */
  double *restrict vmax = a->vmax ? (double *)a->vmax + begin : NULL; /* (D) */
  const double *restrict g = (const double *)a->g + begin;  /* (D) */
  const double l2 = a->l2, shrink = a->shrink, b1 = a->beta1, b2 = a->beta2;
  const double c1 = 1.0 - a->beta1, c2 = 1.0 - a->beta2;
  const double eps = a->eps, bc2s = a->bc2_sqrt, neg_step = -a->step_size;
  const int64_t n = end - begin;
  if (!vmax) {
    for (int64_t k = 0; k < n; k++) {
      double pk = p[k] * shrink;
      double gk = g[k] + l2 * pk;
      double mk = m[k] * b1 + c1 * gk;
      double vk = v[k] * b2 + c2 * gk * gk;
      m[k] = mk;
      v[k] = vk;
      double denom = sqrt(vk) / bc2s + eps;
      p[k] = pk + neg_step * mk / denom;
    }
  } else {
    for (int64_t k = 0; k < n; k++) {
      double pk = p[k] * shrink;
      double gk = g[k] + l2 * pk;
      double mk = m[k] * b1 + c1 * gk;
      double vk = v[k] * b2 + c2 * gk * gk;
      double vm = vmax[k] > vk ? vmax[k] : vk;
      m[k] = mk;
      v[k] = vk;
      vmax[k] = vm;
      double denom = sqrt(vm) / bc2s + eps;
      p[k] = pk + neg_step * mk / denom;
    }
  }
}

void em_adam_update(const em_optim_config *c, em_optim_slot *s, const em_tensor *g) {
  int64_t t = *em_i64(s->step) + 1;
  *em_i64(s->step) = t;
  bool decoupled = c->kind == EM_OPTIM_ADAMW;
  adam_args a = {
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
  em_parallel_for(em_tensor_numel(s->param), EM_OPTIM_GRAIN,
                  s->param->dtype == EM_DTYPE_F32 ? adam_f32 : adam_f64, &a);
}
