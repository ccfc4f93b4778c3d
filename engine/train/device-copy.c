/* device-copy.c: the trainer's tensors between a device and the host, for
 * the files that read or write them on the host (checkpoints, weights):
 * a host copy of a device tensor, and a host tensor copied into a live
 * one wherever it lives. */
#include "train-private.h"

#include "em-device.h"

em_tensor *em_train_host_copy(const em_tensor *t, bool *owned, em_error *err) {
  *owned = false;
  if (!em_on_device(t)) return (em_tensor *)t;
  em_tensor *h = em_tensor_new(t->dtype, t->ndim, t->shape, err);
  if (!h) return NULL;
  h->name = t->name;
  EM_ASSERT(em_tensor_is_contiguous(t));
  em_tensor_download(t, em_tensor_ptr(h));
  *owned = true;
  return h;
}

void em_train_copy_in(em_tensor *live, const em_tensor *src) {
  if (!em_on_device(live)) {
    em_tensor_copy_(live, src);
    return;
  }
  EM_ASSERT(!em_on_device(src) && em_tensor_is_contiguous(src) && em_tensor_is_contiguous(live));
  EM_ASSERT(src->dtype == live->dtype && em_tensor_numel(src) == em_tensor_numel(live));
  em_tensor_upload(live, em_tensor_ptr(src));
}
