/* kern-optim.h: one element of the optimiser steps (the sgd_step and
 * adam_step kernels), bit for bit the f32 loops of engine/optim/sgd.c and
 * adam.c: the same float operations in the same order, with the scalars
 * rounded to float once. The per-step scalars of Adam are computed in
 * double on the host (em_kadam_scalars_init), as PyTorch's Python code
 * does, and passed to the kernel by value.
 *
 * SGD (PyTorch 1.13):
 *   d = g + wd * p
 *   buf = first ? d : momentum * buf + (1 - dampening) * d
 *   d = nesterov ? d + momentum * buf : buf        (with a buffer)
 *   p = p - lr * d
 * Adam / AdamW, t the step count after this update:
 *   Adam: g = g + wd * p            AdamW: p = p * (1 - lr * wd)
 *   m = beta1 m + (1 - beta1) g;    v = beta2 v + (1 - beta2) g g
 *   p = p - (lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps) */
#pragma once

#include "kern-common.h"

/* SGD's scalars, rounded to float as sgd.c rounds them. */
typedef struct em_ksgd_scalars {
  float lr, wd, mom, keep; /* keep = 1 - dampening */
  int nesterov, first;
} em_ksgd_scalars;

EM_HD void em_ksgd_scalars_init(em_ksgd_scalars *s, double lr, double wd, double momentum,
                                double dampening, int nesterov, int first) {
  s->lr = (float)lr;
  s->wd = (float)wd;
  s->mom = (float)momentum;
  s->keep = (float)(1.0 - dampening);
  s->nesterov = nesterov;
  s->first = first;
}

/* One element: p (and buf when not NULL) updated in place from g. */
EM_HD void em_ksgd(const em_ksgd_scalars *s, float *p, float g, float *buf) {
  float d = g + s->wd * *p;
  if (!buf) {
    *p = *p - s->lr * d;
  } else if (s->first) {
    *buf = d;
    if (s->nesterov) d = d + s->mom * d;
    *p = *p - s->lr * d;
  } else {
    float b = *buf * s->mom + s->keep * d;
    *buf = b;
    *p = *p - s->lr * (s->nesterov ? d + s->mom * b : b);
  }
}

/* Adam's scalars for one step, computed in double and rounded to float as
 * adam.c does. */
typedef struct em_kadam_scalars {
  float l2, shrink;     /* Adam's weight decay (0 for AdamW); AdamW's 1 - lr wd (1 for Adam) */
  float b1, b2, c1, c2; /* beta1, beta2, 1 - beta1, 1 - beta2 */
  float eps, bc2s;      /* sqrt(1 - beta2^t) */
  float neg_step;       /* -lr / (1 - beta1^t) */
} em_kadam_scalars;

EM_HD void em_kadam_scalars_init(em_kadam_scalars *s, int64_t step, double lr, double beta1,
                                 double beta2, double eps, double wd, int decoupled) {
  s->l2 = (float)(decoupled ? 0.0 : wd);
  s->shrink = (float)(decoupled ? 1.0 - lr * wd : 1.0);
  s->b1 = (float)beta1;
  s->b2 = (float)beta2;
  s->c1 = (float)(1.0 - beta1);
  s->c2 = (float)(1.0 - beta2);
  s->eps = (float)eps;
  s->bc2s = (float)sqrt(1.0 - pow(beta2, (double)step));
  s->neg_step = (float)-(lr / (1.0 - pow(beta1, (double)step)));
}

/* One element: p, m, v updated in place from g. */
EM_HD void em_kadam(const em_kadam_scalars *s, float *p, float g, float *m, float *v) {
  float pk = *p * s->shrink;
  float gk = g + s->l2 * pk;
  float mk = *m * s->b1 + s->c1 * gk;
  float vk = *v * s->b2 + s->c2 * gk * gk;
  *m = mk;
  *v = vk;
  float denom = sqrtf(vk) / s->bc2s + s->eps;
  *p = pk + s->neg_step * mk / denom;
}
