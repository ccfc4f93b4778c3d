/* synthetic.c: a seeded classification set of Gaussian class blobs, made
 * on the fly from (seed, i). */
#include "data-private.h"

#include "em-rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t n;
  int ndim;
  int64_t shape[EM_MAX_DIMS]; /* of one sample */
  int64_t numel;
  int num_classes;
  double noise;
  uint64_t seed;
  uint64_t sample_salt; /* 0 for a training split, another value for a test split */
  float *centres; /* (K, ...sample) */
} synth_set;

static int64_t synth_len(const void *impl) { return ((const synth_set *)impl)->n; }

static int synth_sample_shape(const void *impl, int64_t *shape) {
  const synth_set *s = impl;
  memcpy(shape, s->shape, sizeof(int64_t) * (size_t)s->ndim);
  return s->ndim;
}

static int synth_num_classes(const void *impl) { return ((const synth_set *)impl)->num_classes; }

static em_status synth_get(const void *impl, int64_t i, float *x /* (...sample) */, int64_t *y,
                           em_error *err) {
  const synth_set *s = impl;
  int64_t k = i % s->num_classes;
  em_rng r;
  em_rng_seed(&r, s->seed ^ s->sample_salt ^ ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull));
  const float *c = s->centres + k * s->numel;
  for (int64_t j = 0; j < s->numel; j++) x[j] = c[j] + (float)(s->noise * em_rng_normal(&r));
  *y = k;
  return EM_OK;
}

static void synth_free(void *impl) {
  synth_set *s = impl;
  if (!s) return;
  free(s->centres);
  free(s);
}

static const em_dataset_vtable synth_vtable = {
  .kind = "synthetic",
  .len = synth_len,
  .sample_shape = synth_sample_shape,
  .num_classes = synth_num_classes,
  .get = synth_get,
  .free = synth_free,
};

em_dataset *em_dataset_synthetic(int64_t n, int ndim, const int64_t *shape /* sample */,
                                 int num_classes, double noise, uint64_t seed, em_error *err) {
  return em_dataset_synthetic_split(n, ndim, shape, num_classes, noise, seed, true, err);
}

em_dataset *em_dataset_synthetic_split(int64_t n, int ndim, const int64_t *shape /* sample */,
                                       int num_classes, double noise, uint64_t seed, bool train,
                                       em_error *err) {
  if (n < 1) {
    em_error_set(err, EM_ERR_INVALID, "synthetic dataset: %lld samples; at least 1 is needed",
                 (long long)n);
    return NULL;
  }
  if (ndim < 1 || ndim > EM_MAX_DIMS - 1) {
    em_error_set(err, EM_ERR_INVALID, "synthetic dataset: samples of %d dimensions; 1 to %d are "
                 "supported", ndim, EM_MAX_DIMS - 1);
    return NULL;
  }
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 1 || shape[i] > ((int64_t)1 << 30) / numel) {
      char buf[160];
      em_error_set(err, EM_ERR_INVALID, "synthetic dataset: unusable sample shape %s",
                   em_shape_str(ndim, shape, buf, sizeof buf));
      return NULL;
    }
    numel *= shape[i];
  }
  if (num_classes < 1 || num_classes > (1 << 20) || numel * num_classes > ((int64_t)1 << 30)) {
    em_error_set(err, EM_ERR_INVALID, "synthetic dataset: %d classes of %lld values is not "
                 "usable", num_classes, (long long)numel);
    return NULL;
  }
  if (!(noise >= 0) || !isfinite(noise)) {
    em_error_set(err, EM_ERR_INVALID, "synthetic dataset: noise %g must be >= 0", noise);
    return NULL;
  }
  synth_set *s = calloc(1, sizeof *s);
  float *c = malloc(sizeof(float) * (size_t)(numel * num_classes));
  if (!s || !c) {
    free(s);
    free(c);
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  s->n = n;
  s->ndim = ndim;
  memcpy(s->shape, shape, sizeof(int64_t) * (size_t)ndim);
  s->numel = numel;
  s->num_classes = num_classes;
  s->noise = noise;
  s->seed = seed;
  s->sample_salt = train ? 0 : 0xA24BAED4963EE407ull;
  s->centres = c;
  em_rng r;
  em_rng_seed(&r, seed ^ 0xC3A5C85C97CB3127ull);
  for (int64_t j = 0; j < numel * num_classes; j++) c[j] = (float)em_rng_normal(&r);
  return em_dataset_new(&synth_vtable, s, err);
}

/* The built-in kind "synthetic": 4096 training and 1024 test samples of
 * the shape and classes the model wants. */
static em_dataset *synth_open(const char *dir, bool train, const void *options, em_error *err) {
  (void)dir;
  const em_dataset_want *want = options;
  return em_dataset_synthetic_split(train ? 4096 : 1024, want ? want->sample_ndim : 0,
                                    want ? want->sample_shape : NULL, want ? want->classes : 0,
                                    0.5, 1, train, err);
}

const em_dataset_builtin em_dataset_kind_synthetic = {
  .type = {.name = "synthetic", .help = "made-up samples of the model's input shape and classes "
           "(no files)", .open = synth_open},
};
