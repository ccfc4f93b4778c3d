/* macro-f1.c: the metric "macro_f1" as an Ember plugin: the unweighted
 * mean over classes of F1 = 2 TP / (2 TP + FP + FN), with the predicted
 * class the argmax of the logits (the first on ties). Like scikit-learn's
 * f1_score(average="macro"), the mean runs over the classes that occur in
 * the labels or the predictions. This file is the example to copy for a
 * metric plugin. */
#include <stdlib.h>

#include "em-plugin.h"

static em_status macro_f1(int64_t n, int k, const float *logits /* (N, K) */,
                          const int64_t *labels /* (N) */, double *value, em_error *err) {
  if (n <= 0 || k <= 0) return em_error_set(err, EM_ERR_INVALID, "no samples to score");
  int64_t *count = calloc((size_t)k * 3, sizeof *count); /* tp, fp, fn per class */
  if (!count) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  int64_t *tp = count, *fp = count + k, *fn = count + 2 * k;
  for (int64_t i = 0; i < n; i++) {
    const float *row = logits + i * k;
    int pred = 0;
    for (int c = 1; c < k; c++)
      if (row[c] > row[pred]) pred = c;
    int64_t y = labels[i];
    if (y < 0 || y >= k) {
      free(count);
      return em_error_set(err, EM_ERR_INVALID, "label %lld of sample %lld is outside [0, %d)",
                          (long long)y, (long long)i, k);
    }
    if (pred == y) tp[y]++;
    else {
      fp[pred]++;
      fn[y]++;
    }
  }
  double sum = 0;
  int classes = 0;
  for (int c = 0; c < k; c++) {
    int64_t d = 2 * tp[c] + fp[c] + fn[c];
    if (d == 0) continue; /* neither a label nor a prediction */
    sum += 2.0 * (double)tp[c] / (double)d;
    classes++;
  }
  free(count);
  *value = classes ? sum / classes : 0;
  return EM_OK;
}

static const em_metric_type f1_type = {
    .name = "macro_f1",
    .help = "Macro-averaged F1 score of the argmax predictions",
    .compute = macro_f1,
};

static em_status f1_init(em_plugin_host *host, em_error *err) {
  return em_plugin_add_metric(host, &f1_type, err);
}

static const em_plugin_table f1_table = {
    .api_version = EM_PLUGIN_API_VERSION,
    .name = "macro-f1",
    .version = "1.0",
    .description = "Macro-averaged F1 score at evaluation (metric macro_f1)",
    .init = f1_init,
};

EM_PLUGIN_EXPORT const em_plugin_table *ember_plugin_entry(void) { return &f1_table; }
