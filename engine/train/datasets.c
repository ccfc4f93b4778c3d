/* datasets.c: opening the dataset a training config names for its spec's
 * model (the kinds and their opening are engine/data's registry), and
 * checking that the model fits it. */
#include "em-train.h"

#include <string.h>

/* Whether msg already says which dataset it is about: it starts "name:"
 * or quotes 'name'. */
static bool names_dataset(const char *msg, const char *name) {
  size_t n = strlen(name);
  if (strncmp(msg, name, n) == 0 && msg[n] == ':') return true;
  for (const char *q = strchr(msg, '\''); q; q = strchr(q + 1, '\''))
    if (strncmp(q + 1, name, n) == 0 && q[1 + n] == '\'') return true;
  return false;
}

em_dataset *em_train_open_dataset(const em_spec *spec, const em_train_config *c, bool train,
                                  em_error *err) {
  int64_t shape[EM_MAX_DIMS], out[EM_MAX_DIMS];
  int nd = em_spec_input_shape(spec, shape);
  /* the classes: the output's last dimension (a language model's
   * (L, V) outputs: V); a text kind encodes with the spec's tokenizer */
  int on = em_spec_output_shape(spec, out);
  const em_dataset_want want = {shape, nd, (int)out[on - 1], em_spec_tokenizer(spec)};
  em_dataset *ds = em_dataset_open_want(c->dataset, c->data_dir, train, &want, err);
  /* A reader's message names its file, not always the kind: say which
   * dataset could not be opened (a misfit's message names it already). */
  if (!ds) {
    if (err && !names_dataset(err->msg, c->dataset)) em_error_prefix(err, "%s", c->dataset);
    return NULL;
  }
  if (em_train_check_fit(spec, ds, c->dataset, c->loss, err) != EM_OK) {
    em_dataset_free(ds);
    return NULL;
  }
  return ds;
}

/* The spec's input and output must fit the dataset's samples and classes. */
em_status em_train_check_fit(const em_spec *spec, const em_dataset *ds, const char *dsname,
                             em_loss_kind loss, em_error *err) {
  int64_t ss[EM_MAX_DIMS], ds_shape[EM_MAX_DIMS], out[EM_MAX_DIMS];
  bool tokens = em_dataset_token_samples(ds);
  if (em_spec_input_dtype(spec) != EM_DTYPE_F32 && !tokens)
    return em_error_set(err, EM_ERR_INVALID,
                        "the spec's input is %s indices (for an Embedding) but the %s dataset "
                        "gives f32 samples; of the built-in datasets only text gives token ids "
                        "(IDX, CIFAR-10, CSV and synthetic hold images and feature rows)",
                        em_dtype_name(em_spec_input_dtype(spec)), dsname);
  if (em_spec_input_dtype(spec) == EM_DTYPE_F32 && tokens)
    return em_error_set(err, EM_ERR_INVALID,
                        "the %s dataset gives token ids, for a model whose input is i64 indices "
                        "(an Embedding): declare \"input\": {\"shape\": [...], \"dtype\": "
                        "\"i64\"}", dsname);
  int sn = em_spec_input_shape(spec, ss), dn = em_dataset_sample_shape(ds, ds_shape);
  int64_t sp = 1, dp = 1;
  for (int i = 0; i < sn; i++) sp *= ss[i];
  for (int i = 0; i < dn; i++) dp *= ds_shape[i];
  bool same = sn == dn;
  for (int i = 0; same && i < sn; i++) same = ss[i] == ds_shape[i];
  if (!same) {
    char a[96], b[96];
    return em_error_set(err, EM_ERR_SHAPE,
                        "the spec's input shape %s does not match the %s samples' shape %s%s",
                        em_shape_str(sn, ss, a, sizeof a), dsname,
                        em_shape_str(dn, ds_shape, b, sizeof b),
                        sp == dp ? " (same size: change \"input\" in the spec)" : "");
  }
  int on = em_spec_output_shape(spec, out);
  int classes = em_dataset_num_classes(ds);
  int64_t T = em_dataset_target_len(ds);
  if (T) { /* a label per position: outputs (T, K), cross-entropy over K */
    char a[96];
    if (on != 2 || out[0] != T)
      return em_error_set(err, EM_ERR_SHAPE,
                          "the model outputs %s per sample but the %s dataset has a label for "
                          "each of %lld positions: the output must be [%lld, classes]",
                          em_shape_str(on, out, a, sizeof a), dsname, (long long)T,
                          (long long)T);
    if (loss != EM_LOSS_CROSS_ENTROPY)
      return em_error_set(err, EM_ERR_INVALID, "the %s dataset's labels per position take the "
                          "cross_entropy loss", dsname);
    if (out[1] < classes)
      return em_error_set(err, EM_ERR_SHAPE,
                          "the model outputs %lld classes per position but the %s dataset has "
                          "%d (its tokenizer's vocabulary): the last layer needs %d outputs",
                          (long long)out[1], dsname, classes, classes);
    return EM_OK;
  }
  if (on != 1 || (loss == EM_LOSS_CROSS_ENTROPY && out[0] < classes) ||
      (loss == EM_LOSS_MSE && out[0] != classes)) {
    char a[96];
    return em_error_set(err, EM_ERR_SHAPE,
                        "the model outputs %s per sample but the %s dataset has %d classes: "
                        "the last layer needs %d outputs",
                        em_shape_str(on, out, a, sizeof a), dsname, classes, classes);
  }
  return EM_OK;
}
