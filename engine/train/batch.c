/* batch.c: a loader's batch as the tensors a model and its loss take:
 * the samples as floats, or as i64 token ids for a dataset of token
 * samples (an Embedding's input); the labels (N), or (N, T) for a
 * dataset of a label per position. */
#include "train-private.h"

em_tensor *em_train_batch_x(const em_dataset *ds, const em_batch *b) {
  int64_t shape[EM_MAX_DIMS + 1];
  shape[0] = b->n;
  int nd = em_dataset_sample_shape(ds, shape + 1);
  if (!em_dataset_token_samples(ds))
    return em_tensor_wrap(EM_DTYPE_F32, nd + 1, shape, (void *)b->x); /* (N, ...sample) */
  em_tensor *x = em_empty(EM_DTYPE_I64, nd + 1, shape);                 /* (N, L) */
  int64_t n = b->n * em_dataset_sample_numel(ds);
  int64_t *ids = em_i64(x);
  for (int64_t i = 0; i < n; i++) ids[i] = (int64_t)b->x[i]; /* whole: em_dataset_get checked */
  return x;
}

em_tensor *em_train_batch_y(const em_dataset *ds, const em_batch *b) {
  int64_t shape[2] = {b->n, em_dataset_target_len(ds)};
  return em_tensor_wrap(EM_DTYPE_I64, shape[1] ? 2 : 1, shape, (void *)b->y); /* (N) or (N, T) */
}
