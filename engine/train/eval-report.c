/* eval-report.c: a classifier's evaluation report (em-train.h's
 * em_eval_report): the confusion matrix, top-k accuracy, calibration and
 * the most confident mistakes, over a dataset in inference mode.
 *
 * Calibration as Guo et al. 2017 measure it: each sample's confidence is
 * its largest softmax probability (in double, from the f32 logits), the
 * samples fall in EM_EVAL_BINS equal-width bins of confidence, and the
 * expected calibration error is sum_b (n_b / N) |accuracy_b - conf_b|.
 * Top-k counts a sample right when fewer than k classes have a logit
 * strictly above its true class's (ties go its way, as torch.topk's
 * order among equals is unspecified). */
#include "train-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-device.h"
#include "em-ops.h"

/* Keeps the EM_EVAL_WORST most confident mistakes, most confident first. */
static void keep_worst(em_eval_report *r, int64_t index, int truth, int pred, double conf) {
  int n = r->n_worst;
  if (n == EM_EVAL_WORST && conf <= r->worst[n - 1].confidence) return;
  int at = n < EM_EVAL_WORST ? n : n - 1;
  while (at > 0 && r->worst[at - 1].confidence < conf) {
    r->worst[at] = r->worst[at - 1];
    at--;
  }
  r->worst[at] = (em_eval_mistake){index, truth, pred, conf};
  if (n < EM_EVAL_WORST) r->n_worst++;
}

static void add_row(em_eval_report *r, const float *logits, int64_t truth, int64_t index) {
  int k = r->classes, pred = 0;
  for (int c = 1; c < k; c++)
    if (logits[c] > logits[pred]) pred = c;
  double mx = logits[pred], sum = 0;
  for (int c = 0; c < k; c++) sum += exp((double)logits[c] - mx);
  double conf = 1.0 / sum; /* exp(0) / sum */
  int above = 0;
  for (int c = 0; c < k; c++) above += logits[c] > logits[truth];
  r->top_k_correct += above < r->top_k;
  r->confusion[truth * k + pred]++;
  int b = (int)(conf * EM_EVAL_BINS);
  if (b >= EM_EVAL_BINS) b = EM_EVAL_BINS - 1;
  r->bin_n[b]++;
  r->bin_conf[b] += conf;
  r->bin_correct[b] += pred == truth;
  if (pred != truth) keep_worst(r, index, (int)truth, pred, conf);
  r->n++;
}

em_status em_eval_report_run(em_model *m, const em_dataset *ds, int batch_size, int top_k,
                             em_eval_report *r, em_error *err) {
  memset(r, 0, sizeof *r);
  const em_spec *spec = em_model_spec(m);
  int64_t out_shape[EM_MAX_DIMS];
  int out_nd = em_spec_output_shape(spec, out_shape);
  if (out_nd != 1 || out_shape[0] < 2 || em_dataset_target_len(ds) > 0)
    return em_error_set(err, EM_ERR_INVALID, "the evaluation report is for classifiers (one "
                        "vector of classes a sample): '%s' gives another output",
                        em_spec_name(spec));
  r->classes = (int)out_shape[0];
  r->top_k = top_k < r->classes ? top_k : r->classes;
  r->confusion = calloc((size_t)r->classes * (size_t)r->classes, sizeof *r->confusion);
  if (!r->confusion) return em_error_set(err, EM_ERR_NOMEM, "out of memory for the report");
  em_loader_config lc;
  em_loader_config_defaults(&lc);
  lc.batch_size = batch_size;
  lc.shuffle = false;
  lc.drop_last = false;
  em_loader *ld = em_loader_new(ds, &lc, err);
  if (!ld) return err->status;
  int64_t shape[EM_MAX_DIMS + 1];
  int nd = em_dataset_sample_shape(ds, shape + 1);
  em_device dev = em_model_device(m);
  bool prev = em_no_grad_begin();
  em_status st = EM_OK;
  em_batch b;
  em_error lerr = {0};
  int64_t index = 0;
  em_loader_start_epoch(ld, 0);
  while (st == EM_OK && em_loader_next(ld, &b, &lerr)) {
    em_scope *s = em_scope_begin();
    shape[0] = b.n;
    em_tensor *x = em_to_device(em_tensor_wrap(EM_DTYPE_F32, nd + 1, shape, (void *)b.x), dev);
    em_tensor *out = em_model_forward(m, x, false, NULL, err);
    if (out) out = em_contiguous(em_to_device(out, em_device_cpu()));
    if (em_device_error_pending()) st = em_device_error_take(err);
    else if (!out) st = err->status ? err->status : EM_ERR_INVALID;
    for (int64_t i = 0; st == EM_OK && i < b.n; i++) {
      if (b.y[i] < 0 || b.y[i] >= r->classes) {
        st = em_error_set(err, EM_ERR_INVALID, "sample %lld has label %lld, outside the "
                          "model's %d classes", (long long)(index + i), (long long)b.y[i],
                          r->classes);
        break;
      }
      add_row(r, em_f32(out) + i * r->classes, b.y[i], index + i);
    }
    index += b.n;
    em_scope_end(s);
  }
  if (st == EM_OK && lerr.status != EM_OK) {
    st = lerr.status;
    *err = lerr;
  }
  em_grad_mode_restore(prev);
  em_loader_free(ld);
  if (st != EM_OK) {
    em_eval_report_clear(r);
    return st;
  }
  int64_t right = 0;
  for (int c = 0; c < r->classes; c++) right += r->confusion[c * r->classes + c];
  r->accuracy = r->n ? (double)right / (double)r->n : 0;
  r->top_k_accuracy = r->n ? (double)r->top_k_correct / (double)r->n : 0;
  r->ece = 0;
  for (int k = 0; k < EM_EVAL_BINS; k++)
    if (r->bin_n[k])
      r->ece += (double)r->bin_n[k] / (double)r->n *
                fabs((double)r->bin_correct[k] / (double)r->bin_n[k] -
                     r->bin_conf[k] / (double)r->bin_n[k]);
  return EM_OK;
}

void em_eval_report_class(const em_eval_report *r, int c, double *precision, double *recall,
                          double *f1, int64_t *support) {
  int k = r->classes;
  int64_t tp = r->confusion[c * k + c], predicted = 0, actual = 0;
  for (int j = 0; j < k; j++) {
    predicted += r->confusion[j * k + c];
    actual += r->confusion[c * k + j];
  }
  *precision = predicted ? (double)tp / (double)predicted : 0;
  *recall = actual ? (double)tp / (double)actual : 0;
  *f1 = *precision + *recall > 0 ? 2 * *precision * *recall / (*precision + *recall) : 0;
  *support = actual;
}

void em_eval_report_clear(em_eval_report *r) {
  free(r->confusion);
  memset(r, 0, sizeof *r);
}
