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
  em_spec_output_shape(spec, out);
  em_dataset *ds = em_dataset_open_named(c->dataset, c->data_dir, train, shape, nd, (int)out[0],
                                         err);
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
  if (em_spec_input_dtype(spec) != EM_DTYPE_F32) /* the loader's batches are f32 */
    return em_error_set(err, EM_ERR_INVALID,
                        "the spec's input is %s indices (for an Embedding) but the %s dataset "
                        "gives f32 samples; the built-in datasets (IDX, CIFAR-10, CSV, synthetic) "
                        "hold images and feature rows, not indices",
                        em_dtype_name(em_spec_input_dtype(spec)), dsname);
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
