/* init.c: parameter initialisers with PyTorch's distributions (not its
 * random streams): uniform, normal, Kaiming and Xavier. */
#include "nn-private.h"

#include <math.h>

static void fill(em_tensor *t, bool normal, double a, double b, em_rng *rng) {
  EM_ASSERT(em_dtype_is_float(t->dtype) && em_tensor_is_contiguous(t));
  int64_t n = em_tensor_numel(t);
  if (t->dtype == EM_DTYPE_F32) {
    float *p = em_f32(t);
    for (int64_t k = 0; k < n; k++)
      p[k] = (float)(normal ? a + b * em_rng_normal(rng) : a + (b - a) * em_rng_uniform(rng));
  } else {
    double *p = em_f64(t);
    for (int64_t k = 0; k < n; k++)
      p[k] = normal ? a + b * em_rng_normal(rng) : a + (b - a) * em_rng_uniform(rng);
  }
}

void em_init_uniform(em_tensor *t, double lo, double hi, em_rng *rng) {
  fill(t, false, lo, hi, rng);
}

void em_init_normal(em_tensor *t, double mean, double std, em_rng *rng) {
  fill(t, true, mean, std, rng);
}

void em_init_fans(const em_tensor *t, int64_t *fan_in, int64_t *fan_out) {
  if (t->ndim < 2) {
    *fan_in = *fan_out = t->ndim ? t->shape[0] : 1;
    return;
  }
  int64_t receptive = 1;
  for (int d = 2; d < t->ndim; d++) receptive *= t->shape[d];
  *fan_in = t->shape[1] * receptive;
  *fan_out = t->shape[0] * receptive;
}

static double leaky_gain(double a) { return sqrt(2.0 / (1.0 + a * a)); }

void em_init_weight(em_tensor *t, em_weight_init scheme, int64_t fan_in, int64_t fan_out,
                    em_rng *rng) {
  double fi = (double)(fan_in > 0 ? fan_in : 1), fo = (double)(fan_out > 0 ? fan_out : 1);
  switch (scheme) {
  case EM_WEIGHT_INIT_DEFAULT: { /* kaiming_uniform(a = sqrt(5)): bound 1/sqrt(fan_in) */
    double bound = sqrt(3.0) * leaky_gain(sqrt(5.0)) / sqrt(fi);
    fill(t, false, -bound, bound, rng);
    break;
  }
  case EM_WEIGHT_INIT_KAIMING_NORMAL: fill(t, true, 0, leaky_gain(0) / sqrt(fi), rng); break;
  case EM_WEIGHT_INIT_XAVIER_UNIFORM: {
    double bound = sqrt(6.0 / (fi + fo));
    fill(t, false, -bound, bound, rng);
    break;
  }
  case EM_WEIGHT_INIT_XAVIER_NORMAL: fill(t, true, 0, sqrt(2.0 / (fi + fo)), rng); break;
  default: EM_ASSERT(!"unknown weight init scheme");
  }
}

void em_init_kaiming_uniform(em_tensor *t, double a, em_rng *rng) {
  int64_t fi, fo;
  em_init_fans(t, &fi, &fo);
  double bound = sqrt(3.0) * leaky_gain(a) / sqrt((double)(fi > 0 ? fi : 1));
  fill(t, false, -bound, bound, rng);
}

void em_init_kaiming_normal(em_tensor *t, double a, em_rng *rng) {
  int64_t fi, fo;
  em_init_fans(t, &fi, &fo);
  fill(t, true, 0, leaky_gain(a) / sqrt((double)(fi > 0 ? fi : 1)), rng);
}

void em_init_xavier_uniform(em_tensor *t, double gain, em_rng *rng) {
  int64_t fi, fo;
  em_init_fans(t, &fi, &fo);
  double bound = gain * sqrt(6.0 / (double)(fi + fo > 0 ? fi + fo : 1));
  fill(t, false, -bound, bound, rng);
}

void em_init_xavier_normal(em_tensor *t, double gain, em_rng *rng) {
  int64_t fi, fo;
  em_init_fans(t, &fi, &fo);
  fill(t, true, 0, gain * sqrt(2.0 / (double)(fi + fo > 0 ? fi + fo : 1)), rng);
}
