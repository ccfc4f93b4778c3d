/* drift-reference.c: a model's drift reference from its training data
 * (em-drift.h's em_drift_ref_of_data). */
#include "em-drift.h"

#include <stdlib.h>
#include <string.h>

#include "em-data.h"
#include "em-device.h"
#include "em-nn.h"
#include "em-ops.h"

#define BATCH 256

/* Runs rows [0, n) of x (n, numel) through the model on the CPU side of
 * its device and writes the predicted classes. */
static em_status predict(em_model *m, float *x, int64_t n, const int64_t *in_shape, int in_nd,
                         int classes, int *pred, em_error *err) {
  int64_t shape[EM_MAX_DIMS + 1];
  shape[0] = n;
  memcpy(shape + 1, in_shape, (size_t)in_nd * sizeof *shape);
  em_scope *s = em_scope_begin();
  em_tensor *t = em_to_device(em_tensor_wrap(EM_DTYPE_F32, in_nd + 1, shape, x),
                              em_model_device(m));
  em_tensor *out = em_model_forward(m, t, false, NULL, err);
  if (out) out = em_to_device(out, em_device_cpu());
  em_status st = em_device_error_pending() ? em_device_error_take(err)
                 : out                    ? EM_OK
                                          : err->status;
  if (st == EM_OK)
    for (int64_t i = 0; i < n; i++) pred[i] = em_drift_argmax(em_f32(out) + i * classes, classes);
  em_scope_end(s);
  return st;
}

em_status em_drift_ref_of_data(em_drift_ref *r, em_model *m, const em_dataset *ds,
                               int64_t max_samples, em_error *err) {
  const em_spec *spec = em_model_spec(m);
  int64_t in_shape[EM_MAX_DIMS], out_shape[EM_MAX_DIMS];
  int in_nd = em_spec_input_shape(spec, in_shape);
  int out_nd = em_spec_output_shape(spec, out_shape);
  char names[EM_DRIFT_MAX_FEATURES][16];
  int nf = em_drift_feature_count(in_shape, in_nd, em_spec_input_dtype(spec) == EM_DTYPE_I64,
                                  names);
  int classes = em_drift_classes(out_shape, out_nd);
  int64_t len = em_dataset_len(ds), numel = em_dataset_sample_numel(ds);
  int64_t n = len < max_samples ? len : max_samples;
  if (n < 20)
    return em_error_set(err, EM_ERR_INVALID, "the training data holds %lld samples: a drift "
                        "reference needs at least 20", (long long)len);
  double *feats = malloc((size_t)(n * (nf ? nf : 1)) * sizeof *feats);
  int *pred = malloc((size_t)n * sizeof *pred);
  float *x = malloc((size_t)(BATCH * numel) * sizeof *x);
  em_status st = feats && pred && x ? EM_OK
                 : em_error_set(err, EM_ERR_NOMEM, "out of memory building a drift reference");
  bool prev = em_no_grad_begin();
  for (int64_t i0 = 0; i0 < n && st == EM_OK; i0 += BATCH) {
    int64_t b = n - i0 < BATCH ? n - i0 : BATCH;
    for (int64_t k = 0; k < b && st == EM_OK; k++) {
      int64_t label, idx = (i0 + k) * len / n; /* spread over the whole split */
      st = em_dataset_get(ds, idx, x + k * numel, &label, err);
      if (st == EM_OK && nf) em_drift_features(in_shape, in_nd, x + k * numel, feats + (i0 + k) * nf);
    }
    if (st == EM_OK && classes) st = predict(m, x, b, in_shape, in_nd, classes, pred + i0, err);
  }
  em_grad_mode_restore(prev);
  if (st == EM_OK) st = em_drift_ref_build(r, nf, names, feats, n, classes ? pred : NULL, classes, err);
  free(feats);
  free(pred);
  free(x);
  return st;
}
