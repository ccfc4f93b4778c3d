/* dataset.c: the dataset wrapper over a kind's vtable, and per-channel
 * normalisation. */
#include "data-private.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct em_dataset {
  const em_dataset_vtable *vt;
  void *impl;
  int64_t len;
  int ndim;
  int64_t shape[EM_MAX_DIMS]; /* of one sample */
  int64_t numel;              /* of one sample */
  int num_classes;
  int64_t target_len;         /* 0: one label per sample */
  int n_norm;                 /* 0: off; 1 or shape[0] */
  float *mean, *std;          /* (n_norm) */
};

em_dataset *em_dataset_new(const em_dataset_vtable *vt, void *impl, em_error *err) {
  EM_ASSERT(vt && vt->len && vt->sample_shape && vt->num_classes && vt->get);
  const char *kind = vt->kind ? vt->kind : "dataset";
  em_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    if (vt->free) vt->free(impl);
    em_error_set(err, EM_ERR_NOMEM, "out of memory making a %s dataset", kind);
    return NULL;
  }
  ds->vt = vt;
  ds->impl = impl;
  ds->len = vt->len(impl);
  ds->ndim = vt->sample_shape(impl, ds->shape);
  ds->num_classes = vt->num_classes(impl);
  char buf[160];
  if (ds->len < 0) {
    em_error_set(err, EM_ERR_INVALID, "%s dataset: negative length %lld", kind,
                 (long long)ds->len);
    goto fail;
  }
  /* the loader keeps an index per sample (8 bytes): past 2^32 samples
   * that alone is 32 GiB, so a larger length is a dataset's bug */
  if (ds->len > ((int64_t)1 << 32)) {
    em_error_set(err, EM_ERR_INVALID, "%s dataset: length %lld is more than Ember takes "
                 "(2^32 samples)", kind, (long long)ds->len);
    goto fail;
  }
  if (ds->ndim < 1 || ds->ndim > EM_MAX_DIMS - 1) {
    em_error_set(err, EM_ERR_INVALID, "%s dataset: samples have %d dimensions; 1 to %d are "
                 "supported", kind, ds->ndim, EM_MAX_DIMS - 1);
    goto fail;
  }
  ds->numel = 1;
  for (int i = 0; i < ds->ndim; i++) {
    if (ds->shape[i] < 1 || ds->shape[i] > ((int64_t)1 << 31) ||
        ds->numel > ((int64_t)1 << 40) / ds->shape[i]) {
      em_error_set(err, EM_ERR_INVALID, "%s dataset: unusable sample shape %s", kind,
                   em_shape_str(ds->ndim, ds->shape, buf, sizeof buf));
      goto fail;
    }
    ds->numel *= ds->shape[i];
  }
  ds->target_len = vt->target_len ? vt->target_len(impl) : 0;
  if (vt->target_len && (ds->target_len < 1 || ds->target_len > ((int64_t)1 << 24))) {
    em_error_set(err, EM_ERR_INVALID, "%s dataset: %lld labels per sample; 1 to 2^24 are "
                 "supported", kind, (long long)ds->target_len);
    goto fail;
  }
  if (ds->num_classes < 1) {
    em_error_set(err, EM_ERR_INVALID, "%s dataset: %d classes; at least 1 is needed", kind,
                 ds->num_classes);
    goto fail;
  }
  return ds;
fail:
  em_dataset_free(ds);
  return NULL;
}

void em_dataset_free(em_dataset *ds) {
  if (!ds) return;
  if (ds->vt->free) ds->vt->free(ds->impl);
  free(ds->mean);
  free(ds->std);
  free(ds);
}

int64_t em_dataset_len(const em_dataset *ds) { return ds->len; }

int em_dataset_sample_shape(const em_dataset *ds, int64_t *shape) {
  memcpy(shape, ds->shape, sizeof(int64_t) * (size_t)ds->ndim);
  return ds->ndim;
}

int64_t em_dataset_sample_numel(const em_dataset *ds) { return ds->numel; }
int em_dataset_num_classes(const em_dataset *ds) { return ds->num_classes; }
const char *em_dataset_kind(const em_dataset *ds) {
  return ds->vt->kind ? ds->vt->kind : "dataset";
}

int64_t em_dataset_target_len(const em_dataset *ds) { return ds->target_len; }
int64_t em_dataset_labels_per_sample(const em_dataset *ds) {
  return ds->target_len ? ds->target_len : 1;
}
bool em_dataset_token_samples(const em_dataset *ds) { return ds->vt->token_samples; }

void em_dataset_prefetch(const em_dataset *ds, int64_t i) {
  if (ds->vt->prefetch && i >= 0 && i < ds->len) ds->vt->prefetch(ds->impl, i);
}

em_status em_dataset_get(const em_dataset *ds, int64_t i, float *x /* (...sample) */,
                         int64_t *y, em_error *err) {
  if (i < 0 || i >= ds->len)
    return em_error_set(err, EM_ERR_INVALID, "%s dataset: sample %lld is out of range [0, %lld)",
                        em_dataset_kind(ds), (long long)i, (long long)ds->len);
  em_status st = ds->vt->get(ds->impl, i, x, y, err);
  if (st != EM_OK) return st;
  int64_t T = em_dataset_labels_per_sample(ds);
  for (int64_t j = 0; j < T; j++)
    if (y[j] < 0 || y[j] >= ds->num_classes) {
      char at[48] = "";
      if (ds->target_len) snprintf(at, sizeof at, " at position %lld", (long long)j);
      return em_error_set(err, EM_ERR_FORMAT, "%s dataset: sample %lld has label %lld%s, "
                          "outside [0, %d)", em_dataset_kind(ds), (long long)i, (long long)y[j],
                          at, ds->num_classes);
    }
  if (ds->vt->token_samples)
    for (int64_t k = 0; k < ds->numel; k++)
      if (!(x[k] >= 0 && x[k] < (float)EM_DATASET_MAX_TOKEN) || x[k] != (float)(int64_t)x[k])
        return em_error_set(err, EM_ERR_FORMAT, "%s dataset: sample %lld holds %g at %lld, "
                            "which is no token id", em_dataset_kind(ds), (long long)i,
                            (double)x[k], (long long)k);
  if (ds->n_norm) {
    /* Plain per-channel loop: c runs over the first sample dimension. */
    int64_t inner = ds->numel / ds->shape[0];
    for (int64_t c = 0; c < ds->shape[0]; c++) {
      float m = ds->mean[ds->n_norm == 1 ? 0 : c], s = ds->std[ds->n_norm == 1 ? 0 : c];
      float *xc = x + c * inner;
      for (int64_t k = 0; k < inner; k++) xc[k] = (xc[k] - m) / s;
    }
  }
  return EM_OK;
}

em_status em_dataset_set_normalize(em_dataset *ds, int n, const float *mean, const float *std,
                                   em_error *err) {
  if (n == 0) {
    free(ds->mean);
    free(ds->std);
    ds->mean = ds->std = NULL;
    ds->n_norm = 0;
    return EM_OK;
  }
  if (ds->vt->token_samples)
    return em_error_set(err, EM_ERR_INVALID, "the %s dataset's samples are token ids, which "
                        "are not normalised", em_dataset_kind(ds));
  if (n != 1 && n != ds->shape[0])
    return em_error_set(err, EM_ERR_INVALID, "normalisation has %d values; this dataset has %lld "
                        "channels (give 1 or %lld)", n, (long long)ds->shape[0],
                        (long long)ds->shape[0]);
  for (int c = 0; c < n; c++) {
    if (!isfinite(mean[c]))
      return em_error_set(err, EM_ERR_INVALID, "normalisation mean[%d] is not finite", c);
    if (!(std[c] > 0) || !isfinite(std[c]))
      return em_error_set(err, EM_ERR_INVALID, "normalisation std[%d] is %g; it must be positive",
                          c, (double)std[c]);
  }
  float *m = malloc(sizeof(float) * (size_t)n), *s = malloc(sizeof(float) * (size_t)n);
  if (!m || !s) {
    free(m);
    free(s);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  memcpy(m, mean, sizeof(float) * (size_t)n);
  memcpy(s, std, sizeof(float) * (size_t)n);
  free(ds->mean);
  free(ds->std);
  ds->mean = m;
  ds->std = s;
  ds->n_norm = n;
  return EM_OK;
}
