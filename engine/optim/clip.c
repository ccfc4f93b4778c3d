/* clip.c: gradient clipping by total L2 norm, like
 * torch.nn.utils.clip_grad_norm_ (norm_type 2), except that a non-finite
 * total is returned without touching the gradients. Gradients on a device
 * are summed there (the backend's sumsq kernel, one f32 partial per
 * gradient, read back together and added in double) and scaled there. */
#include "optim-private.h"

#include <math.h>
#include <stdlib.h>

#include "../device/device-private.h"

/* Sum of squares of a contiguous gradient. f32: blocks of 512 values are
 * summed in 16 f32 lanes (one AVX-512 register's worth, which the
 * compiler keeps in vector registers), and the blocks' sums in double: as
 * fast as the f32 sum PyTorch does, and more accurate. A square that
 * overflows f32 (a gradient above ~1e19) makes the norm infinite, as in
 * PyTorch, which the divergence watchdog treats as divergence. */
static double sum_squares(const em_tensor *g) {
  int64_t n = em_tensor_numel(g), k = 0;
  double total = 0;
  if (g->dtype == EM_DTYPE_F32) {
    const float *x = em_f32(g); /* (D) */
    enum { LANES = 16, BLOCK = 512 };
    for (; k + BLOCK <= n; k += BLOCK) {
      float acc[LANES] = {0};
      for (int b = 0; b < BLOCK; b += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[k + b + j] * x[k + b + j];
      float s = 0;
      for (int j = 0; j < LANES; j++) s += acc[j];
      total += s;
    }
    for (; k < n; k++) total += (double)x[k] * (double)x[k];
    return total;
  }
  const double *x = em_f64(g); /* (D) */
  double acc[8] = {0};
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; j++) acc[j] += x[k + j] * x[k + j];
  for (; k < n; k++) acc[0] += x[k] * x[k];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void scale(em_tensor *g, double coef) {
  int64_t n = em_tensor_numel(g);
  if (g->dtype == EM_DTYPE_F32) {
    float *x = em_f32(g); /* (D) */
    const float c = (float)coef;
    for (int64_t k = 0; k < n; k++) x[k] *= c;
  } else {
    double *x = em_f64(g); /* (D) */
    for (int64_t k = 0; k < n; k++) x[k] *= coef;
  }
}

/* The current gradient of p, or NULL when it has none (NULL or stale). */
static em_tensor *current_grad(const em_tensor *p) {
  if (!p || !p->grad || (p->flags & EM_TENSOR_GRAD_STALE)) return NULL;
  EM_ASSERT(em_tensor_is_contiguous(p->grad));
  EM_ASSERT(p->grad->dtype == EM_DTYPE_F32 || p->grad->dtype == EM_DTYPE_F64);
  return p->grad;
}

/* Sum of squares of the n_dev current gradients among params that live
 * on device d (all of them: a model lives on one device). NaN when the
 * device ran out of memory for the partial sums (the trainer collects
 * that error: em_device_error_take). */
static double device_sum_squares(int n, em_tensor *const *params, em_device d, int n_dev) {
  em_scope *sc = em_scope_begin();
  const int64_t shape[1] = {n_dev};
  em_tensor *part = em_empty_on(d, EM_DTYPE_F32, 1, shape); /* (n_dev) */
  float *host = malloc(sizeof *host * (size_t)n_dev);      /* (n_dev) */
  double total = NAN;
  if (part && part->data && host) {
    const em_kernels *k = em_kernels_of(part);
    const int64_t one[1] = {1}, unit[1] = {1};
    int j = 0;
    for (int i = 0; i < n; i++) {
      const em_tensor *g = current_grad(params[i]);
      if (!g || !em_on_device(g)) continue;
      EM_ASSERT(em_device_eq(g->device, d) && "gradients on two devices");
      em_tensor *slot = em_view_raw(part, 1, one, unit, j++); /* (1) */
      slot->device = d;
      k->sumsq(false, slot, g);
    }
    em_tensor_download(part, host);
    total = 0;
    for (j = 0; j < n_dev; j++) total += (double)host[j];
  }
  free(host);
  em_scope_end(sc);
  return total;
}

double em_clip_grad_norm(int n, em_tensor *const *params, double max_norm) {
  double total = 0;
  int n_dev = 0;
  em_device dev = em_device_cpu();
  for (int i = 0; i < n; i++) {
    const em_tensor *g = current_grad(params[i]);
    if (!g) continue;
    if (em_on_device(g)) {
      dev = g->device;
      n_dev++;
    } else {
      total += sum_squares(g);
    }
  }
  if (n_dev) total += device_sum_squares(n, params, dev, n_dev);
  total = sqrt(total);
  if (!isfinite(total)) return total;
  double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (int i = 0; i < n; i++) {
      em_tensor *g = current_grad(params[i]);
      if (!g) continue;
      if (em_on_device(g)) em_kernels_of(g)->unary(EM_KU_MULS, g, g, (double)(float)coef, 0);
      else scale(g, coef);
    }
  return total;
}
