/* device-copy.c: host copies of the trainer's device tensors, for the
 * files that write them on the host (checkpoints, weights). Copies into
 * a live tensor, wherever it lives, are em_tensor_copy_'s. */
#include "train-private.h"

#include "em-device.h"

em_tensor *em_train_host_copy(const em_tensor *t, bool *owned, em_error *err) {
  *owned = false;
  if (!em_on_device(t)) return (em_tensor *)t;
  em_tensor *h = em_tensor_new(t->dtype, t->ndim, t->shape, err);
  if (!h) return NULL;
  h->name = t->name;
  em_tensor_copy_(h, t); /* a download, staged when t is strided */
  *owned = true;
  return h;
}
