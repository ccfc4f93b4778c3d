/* evaluate.c: loss and accuracy of a model over a dataset (per token for
 * a dataset of a label per position), in inference mode (no tape, batch
 * norm on running stats, dropout off), and the plugins' metrics over its
 * outputs. A model on a device evaluates there:
 * each batch is copied to it, the loss and the predictions come back (and
 * the outputs, when plugins' metrics want them); out of device memory is
 * EM_ERR_NOMEM with the allocator's message. */
#include "train-private.h"

#include <string.h>

#include "em-device.h"
#include "em-ops.h"

em_status em_evaluate(em_model *m, const em_dataset *ds, int batch_size, em_loss_kind loss,
                      double label_smoothing, double *mean_loss, double *accuracy,
                      em_error *err) {
  return em_evaluate_gathered(m, ds, batch_size, loss, label_smoothing, NULL, NULL, mean_loss,
                              accuracy, err);
}

static em_status evaluate(em_model *m, const em_dataset *ds, int batch_size, em_loss_kind loss,
                          double label_smoothing, em_eval_gather_fn gather, void *gather_user,
                          bool (*go_on)(void *), void *go_user, bool *cut_short,
                          double *mean_loss, double *accuracy, em_error *err);

em_status em_evaluate_gathered(em_model *m, const em_dataset *ds, int batch_size,
                               em_loss_kind loss, double label_smoothing,
                               em_eval_gather_fn gather, void *gather_user, double *mean_loss,
                               double *accuracy, em_error *err) {
  return evaluate(m, ds, batch_size, loss, label_smoothing, gather, gather_user, NULL, NULL, NULL,
                  mean_loss, accuracy, err);
}

em_status em_evaluate_until(em_model *m, const em_dataset *ds, int batch_size, em_loss_kind loss,
                            double label_smoothing, bool (*go_on)(void *go_user), void *go_user,
                            bool *cut_short, double *mean_loss, double *accuracy, em_error *err) {
  return evaluate(m, ds, batch_size, loss, label_smoothing, NULL, NULL, go_on, go_user, cut_short,
                  mean_loss, accuracy, err);
}

static em_status evaluate(em_model *m, const em_dataset *ds, int batch_size, em_loss_kind loss,
                          double label_smoothing, em_eval_gather_fn gather, void *gather_user,
                          bool (*go_on)(void *), void *go_user, bool *cut_short,
                          double *mean_loss, double *accuracy, em_error *err) {
  bool cut = false;
  if (cut_short) *cut_short = false;
  em_status fit = em_train_check_fit(em_model_spec(m), ds, "evaluation", loss, err);
  if (fit != EM_OK) return fit;
  em_loader_config lc;
  em_loader_config_defaults(&lc);
  lc.batch_size = batch_size;
  lc.shuffle = false;
  lc.drop_last = false;
  em_status mst;
  em_eval_metrics *metrics = em_eval_metrics_begin(em_model_spec(m), &mst, err); /* plugins' */
  if (mst != EM_OK) return mst;
  int64_t per = em_dataset_labels_per_sample(ds); /* T: the loss and accuracy are per token */
  if (metrics && em_dataset_target_len(ds)) {
    em_eval_metrics_free(metrics);
    return em_error_set(err, EM_ERR_UNSUPPORTED, "the spec's metrics take one label per sample; "
                        "the %s dataset has a label per position", em_dataset_kind(ds));
  }
  em_loader *ld = em_loader_new(ds, &lc, err);
  if (!ld) {
    em_eval_metrics_free(metrics);
    return err ? err->status : EM_ERR_INVALID;
  }
  em_device dev = em_model_device(m);
  double total_loss = 0;
  int64_t correct = 0, seen = 0;
  em_status st = EM_OK;
  bool prev = em_no_grad_begin();
  em_loader_start_epoch(ld, 0);
  em_batch b;
  em_error lerr = {0};
  /* a stop is looked at before each batch: a closing window waits for one
   * batch, not for the whole test set; the last batch is always finished
   * (it is as long to finish as to cut, and the evaluation is then whole) */
  int64_t batches = em_loader_batches_per_epoch(ld), done = 0;
  while (em_loader_next(ld, &b, &lerr)) {
    if ((cut = go_on && ++done < batches && !go_on(go_user))) break;
    em_scope *s = em_scope_begin();
    em_tensor *x = em_train_batch_x(ds, &b); /* f32 samples, or i64 tokens */
    em_tensor *y = em_train_batch_y(ds, &b); /* (N) or (N, T), on the host */
    x = em_to_device(x, dev); /* x itself on the CPU */
    em_tensor *out = em_model_forward(m, x, false, NULL, err);
    em_tensor *l = out ? em_train_loss(loss, out, y, label_smoothing) : NULL;
    /* the predictions are the argmax over classes, the last dimension */
    em_tensor *pred = out ? em_argmax(out, out->ndim - 1, false) : NULL;
    if (pred) pred = em_to_device(pred, em_device_cpu());
    if (em_device_error_pending()) {
      em_scope_end(s);
      st = em_device_error_take(err);
      break;
    }
    if (!out) {
      em_scope_end(s);
      st = err ? err->status : EM_ERR_INVALID;
      break;
    }
    total_loss += em_tensor_item(l) * (double)b.n; /* every sample has T labels */
    for (int64_t i = 0; i < b.n * per; i++) correct += em_i64(pred)[i] == b.y[i];
    if (metrics) out = em_to_device(out, em_device_cpu());
    if (metrics && (st = em_eval_metrics_add(metrics, out, b.y, err)) != EM_OK) {
      em_scope_end(s);
      break;
    }
    seen += b.n;
    em_scope_end(s);
  }
  if (st == EM_OK && lerr.status != EM_OK) {
    st = lerr.status;
    if (err) *err = lerr;
  }
  em_grad_mode_restore(prev);
  em_loader_free(ld);
  if (cut && st == EM_OK) {
    em_eval_metrics_free(metrics);
    *cut_short = true;
    return EM_OK;
  }
  if (metrics && st == EM_OK && gather) {
    int64_t out_shape[EM_MAX_DIMS];
    em_spec_output_shape(em_model_spec(m), out_shape);
    st = em_eval_metrics_gather(metrics, (int)out_shape[0], gather, gather_user, err);
  }
  if (metrics && st == EM_OK) st = em_eval_metrics_end(metrics, err);
  else em_eval_metrics_free(metrics);
  if (st != EM_OK) return st;
  *mean_loss = seen ? total_loss / (double)seen : 0;
  *accuracy = seen ? (double)correct / (double)(seen * per) : 0;
  return EM_OK;
}
